"""Ticks: the registered passes run in order (patrol → workflow → lanes → cleanup →
poll) under a single-flight lease per machine, so overlapping ticks — in this process,
another process or another machine — skip instead of double-claiming; the cluster's
passes under leases of their own (``cluster.take``). A tick that finds the event log
unchanged and nothing time-based due costs one indexed read and writes nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laneboard.domain.cursor import LogMarks
from laneboard.supervisor import cluster, leases, notifier, patrol, poll, session_files, workflow
from laneboard.supervisor.runtime import Runtime

TICK_LOCK = "tick"  # per machine: tick_lock(machine)
PATROL_EVENT_S = 60.0  # patrol (time-based) on an event tick: at most this often
RETRY_FLOOR_MS = 1_000  # a backed-off card is retried by a tick this long after one at least
FREED = "pool.freed"  # not an event: a turn of this pool ended, its slot is free
# On an event tick a pass runs when some news is not in its skip set (an event type it
# does not know always runs it); the periodic tick and a forced one run every pass.
SKIP: dict[str, frozenset[str]] = {
    "poll": frozenset({"report.added", "alert"}),
    # a new card starts in backlog or todo: nothing for reviews, acceptance or epics yet
    "workflow": frozenset({"card.created", "alert", "dispatch.deferred", "lane.created"}),
    # landing and clean-up follow a card's end (a move), and lanes' own events
    "lanes": frozenset(
        {
            "card.created",
            "card.edited",
            "report.added",
            "comment.added",
            "alert",
            "dispatch.deferred",
            "lane.created",
            "card.released",
            "card.fenced",
            FREED,
        }
    ),
    # time-based: the periodic tick, and an event tick at most every PATROL_EVENT_S
    "patrol": frozenset(),
}
SKIP["cleanup"] = SKIP["lanes"]  # this machine's share of the same work


def tick_lock(machine: str) -> str:
    """The lease that keeps one tick at a time on a machine (the cluster's passes take
    their own: ``cluster.take``)."""
    return f"{TICK_LOCK}:{machine}"


PassFn = Callable[[Runtime, bool], dict[str, Any]]


def _poll_pass(rt: Runtime, dry_run: bool) -> dict[str, Any]:
    return poll.poll(rt, dry_run=dry_run).to_dict()


# name -> pass; kept in tick order. Later capabilities register patrol and workflow.
PASSES: dict[str, PassFn] = {"poll": _poll_pass}
PASSES["patrol"] = patrol.patrol_pass  # notify-only SLA patrol
PASSES["workflow"] = workflow.workflow_pass  # reviews, acceptance, epics


def _lanes_pass(rt: Runtime, dry_run: bool) -> dict[str, Any]:
    """Once per cluster: land done cards that were closed without landing."""
    if dry_run:
        return {"dry_run": True}
    from laneboard.workspace.land import land_closed

    rechecks = rt.lane_rechecks  # a card refused before waits to be tried again
    rechecks.prune()
    landed = [
        r for r in land_closed(rt.store, clones=rt.clones, rechecks=rechecks) if r.get("landed")
    ]
    for r in landed:
        rt.log.info("lanes", "closed card landed", card=r.get("card"))
    return {"landed": landed}


def _cleanup_pass(rt: Runtime, dry_run: bool) -> dict[str, Any]:
    """On every machine, for what this machine holds: clean the lanes of terminal cards
    (worktree, then merged branch), drop the records of lanes that are provably gone, and
    prune the session files (stderr, agent homes, tokens) of cards that ended. Unmerged
    branches are never deleted. A lane in a clone of a remote is only its own machine's
    to clean, so this pass is not once per cluster."""
    if dry_run:
        return {"dry_run": True}
    from laneboard.workspace.land import cleanup_terminal, sweep_lanes
    from laneboard.workspace.lanes import lanes_and_ended
    from laneboard.workspace.orphans import sweep_orphans

    with rt.store.autocommit() as tx:  # one read for both: every lane, and the ended ones
        every, ended = lanes_and_ended(tx)
    rechecks = rt.lane_rechecks  # a lane kept before waits to be judged again
    rechecks.prune()
    cleaned = [
        c
        for c in cleanup_terminal(
            rt.store, clones=rt.clones, machine=rt.machine, lanes=ended, rechecks=rechecks
        )
        if c.get("action") == "cleaned"
    ]
    swept = sweep_lanes(
        rt.store, clones=rt.clones, machine=rt.machine, lanes=every, rechecks=rechecks
    )
    for c in cleaned:
        rt.log.info("lanes", "lane cleaned", lane=c.get("lane"))
    orphans = sweep_orphans(rt.clones, rt.machine, every, lambda: _handoff_dirs(rt), rechecks)
    for o in orphans:
        if o["action"] == "removed":
            rt.log.info("lanes", "lane no record names removed", path=o["path"])
        else:
            rt.log.warn("lanes", f"lane kept: {o['reason']}", path=o["path"])
    pruned = session_files.prune(rt)
    for ref in pruned:
        rt.log.info("lanes", "session files pruned", card=ref)
    return {"cleaned": cleaned, "swept": swept, "orphans": orphans, "pruned": pruned}


def _handoff_dirs(rt: Runtime) -> list[str]:
    """The directories this machine's live handoffs run in."""
    from laneboard.supervisor import records

    with rt.store.autocommit() as tx:
        return [row.target_dir for row in records.queue_rows(tx, machine=rt.machine)]


def _lanes_idle(rt: Runtime) -> dict[str, Any] | None:
    """The lanes pass's result when no done card has a lane to land (one statement)."""
    with rt.store.autocommit() as tx:
        return None if tx.done_cards_with_active_lanes(1) else {"landed": []}


PASSES["lanes"] = _lanes_pass
PASSES["cleanup"] = _cleanup_pass
# once-per-cluster passes that can tell in one read that they have nothing to do: their
# result then, without their lease (None: there is work, the pass runs under its lease)
IDLE: dict[str, Callable[[Runtime], dict[str, Any] | None]] = {
    "workflow": workflow.idle,
    "lanes": _lanes_idle,
}
ORDER = ("patrol", "workflow", "lanes", "cleanup", "poll")


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


def _queued(poll_result: Any) -> bool:
    """Whether a tick's poll may have queued handoff rows (it claimed, failed, or ran)."""
    if poll_result is None:
        return False
    if not isinstance(poll_result, dict) or "claimed" not in poll_result:
        return True
    return bool(poll_result["claimed"])


def _next_due(now: int, interval_s: float, poll_result: Any) -> int:
    """When the next tick is due: after the fallback interval, or sooner when the poll
    passed over a card for a backoff that ends before it (not sooner than
    ``RETRY_FLOOR_MS``: a retry due at once waits for the next news or this floor)."""
    due = now + int(interval_s * 1000)
    retry = poll_result.get("retry_at") if isinstance(poll_result, dict) else None
    if isinstance(retry, int):
        due = min(due, max(retry, now + RETRY_FLOOR_MS))
    return due


def _waits_on_rows(poll_result: Any) -> bool:
    """Whether a poll pass left a card waiting for a queue row to close (or could not say)."""
    if not isinstance(poll_result, dict) or "waits_on_rows" not in poll_result:
        return True
    return bool(poll_result["waits_on_rows"])


class Ticker:
    """Runs ticks; remembers the log's cursor at its last tick to make idle ticks free."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.last_marks: LogMarks | None = None
        self.waits_on_rows = False  # the last poll left a card waiting for a queue row to close
        self.queued = False  # the last tick's poll queued handoff rows (the pool drains them)
        self.next_due_ms = 0
        self._own = f"{rt.machine}:{os.getpid()}:{id(self)}"
        self._following = False  # the notifier's cursor exists (made once per process)
        self._patrolled = float("-inf")  # when patrol last ran (monotonic)
        # the resident supervisor (lb start, lb run) keeps the machine's tick lease from
        # tick to tick and renews it at half its TTL; a one-shot tick gives it back
        self.resident = False
        self._kept: tuple[str, int] | None = None  # (holder, renew at ms) while kept
        self.started_at: int | None = None  # the running tick's start (the pulse writes it)

    def wanted(self, news: set[str] | None) -> list[tuple[str, PassFn]]:
        """The passes a tick runs: all of them, or (an event tick, ``news`` the event
        types it was woken by) those some news is for."""
        passes = registered_passes()
        if news is None:
            return passes
        out = []
        for name, fn in passes:
            if name == "patrol":
                if time.monotonic() - self._patrolled < PATROL_EVENT_S:
                    continue
            elif not news - SKIP.get(name, frozenset()):
                continue
            out.append((name, fn))
        return out

    @property
    def holder(self) -> str:
        """Who holds this machine's tick lease: the instance's tick (fenced with it)."""
        return f"{self.rt.instance}/tick" if self.rt.instance else self._own

    def tick(
        self, *, force: bool = False, dry_run: bool = False, news: set[str] | None = None
    ) -> TickResult:
        """One tick. ``news``: the event types that woke it (None: every pass runs)."""
        rt = self.rt
        started = time.perf_counter()
        marks: LogMarks | None = None
        changed = bool(news)  # woken by news: the caller has read the log just now
        if not changed:
            with rt.store.autocommit() as tx:
                # read before the passes: whatever is logged after it is seen by the next tick
                marks = tx.log_marks()
                changed = self.last_marks is None or tx.log_changed(self.last_marks)
        now = rt.now()
        if not force and not changed and now < self.next_due_ms:
            return TickResult("idle", "nothing changed", {}, (time.perf_counter() - started) * 1000)
        rt.keep_projects = self.resident
        if news is None or any(t.startswith("project.") for t in news):
            rt.projects_seen = None  # a project changed (or who knows): the poll reads them
        if dry_run:
            out = {name: fn(rt, True) for name, fn in registered_passes()}
            return TickResult("ran", "dry run", out, (time.perf_counter() - started) * 1000)
        ttl = cluster.pass_ttl_ms(rt)
        lock, holder = tick_lock(rt.machine), self.holder
        kept = self._kept is not None and self._kept[0] == holder and now < self._kept[1]
        passes = self.wanted(news)
        results: dict[str, Any] = {}
        for name, _ in passes:  # nothing to do: no lease to take and give back for it
            probe = IDLE.get(name)
            if probe is not None:
                try:
                    idle = probe(rt)
                except Exception:  # the pass runs and reports its own failure
                    idle = None
                if idle is not None:
                    results[name] = idle
        shared = [n for n, _ in passes if n in cluster.CLUSTER_PASSES and n not in results]
        runs: dict[str, int] = {}
        busy: dict[str, str] = {}
        if kept and shared and self._following:  # most often another supervisor runs them
            held = cluster.held_elsewhere(rt, shared)
            if held is not None:
                busy, shared = held, []
        alone = kept and self._following and bool(shared) and cluster.one_statement(rt)
        if alone:  # the common case of a resident: one statement takes what is free
            runs, shared = cluster.take_alone(rt, shared)
        if not kept or shared or not self._following:
            try:
                with rt.store.write() as tx:
                    if not kept:
                        self._kept = None
                        taken, note = leases.acquire(tx, lock, holder, ttl, rt.machine)
                        if not taken:
                            return TickResult(
                                "skipped", note, {}, (time.perf_counter() - started) * 1000
                            )
                        if note:
                            rt.log.warn("tick", note)
                    if not self._following:
                        notifier.ensure(tx, rt.machine)
                    # one supervisor of the cluster at a time
                    more, busy = cluster.take(tx, rt, shared)
            except BaseException:
                cluster.give_back_quietly(rt, runs)  # what the one statement took, at once
                raise
            runs = {**runs, **more}
            if not kept and self.resident:
                self._kept = (holder, now + ttl // 2)
        self._following = True
        self.started_at = now
        try:
            for name, fn in passes:
                try:
                    if name in results:
                        continue  # idle: its result is in
                    if name in busy:
                        results[name] = {"skipped": f"running on {busy[name]}"}
                    else:
                        if name == "patrol":
                            self._patrolled = time.monotonic()
                        results[name] = fn(rt, False)
                except Exception as exc:  # one failing pass never stops the others
                    rt.log.error("tick", f"{name} pass failed: {type(exc).__name__}: {exc}")
                    results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            if news is None or "alert" in news:  # alerts are logged as ``alert`` events
                results["notify"] = self._notify()
        finally:
            self.started_at = None
            if runs and self._kept is not None and cluster.one_statement(rt):
                cluster.give_back_alone(rt, runs)
            elif runs or self._kept is None:
                with rt.store.write() as tx:
                    cluster.give_back(tx, rt, runs)
                    if self._kept is None:
                        tx.release_lock(lock, holder)
        # the marks read before the passes: a write that landed during them (an agent's
        # delivery, a finished turn) is still news for the next tick, never counted as seen
        if marks is not None:
            self.last_marks = marks
        if "poll" in results:  # a tick that did not poll leaves the last poll's word
            self.waits_on_rows = _waits_on_rows(results["poll"])
        self.queued = _queued(results.get("poll"))
        self.next_due_ms = _next_due(rt.now(), rt.config.time.tick_interval, results.get("poll"))
        return TickResult("ran", "", results, (time.perf_counter() - started) * 1000)

    def let_go(self) -> None:
        """Give back the tick lease a resident supervisor keeps (at its shutdown)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            with self.rt.store.write() as tx:
                tx.release_lock(tick_lock(self.rt.machine), kept[0])

    def _notify(self) -> dict[str, Any]:
        try:
            return {"sent": len(notifier.flush(self.rt))}
        except Exception as exc:  # a failing sink never stops the tick
            self.rt.log.error("tick", f"notify failed: {type(exc).__name__}: {exc}")
            return {"error": f"{type(exc).__name__}: {exc}"}
