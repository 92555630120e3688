"""The resident supervisor: two clocks (ping, tick), early ticks on events, the pool,
and every run the supervisor drives on its own clock (``supervisor.runs.RunsClock``).

A tick runs the registered passes in order (patrol → workflow → poll; a pass that is
not built yet is simply absent from the registry) under a single-flight lease in the
store, so overlapping ticks — in this process, another process or another machine —
skip instead of double-claiming. A tick that finds the event log unchanged and nothing
time-based due costs one indexed read and writes nothing.

Between clocks the loop sleeps in ``store.notify.Broadcaster.wait``: a write through
this process (an agent's call on the board socket, a turn ending) wakes it at once, a
write by another process or machine through NOTIFY on PostgreSQL, and polling every
``event_poll_ms`` only while nothing listens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from laneboard.domain.cursor import LogMarks
from laneboard.store.notify import Broadcaster, WakingEvent
from laneboard.store.quiet import QUIET_TYPES
from laneboard.supervisor import cluster, instances, notifier
from laneboard.supervisor.pool import Pool
from laneboard.supervisor.reports_text import SKEW_SAID_MS
from laneboard.supervisor.runs import RunsClock
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.ticker import FREED, Ticker, TickResult

CLOCK_CHECK_S = 1.0  # the longest the loop sleeps without looking at its clocks
DRAIN_POLL_S = 1.0  # the queue is read between ticks and turn ends this often at most
RUNS_READ_S = 0.25  # the runs the supervisor drives are read this often at most
RUNS_IDLE_S = 5.0  # while it drives none: on a run's news, else this often
STORE_RETRY_MAX_S = 30.0  # the longest wait between tries while the database is away
STORE_SAY_EVERY_S = 60.0  # the log says the database is away at most this often

# Event types no pass acts on: the turn path's own records, claims and their credentials.
# They wake the loop (one read) but no tick; a turn's end frees its slot through FREED.
NOISE = QUIET_TYPES  # announced on the quiet channel, which this loop does not listen to
STOP_REQUESTED = "turn.stop_requested"  # ``lb card stop``: the pool reads it on this news


@dataclass
class LoopState:
    """What the supervisor's loop carries from one round to the next."""

    marks: LogMarks  # the log's marks as last read
    next_extra: dict[str, int]  # when each extra clock is due (ms)
    next_beat: int = 0
    next_ping: int = 0
    wake_at: float | None = 0.0  # when the debounced tick comes (monotonic; 0: at once)
    last_tick: float = float("-inf")  # when the last tick ended (monotonic)
    news: set[str] | None = None  # what the next tick is for (None: every pass)
    last_drain: float = float("-inf")
    last_runs: float = float("-inf")
    runs_news: bool = True  # a run's event was logged since the runs were last read
    slot_freed: bool = False  # a turn ended since the queue was last read


class Supervisor:
    """``lb start``: clocks, passes and the session pool in one process."""

    def __init__(
        self,
        rt: Runtime,
        pool: Pool | None = None,
        extra_clocks: list[tuple[str, int, Callable[[], Any]]] | None = None,
        *,
        drive_runs: bool = True,
    ) -> None:
        self.rt = rt
        self.pool = pool or Pool(rt)
        # lb start ticks every run on its own clock; lb run drives its one run itself
        self.runs: RunsClock | None = RunsClock(rt, self.pool) if drive_runs else None
        rt.pool_alive = lambda: not self.pool.stopping
        self.ticker = Ticker(rt)
        self.ticker.resident = True
        self.wakeups = Broadcaster(rt.store, poll_s=rt.config.event_poll_ms / 1000, quiet=NOISE)
        self.stop_event = WakingEvent()
        self.stop_event.wakeups = self.wakeups
        self.pool.changed.wakeups = self.wakeups
        self.extra_clocks = extra_clocks or []
        self.ticks = 0
        self.last_tick: TickResult | None = None
        self.store_failures = 0  # the loop's passes in a row that found the database away
        self.store_said = float("-inf")  # when the log last said so (monotonic)
        self.monotonic: Callable[[], float] = time.monotonic  # the debounce's clock

    def install_signals(self) -> None:
        """SIGTERM and SIGINT stop the loop. The handler runs on the main thread between
        any two of its bytecodes, so it takes no lock (the interrupted code may hold it —
        the log's, the stop event's — and would wait on itself forever): it writes the
        signal's number to a pipe, and a thread of its own logs it and sets the stop."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)

        def handler(signum: int, _frame: Any) -> None:
            with contextlib.suppress(BlockingIOError):  # a full pipe: a stop is on its way
                os.write(write_fd, bytes([signum]))

        def relay() -> None:
            while got := os.read(read_fd, 1):
                self.rt.log.info("supervisor", f"signal {got[0]}: shutting down")
                self.stop_event.set()

        threading.Thread(target=relay, name="laneboard-signals", daemon=True).start()
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def start(self) -> None:
        rt = self.rt
        with rt.store.write() as tx:
            rt.instance = instances.register(
                tx, rt.machine, rt.config.time, {"pid": os.getpid(), **cluster.declared(rt)}
            )
        rt.log.info("supervisor", "started", instance=rt.instance)
        if abs(rt.clock_offset_ms) >= SKEW_SAID_MS:  # failover allows for it; people may not
            rt.log.warn(
                "supervisor",
                f"this machine's clock is {rt.clock_offset_ms / 1000:+.0f}s off the "
                "database server's: fix its time sync (NTP)",
            )
        from laneboard.ops.table import by_name

        by_name()  # the board socket's operation table, built once here, not on a turn
        notifier.start(rt)
        self.pool.recover()
        self.pool.settle_sessions()  # rows a crashed supervisor left claiming a process

    def _beat(self) -> None:
        assert self.rt.instance is not None
        info = {
            "pid": os.getpid(),
            "where": instances.here(),
            **cluster.declared(self.rt),
            "next_tick_at": self.ticker.next_due_ms,
            "ticks": self.ticks,
            "pool": self.pool.describe(),
            "last_tick": self.last_tick.to_dict() if self.last_tick else None,
            "runs": self.runs.report() if self.runs is not None else None,
        }
        with self.rt.store.write() as tx:
            instances.beat(tx, self.rt.instance, info=info)
        if cluster.fenced(self.rt):
            self._rejoin()
            return
        try:
            cluster.sweep(self.rt)
        except Exception as exc:  # failover is retried at the next beat
            self.rt.log.error("failover", f"sweep failed: {type(exc).__name__}: {exc}")

    def _rejoin(self) -> None:
        """Another supervisor fenced this one (it missed its heartbeats): its cards were
        taken over. Interrupt what still runs here and register again, as a new instance."""
        rt = self.rt
        rt.log.warn("failover", "this supervisor was fenced: its cards went to others")
        self.pool.interrupt_all()
        with rt.store.write() as tx:
            rt.instance = instances.register(
                tx, rt.machine, rt.config.time, {"pid": os.getpid(), **cluster.declared(rt)}
            )
        rt.log.info("supervisor", "registered again", instance=rt.instance)

    def ping(self) -> None:
        """Liveness of the pool and of agent processes; recovers rows whose agent died."""
        self.pool.recover()
        self.pool.close_idle(self.rt.config.time.project_idle)

    def run(self, *, max_seconds: float | None = None) -> None:
        """Run until stopped (signal or ``stop_event``)."""
        rt = self.rt
        if rt.instance is None:
            self.start()
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self.wakeups.start()
        pulse = threading.Thread(target=self._pulse, name="laneboard-heartbeat", daemon=True)
        pulse.start()
        with rt.store.autocommit() as tx:
            st = LoopState(tx.log_marks(), {name: 0 for name, _, _ in self.extra_clocks})
        self.pool.stops_follow_news = True  # this loop reads the log: it tells the pool
        try:
            while not self.stop_event.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    break
                try:
                    self._round(st)
                except Exception as exc:
                    if not rt.store.unavailable(exc):
                        raise
                    self._wait_for_store(exc)
                    continue
                self._store_back()
        finally:
            self.pool.stops_follow_news = False
            self.stop_event.set()  # ends the heartbeat thread too
            self.wakeups.close()
            pulse.join(10)
            self.shutdown()

    def _round(self, st: LoopState) -> None:
        """One round of the loop: the clocks, the log's news, a tick when one is due, the
        runs, the queue; then a sleep until the next of them or a wake-up."""
        seen = self.wakeups.generation  # a wake-up after this is looked at again
        now = self.rt.now()
        if self.pool.hand_back_due.is_set():  # a turn's row waits for the recovery
            self.pool.hand_back_due.clear()
            st.next_ping = min(st.next_ping, now)  # a ping that fails stays due
        pinged = self._clocks(st, now)
        self._take_news(st)
        ticked = self._tick_when_due(st, now)
        if self.runs is not None and self._runs_due(st.runs_news, st.last_runs):
            st.last_runs, st.runs_news = time.monotonic(), False
            self.runs()
        # pending rows come from this process (a tick's poll that claimed, a turn's
        # retry, a recovery) or, rarely, a one-off ``lb loop`` here: read after those
        stale = time.monotonic() - st.last_drain >= DRAIN_POLL_S
        if (ticked and self.ticker.queued) or pinged or st.slot_freed or stale:
            st.last_drain, st.slot_freed = time.monotonic(), False
            self.pool.drain()
        self._sleep(seen, st.wake_at, [st.next_beat, st.next_ping, *st.next_extra.values()])

    def _clocks(self, st: LoopState, now: int) -> bool:
        """The heartbeat, the ping and the extra clocks that are due; whether it pinged."""
        t = self.rt.config.time
        pinged = now >= st.next_ping
        if now >= st.next_beat:
            self._beat()
            st.next_beat = now + t.pool_heartbeat * 1000
        if pinged:
            self.ping()
            st.next_ping = now + t.ping_interval * 1000
        for name, every_ms, fn in self.extra_clocks:
            if now >= st.next_extra[name]:
                try:
                    fn()
                except Exception as exc:
                    self.rt.log.error("supervisor", f"{name} failed: {exc}")
                st.next_extra[name] = now + every_ms
        return pinged

    def _take_news(self, st: LoopState) -> None:
        """What the log says since the last round: what the next tick is for, and when."""
        st.marks, fresh = self._news(st.marks)
        if fresh is None or STOP_REQUESTED in fresh:
            self.pool.stops_news()  # the watchdogs read stop requests on this news
        st.runs_news = st.runs_news or fresh is None or any(x.startswith("run.") for x in fresh)
        # a turn's end closes its queue row after its last event, so the log does not
        # show the slot it frees: when the last poll left a card waiting for one, the
        # tick it wakes runs its passes (the queue is read again anyway)
        if self.pool.changed.is_set():
            self.pool.changed.clear()
            st.slot_freed = True
            if fresh is not None and self.ticker.waits_on_rows:
                fresh = {*fresh, FREED}
        if fresh is None or fresh:
            st.news = None if fresh is None or st.news is None else st.news | fresh
            if st.wake_at is None:
                # the first news after a quiet spell ticks at once; a burst waits for the
                # debounce after the tick before, and makes one tick
                debounce = self.rt.config.debounce_ms / 1000
                st.wake_at = max(self.monotonic(), st.last_tick + debounce)

    def _tick_when_due(self, st: LoopState, now: int) -> bool:
        """A tick, when its clock is due or the news's debounce has passed; whether it
        ticked."""
        due = now >= self.ticker.next_due_ms
        if not due and (st.wake_at is None or self.monotonic() < st.wake_at):
            return False
        freed = st.news is None or FREED in st.news
        self.last_tick = self.ticker.tick(force=due or freed, news=None if due else st.news)
        st.wake_at = None
        st.last_tick = self.monotonic()
        if self.last_tick.state == "ran":
            self.ticks += 1
            st.news = set()
        elif self.last_tick.state == "skipped":  # another tick holds the lease
            st.wake_at = st.last_tick + CLOCK_CHECK_S
        return True

    def _wait_for_store(self, exc: BaseException) -> None:
        """The database is out of reach (down, restarting, the connection lost): wait and
        try again, 1 s after the first failure and twice as long after each next one, up
        to ``STORE_RETRY_MAX_S``, saying so in the log once a minute. Agent sessions go on;
        what they send the board meanwhile is refused and they try again."""
        self.store_failures += 1
        wait = min(2.0 ** (self.store_failures - 1), STORE_RETRY_MAX_S)
        now = time.monotonic()
        if now - self.store_said >= STORE_SAY_EVERY_S:
            self.store_said = now
            said = " ".join(str(exc).split())[:200]
            self.rt.log.error(
                "supervisor",
                f"the database is out of reach ({type(exc).__name__}: {said}); "
                f"trying again in {wait:g}s",
                failures=self.store_failures,
            )
        self.stop_event.wait(wait)

    def _store_back(self) -> None:
        if self.store_failures:
            self.rt.log.info(
                "supervisor", "the database is reachable again", failures=self.store_failures
            )
            self.store_failures, self.store_said = 0, float("-inf")

    def _runs_due(self, news: bool, last: float) -> bool:
        """Whether to read the runs again: every ``RUNS_READ_S`` while some are driven
        here or a run's event was logged since ``last``, else every ``RUNS_IDLE_S`` (a
        run is created, resumed or changes state with its event)."""
        assert self.runs is not None
        every = RUNS_READ_S if news or self.runs.health else RUNS_IDLE_S
        return time.monotonic() - last >= every

    def _pulse(self) -> None:
        """The instance's heartbeat on its own thread, every ``pool_heartbeat``: a long tick
        (a landing running its checks) must not look like a dead host to the others. The
        loop's own beat adds the pool's state and runs the failover sweep."""
        every = self.rt.config.time.pool_heartbeat
        while not self.stop_event.wait(every):
            self.pulse_once()

    def pulse_once(self) -> None:
        """One heartbeat, with the start of the tick running now (None between ticks)."""
        iid = self.rt.instance
        if iid is None:
            return
        try:
            with self.rt.store.write() as tx:
                tx.supervisor_pulse(iid, self.ticker.started_at)
        except Exception as exc:  # the store is away: the next pulse tries again
            self.rt.log.warn("supervisor", f"heartbeat failed: {type(exc).__name__}: {exc}")

    def _news(self, marks: LogMarks) -> tuple[LogMarks, set[str] | None]:
        """The log's marks now and the types logged since ``marks`` that some pass acts
        on (empty: nothing, or only ``NOISE``; None: too much to tell, every pass runs)."""
        with self.rt.store.autocommit() as tx:
            marks, types = tx.log_news(marks)
        return marks, None if types is None else types - NOISE

    def _sleep(self, seen: int, wake_at: float | None, clocks: list[int]) -> None:
        """Until the next clock, the debounced tick, or a wake-up after ``seen`` (a
        write committed here, a NOTIFY, or the poll interval while nothing listens)."""
        if self.stop_event.is_set() or self.pool.changed.is_set():
            return
        now_ms = self.rt.now()
        due_ms = min([self.ticker.next_due_ms, *clocks])
        left = max(0.0, (due_ms - now_ms) / 1000)
        if wake_at is not None:  # a tick is coming: only the clocks can come first
            self.stop_event.wait(min(left, max(0.0, wake_at - self.monotonic())))
            return
        # the clocks are read again within CLOCK_CHECK_S (an injected clock may jump)
        self.wakeups.wait_wake(seen, min(left, CLOCK_CHECK_S))

    def shutdown(self) -> None:
        """Stop the pool and sign off; with the database away, as much as can be done
        (the pool's rows and the instance are settled by whoever next sees them: this
        machine's next start, or another's failover)."""
        rt = self.rt
        for what, step in (("stopping the pool", self.pool.shutdown),
                           ("giving back the tick lease", self.ticker.let_go),
                           ("signing off", self._sign_off)):  # fmt: skip
            try:
                step()
            except Exception as exc:
                if not rt.store.unavailable(exc) and step is not self.ticker.let_go:
                    raise
                rt.log.warn("supervisor", f"{what} failed: {type(exc).__name__}: {exc}")
        rt.log.info("supervisor", "stopped", instance=rt.instance)

    def _sign_off(self) -> None:
        if self.rt.instance is not None:
            with self.rt.store.write() as tx:
                instances.stop(tx, self.rt.instance)
