"""The resident supervisor: two clocks (ping, tick), early ticks on events, the pool.

A tick runs the registered passes in order (patrol → workflow → poll; a pass that is
not built yet is simply absent from the registry) under a single-flight lease in the
store, so overlapping ticks — in this process, another process or another machine —
skip instead of double-claiming. A tick that finds the event log unchanged and nothing
time-based due costs one indexed read and writes nothing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laneboard.supervisor import instances, patrol, poll, workflow
from laneboard.supervisor.pool import Pool
from laneboard.supervisor.runtime import Runtime

TICK_LOCK = "tick"
PassFn = Callable[[Runtime, bool], dict[str, Any]]


def _poll_pass(rt: Runtime, dry_run: bool) -> dict[str, Any]:
    return poll.poll(rt, dry_run=dry_run).to_dict()


# name -> pass; kept in tick order. Later capabilities register patrol and workflow.
PASSES: dict[str, PassFn] = {"poll": _poll_pass}
PASSES["patrol"] = patrol.patrol_pass  # notify-only SLA patrol
PASSES["workflow"] = workflow.workflow_pass  # reviews, acceptance, epics


def _lanes_pass(rt: Runtime, dry_run: bool) -> dict[str, Any]:
    """Land done cards closed without landing, clean the lanes of terminal cards
    (worktree, then merged branch) and drop the records of lanes that are provably gone.
    Unmerged branches are never deleted."""
    if dry_run:
        return {"dry_run": True}
    from laneboard.workspace.land import cleanup_terminal, land_closed, sweep_lanes

    landed = [r for r in land_closed(rt.store) if r.get("landed")]
    for r in landed:
        rt.log.info("lanes", "closed card landed", card=r.get("card"))
    cleaned = [c for c in cleanup_terminal(rt.store) if c.get("action") == "cleaned"]
    swept = sweep_lanes(rt.store)
    for c in cleaned:
        rt.log.info("lanes", "lane cleaned", lane=c.get("lane"))
    return {"landed": landed, "cleaned": cleaned, "swept": swept}


PASSES["lanes"] = _lanes_pass
ORDER = ("patrol", "workflow", "lanes", "poll")


def registered_passes() -> list[tuple[str, PassFn]]:
    return [(name, PASSES[name]) for name in ORDER if name in PASSES]


@dataclass
class TickResult:
    state: str  # idle | skipped | ran
    reason: str = ""
    passes: dict[str, Any] = field(default_factory=dict)
    duration_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "passes": self.passes,
            "duration_ms": round(self.duration_ms, 3),
        }


class Ticker:
    """Runs ticks; remembers the event high-water mark to make idle ticks free."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.last_mark: int | None = None
        self.next_due_ms = 0
        self.holder = f"{rt.machine}:{os.getpid()}:{id(self)}"

    def tick(self, *, force: bool = False, dry_run: bool = False) -> TickResult:
        rt = self.rt
        started = time.perf_counter()
        with rt.store.read() as tx:
            mark = tx.max_event_id()
        now = rt.now()
        if not force and mark == self.last_mark and now < self.next_due_ms:
            return TickResult("idle", "nothing changed", {}, (time.perf_counter() - started) * 1000)
        if dry_run:
            out = {name: fn(rt, True) for name, fn in registered_passes()}
            return TickResult("ran", "dry run", out, (time.perf_counter() - started) * 1000)
        ttl = max(rt.config.time.turn_timeout * 1000, 60_000)
        with rt.store.write() as tx:
            if not tx.acquire_lock(TICK_LOCK, self.holder, ttl):
                row = tx.lock_row(TICK_LOCK)
                holder = row["holder"] if row else "?"
                return TickResult(
                    "skipped",
                    f"tick lock held by {holder}",
                    {},
                    (time.perf_counter() - started) * 1000,
                )
            if rt.instance:
                instances.beat(tx, rt.instance, tick_started_at=tx.now())
        results: dict[str, Any] = {}
        try:
            for name, fn in registered_passes():
                try:
                    results[name] = fn(rt, False)
                except Exception as exc:  # one failing pass never stops the others
                    rt.log.error("tick", f"{name} pass failed: {type(exc).__name__}: {exc}")
                    results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            with rt.store.write() as tx:
                tx.release_lock(TICK_LOCK, self.holder)
                if rt.instance:
                    instances.beat(tx, rt.instance, tick_started_at=None)
        with rt.store.read() as tx:
            self.last_mark = tx.max_event_id()
        self.next_due_ms = rt.now() + rt.config.time.tick_interval * 1000
        return TickResult("ran", "", results, (time.perf_counter() - started) * 1000)


class Supervisor:
    """``lb start``: clocks, passes and the session pool in one process."""

    def __init__(
        self,
        rt: Runtime,
        pool: Pool | None = None,
        extra_clocks: list[tuple[str, int, Callable[[], Any]]] | None = None,
    ) -> None:
        self.rt = rt
        self.pool = pool or Pool(rt)
        rt.pool_alive = lambda: not self.pool.stopping
        self.ticker = Ticker(rt)
        self.stop_event = threading.Event()
        self.extra_clocks = extra_clocks or []
        self.ticks = 0
        self.last_tick: TickResult | None = None

    def install_signals(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.rt.log.info("supervisor", f"signal {signum}: shutting down")
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def start(self) -> None:
        rt = self.rt
        with rt.store.write() as tx:
            rt.instance = instances.register(tx, rt.machine, rt.config.time, {"pid": os.getpid()})
        rt.log.info("supervisor", "started", instance=rt.instance)
        self.pool.recover()

    def _beat(self) -> None:
        assert self.rt.instance is not None
        info = {
            "pid": os.getpid(),
            "next_tick_at": self.ticker.next_due_ms,
            "ticks": self.ticks,
            "pool": self.pool.describe(),
            "last_tick": self.last_tick.to_dict() if self.last_tick else None,
        }
        with self.rt.store.write() as tx:
            instances.beat(tx, self.rt.instance, info=info)

    def ping(self) -> None:
        """Liveness of the pool and of agent processes; recovers rows whose agent died."""
        self.pool.recover()
        self.pool.close_idle(self.rt.config.time.project_idle)

    def run(self, *, max_seconds: float | None = None) -> None:
        """Run until stopped (signal or ``stop_event``)."""
        rt = self.rt
        t = rt.config.time
        if rt.instance is None:
            self.start()
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        next_beat = next_ping = 0
        next_extra = {name: 0 for name, _, _ in self.extra_clocks}
        wake_at: float | None = 0.0  # tick at once on start
        last_mark = -1
        try:
            while not self.stop_event.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    break
                now = rt.now()
                if now >= next_beat:
                    self._beat()
                    next_beat = now + t.pool_heartbeat * 1000
                if now >= next_ping:
                    self.ping()
                    next_ping = now + t.ping_interval * 1000
                for name, every_ms, fn in self.extra_clocks:
                    if now >= next_extra[name]:
                        try:
                            fn()
                        except Exception as exc:
                            rt.log.error("supervisor", f"{name} failed: {exc}")
                        next_extra[name] = now + every_ms
                with rt.store.read() as tx:
                    mark = tx.max_event_id()
                if mark != last_mark or self.pool.changed.is_set():
                    self.pool.changed.clear()
                    last_mark = mark
                    if wake_at is None:
                        wake_at = time.monotonic() + rt.config.debounce_ms / 1000
                due = now >= self.ticker.next_due_ms
                if due or (wake_at is not None and time.monotonic() >= wake_at):
                    wake_at = None
                    self.last_tick = self.ticker.tick(force=due)
                    if self.last_tick.state == "ran":
                        self.ticks += 1
                self.pool.drain()
                self.stop_event.wait(rt.config.event_poll_ms / 1000)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        rt = self.rt
        self.pool.shutdown()
        if rt.instance is not None:
            with rt.store.write() as tx:
                instances.stop(tx, rt.instance)
        rt.log.info("supervisor", "stopped", instance=rt.instance)
