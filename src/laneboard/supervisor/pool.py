"""The session pool: turns queued handoff rows into agent turns.

One worker session per card (keyed by agent kind and lane key), opened in the card's
directory. The native session id is stored before a turn starts, so a crash can resume
it; a session that cannot be resumed is replayed from the supervisor's own transcript.
A row whose agent process is still alive is never given to a second worker. How a
turn's session is opened (live, resumed, replayed or new) is in ``opening``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laneboard.agents.base import Adapter, AdapterError, Session
from laneboard.agents.procs import pid_alive
from laneboard.agents.registry import adapter_for
from laneboard.domain.model import Card
from laneboard.domain.roles import Role
from laneboard.domain.status import Status
from laneboard.domain.transcript import entry
from laneboard.errors import LaneboardError
from laneboard.store.notify import WakingEvent
from laneboard.store.q_queue import settle_session
from laneboard.store.tx import Tx
from laneboard.supervisor import (
    board_socket,
    boundary,
    instances,
    opening,
    outcomes,
    records,
    steering,
)
from laneboard.supervisor.holds import place_hold
from laneboard.supervisor.opening import lane_key
from laneboard.supervisor.outcomes import RECOVERY_BOUND
from laneboard.supervisor.records import QueueRow
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.transcript_sink import TranscriptSink
from laneboard.workspace import lanes
from laneboard.workspace.git import GitError

PULSE_MS = 240_000  # heartbeat the claim every 4 minutes while the agent runs
WATCH_S = 0.3  # the watchdog's pace: stop requests, follow-ups, the turn timeout
STOP_CHECK_S = 0.3  # one read of the stop requests of every running turn, at most this often
# while a loop reading the log tells the pool of each stop request (``stops_news``): the
# requests are read when one was logged, and otherwise only this often
STOP_QUIET_S = 5.0


@dataclass
class Live:
    session: Session
    kind: str
    lane_key: str
    card_id: int
    last_used: float = field(default_factory=time.monotonic)
    busy: bool = False


@dataclass
class Running:
    row: QueueRow
    thread: threading.Thread
    started_ms: int
    session: Session | None = None
    timed_out: bool = False
    force_stopped: bool = False  # its run was force-stopped: interrupted, claim released
    stopped_by: str | None = None  # a person stopped the turn
    turn_id: int | None = None  # once its turn has started
    token: str | None = None  # the agent token its session was given for the turn
    done: threading.Event = field(default_factory=threading.Event)  # its row was let go


def _terminal(card: Card | None) -> bool:
    return card is None or card.terminal


class Pool:
    def __init__(self, rt: Runtime, adapters: Callable[[str], Adapter] | None = None) -> None:
        self.rt = rt
        self._adapters = adapters or (
            lambda kind: adapter_for(kind, rt.config.agent_kinds.get(kind, {}))
        )
        self._adapter_cache: dict[str, Adapter] = {}
        self.lock = threading.RLock()
        self.running: dict[int, Running] = {}
        self.live: dict[tuple[str, str], Live] = {}
        self.stopping = False
        self.changed = WakingEvent()  # set when a turn ends: wakes the supervisor's loop
        # set when a turn could not hand its row back (the database was away): the
        # loop's next round runs the recovery then, not at the next ping
        self.hand_back_due = threading.Event()
        # rows whose session was reopened by its stored native id (a failed first turn
        # there means the native session may be gone: the next attempt replays)
        self.reopened: set[int] = set()  # set when a turn ends (the board may have moved)
        self._stops_lock = threading.Lock()
        self._stops: dict[int, str] = {}  # turn id -> who asked to stop it (last read)
        self._stops_read = float("-inf")
        self.stops_follow_news = False  # set while a loop calls ``stops_news`` on news
        self._stops_news = False  # a stop request was logged since the last read

    # -- bookkeeping -----------------------------------------------------------------------
    def adapter(self, kind: str) -> Adapter:
        if kind not in self._adapter_cache:
            self._adapter_cache[kind] = self._adapters(kind)
        return self._adapter_cache[kind]

    def live_count(self) -> int:
        with self.lock:
            return len(self.running)

    def describe(self) -> dict[str, Any]:
        with self.lock:
            return {
                "running": [
                    {
                        "queue": r.row.id,
                        "card_id": r.row.card_id,
                        "pid": r.session.pid if r.session else None,
                    }
                    for r in self.running.values()
                ],
                "open_sessions": len(self.live),
            }

    # -- draining ----------------------------------------------------------------------------
    def drain(self) -> int:
        """Start turns for pending rows of this machine, up to the concurrency cap."""
        if self.stopping:
            return 0
        rt = self.rt
        with self.lock:
            room = rt.config.max_concurrency - len(self.running)
        if room <= 0:
            return 0  # a turn's end wakes the loop, which drains again
        with rt.store.autocommit() as tx:
            pending = records.queue_rows(tx, machine=rt.machine, states=("pending",), limit=100)
        started = 0
        for row in pending:
            with self.lock:
                if len(self.running) >= rt.config.max_concurrency:
                    break
            taken = records.take_pending(rt.store, row.id, rt.instance or "local")
            if taken is None:
                continue
            thread = threading.Thread(
                target=self._run, args=(taken,), daemon=True, name=f"turn-{row.id}"
            )
            with self.lock:
                self.running[row.id] = Running(taken, thread, rt.now())
            thread.start()
            started += 1
        return started

    def _run(self, row: QueueRow) -> None:
        try:
            self._turn(row)
        except Exception as exc:  # a bug must not lose the row: hand it back
            self.rt.log.error("pool", f"turn crashed: {type(exc).__name__}: {exc}", queue=row.id)
            self._hand_back(row, exc)
        finally:
            with self.lock:
                gone = self.running.pop(row.id, None)
            if gone is not None:
                gone.done.set()
            self.changed.set()

    def _hand_back(self, row: QueueRow, exc: Exception) -> None:
        """A crashed turn's row back to ``pending`` (its turn, if started, ``lost``); while
        the database is out of reach it stays ``processing`` under this supervisor with no
        thread, and the loop's next round runs the recovery that hands it back."""
        try:
            with self.rt.store.write() as tx:
                tx.lose_running_turns(row.id)  # its turn, if it had started, ended here
                records.set_row(
                    tx,
                    row.id,
                    state="pending",
                    owner=None,
                    pid=None,
                    last_error=f"{type(exc).__name__}: {exc}",
                )
        except Exception as err:
            if not self.rt.store.unavailable(err):
                raise
            self.hand_back_due.set()
            self.rt.log.warn(
                "pool", "the database is out of reach: the row will be handed back", queue=row.id
            )

    # -- one turn ----------------------------------------------------------------------------
    def _turn(self, row: QueueRow) -> None:
        rt = self.rt
        card = rt.card(row.card_id)
        if card.status is not Status.IN_PROGRESS or card.claim_epoch != row.epoch:
            outcomes.finish_row(
                self, row, "done", note=f"completed locally: card is {card.status.value}"
            )
            return
        with rt.store.autocommit() as tx:
            project, settings = tx.turn_project(card.project_id)
        role = rt.project_roles(project).get(row.role) or Role(row.role)
        role = boundary.with_checks(rt, role, card, settings)
        kind = str(row.payload.get("agent_kind") or rt.kind_for(role) or role.agent)
        key = lane_key(role, card)
        try:
            opened = opening.open_turn(self, row, card, role, kind, key, project)
        except (AdapterError, LaneboardError, OSError) as exc:
            outcomes.dispatch_failed(self, row, card, str(exc), outcomes.config_fix(exc))
            return
        session = opened.session
        with self.lock:
            running = self.running.get(row.id)
            if running is not None:
                running.session, running.token = session, opened.token.token
        turn_started = rt.now()
        with rt.store.write() as tx:
            # the card may have moved on while the session opened (its delivery landed
            # meanwhile): a (card, round) turn never starts after that
            moved = outcomes.moved_on(tx.card(card.id, lock=True), row)
            if moved is None:
                turn_id, prompt, rec_id = opening.start_turn(
                    tx, rt, row, card, role, kind, key, opened
                )
        if moved is not None:
            self._release(kind, key, session)
            outcomes.finish_row(self, row, "done", note=f"completed before its turn: {moved}")
            return
        self._turn_body(row, card, kind, key, session, prompt, rec_id, turn_id, turn_started)

    def _release(self, kind: str, key: str, session: Session) -> None:
        with self.lock:
            live = self.live.get((kind, key))
            if live is not None and live.session is session:
                live.busy, live.last_used = False, time.monotonic()

    def _turn_body(
        self, row: QueueRow, card: Card, kind: str, key: str, session: Session, prompt: str,
        rec_id: int | None, turn_id: int, turn_started: int,
    ) -> None:  # fmt: skip
        """The started turn: send the prompt, check the boundary, record its outcome."""
        rt = self.rt
        rt.log.info(
            "pool",
            "turn started",
            card=card.ref,
            kind=kind,
            pid=session.pid,
            session=session.session_id,
        )
        sink = TranscriptSink(rt, card, turn_id, kind)
        sink.add(entry("prompt", prompt))
        with self.lock:
            running = self.running.get(row.id)
            if running is not None:
                running.turn_id = turn_id
        watchdog = threading.Thread(
            target=self._watch, args=(row.id, card, session, turn_started, sink), daemon=True
        )
        watchdog.start()
        cap = rt.config.time.turn_timeout * 4  # the clock-driven watchdog cuts first
        checkout, before, mark, has_lane = self._before_turn(card)
        try:
            result = session.send(prompt, timeout=cap, on_event=sink.on_event)
        except BaseException:
            sink.abandon()  # what was read is kept; the row is handed back by _run
            raise
        if has_lane:
            if not boundary.check_after_turn(rt, card, checkout, before, mark):
                boundary.check_lane_scope(rt, card)
            lanes.publish_delivery(rt.store, card)
        with self.lock:
            running = self.running.get(row.id)
            timed_out = result.timed_out or bool(running and running.timed_out)
            forced = bool(running and running.force_stopped)
            stopped_by = running.stopped_by if running else None
        outcome = outcomes.turn_outcome(
            result.ok, timed_out, forced, bool(stopped_by), stopping=self.stopping
        )
        try:
            with rt.store.write() as tx:
                fresh, closed = outcomes.record_end(
                    tx, rt, row, card, rec_id, session, turn_id, result, outcome, forced, sink
                )
        except BaseException:
            sink.abandon()  # the transcript is still written; the row is handed back by _run
            raise
        sink.committed()
        rt.log.info("pool", f"turn {outcome}", card=card.ref, error=result.error)
        if forced:
            outcomes.after_force_stop(self, row, card, kind, key, rec_id)
            return
        outcomes.after_turn(
            self, row, card, kind, key, rec_id, session, result, outcome, fresh, closed=closed
        )

    def _before_turn(self, card: Card) -> tuple[str | None, boundary.Fingerprint | None, int, bool]:
        """The user's checkout of the card's lane and its fingerprint before a turn, the
        log's mark to explain its changes by, and whether the card's round has a lane (a
        card without one gets none during its turn: nothing to check or publish after)."""
        with self.rt.store.autocommit() as tx:
            lane = lanes.lane_for(tx, card.id, card.delivery_round)
        if lane is None or lane.state == "cleaned" or not os.path.isdir(lane.repo):
            return None, None, 0, lane is not None
        from laneboard.workspace.land import LANDING

        try:
            with LANDING:  # never the state half-way through a landing's merge
                with self.rt.store.autocommit() as tx:
                    mark = tx.max_event_id()
                return lane.repo, boundary.fingerprint(lane.repo), mark, True
        except GitError as exc:
            self.rt.log.warn("boundary", f"cannot read the checkout: {exc}", card=card.ref)
            return None, None, 0, True

    def remember(self, kind: str, key: str, card_id: int, session: Session) -> None:
        with self.lock:
            self.live[(kind, key)] = Live(session, kind, key, card_id, busy=True)

    def board_refused(self, row_id: int) -> int:
        """How many of the agent's calls in the turn of row ``row_id`` were refused
        because the database was out of reach (read once, at the turn's end)."""
        with self.lock:
            running = self.running.get(row_id)
            token = running.token if running is not None else None
        return board_socket.refused_calls(token) if token else 0

    def forget(self, kind: str, key: str) -> None:
        """Close a session's process; its record keeps the native id (``idle``: it can be
        resumed) and no longer claims a process — ``closed`` when its card is terminal."""
        with self.lock:
            live = self.live.pop((kind, key), None)
        if live is None:
            return
        try:
            live.session.close()
        except Exception as exc:
            self.rt.log.warn("pool", f"closing a session failed: {exc}")
        settle_session(self.rt.store, kind, key)

    def evict_if_full(self) -> None:
        """At the cap, close the least recently used idle session (its id is kept:
        ``forget`` records it ``idle``, or ``closed`` when its card is finished)."""
        with self.lock:
            if len(self.live) < self.rt.config.pool_max_sessions:
                return
            idle = [lv for lv in self.live.values() if not lv.busy]
            if not idle:
                return
            victim = min(idle, key=lambda lv: lv.last_used)
        self.forget(victim.kind, victim.lane_key)
        self.rt.log.info("pool", "evicted idle session (id kept)", lane=victim.lane_key)

    def _watch(
        self, row_id: int, card: Card, session: Session, started: int, sink: TranscriptSink
    ) -> None:
        """Clock-driven: pulse the claim heartbeat; cut the turn at the turn timeout or
        when a person asks to stop it."""
        rt = self.rt
        last_pulse = started
        limit = rt.config.time.turn_timeout * 1000
        with self.lock:
            mine = self.running.get(row_id)
        if mine is None:
            return
        while not mine.done.wait(WATCH_S):
            with self.lock:
                running = self.running.get(row_id)
                if running is None or running.session is not session:
                    return
            if not session.alive() and session.pid is not None:
                return
            who = self.stop_request(sink.turn_id)
            if who is not None:
                with self.lock:
                    running.stopped_by = who
                rt.log.info("pool", f"{who} stopped the turn", card=card.ref)
                sink.add(entry("interrupt", f"stopped by {who}"))
                session.interrupt()
                return
            steering.steer_followups(rt, card, session, sink)
            now = rt.now()
            if now - started >= limit:
                with self.lock:
                    running.timed_out = True
                rt.log.warn("pool", "turn timed out; cutting it", card=card.ref)
                session.interrupt()
                return
            if now - last_pulse >= PULSE_MS:
                last_pulse = now
                try:
                    with rt.store.write() as tx:
                        fresh = tx.card(card.id)
                        if (
                            fresh is not None
                            and fresh.status is Status.IN_PROGRESS
                            and fresh.claim_epoch == card.claim_epoch
                        ):
                            tx.update_card(card.id, fresh.version, {"heartbeat_at": tx.now()})
                            tx.append_event(
                                "card.heartbeat",
                                rt.actor,
                                card_id=card.id,
                                project_id=card.project_id,
                                payload={"epoch": card.claim_epoch, "by": "pool"},
                            )
                except Exception as exc:
                    rt.log.warn("pool", f"heartbeat pulse failed: {exc}", card=card.ref)

    def stop_request(self, turn_id: int) -> str | None:
        """Who asked to stop the turn (``lb card stop``), or ``None``: one read covers every
        turn running in this pool, at most every ``STOP_CHECK_S``, whatever their number."""
        with self._stops_lock:
            now = time.monotonic()
            quiet = self.stops_follow_news and not self._stops_news
            if now - self._stops_read >= (STOP_QUIET_S if quiet else STOP_CHECK_S):
                with self.lock:
                    ids = sorted(r.turn_id for r in self.running.values() if r.turn_id)
                self._stops_news = False  # news arriving during the read is read next
                try:
                    with self.rt.store.autocommit() as tx:
                        self._stops = tx.stop_requests(ids)
                except Exception as exc:  # a failed read must not end the watchdog
                    self.rt.log.warn("pool", f"could not read the stop requests: {exc}")
                    return None
                self._stops_read = now
            return self._stops.get(turn_id)

    def stops_news(self) -> None:
        """A stop request was logged (or the log said too much to tell): the watchdogs'
        next look reads the requests again."""
        self._stops_news = True

    def force_stop(self, card_ids: set[int]) -> int:
        """Interrupt the running turns of these cards (their process groups); each is
        recorded ``interrupted`` and its claim released when it has ended."""
        with self.lock:
            hit = [r for r in self.running.values() if r.row.card_id in card_ids]
            for r in hit:
                r.force_stopped = True
        for r in hit:
            if r.session is not None:
                r.session.interrupt()
        return len(hit)

    # -- recovery and shutdown --------------------------------------------------------------
    def recover(self) -> list[dict[str, Any]]:
        """Requeue rows left by a supervisor that is gone; never under a live agent.

        A row whose card moved on while nobody watched (delivered for its round, terminal,
        or claimed again) is closed with that outcome — its turn is not a lost one, and it
        is never run again. Only a row whose card is still its own is counted as a crash.
        """
        rt = self.rt
        report: list[dict[str, Any]] = []
        self._close_orphaned_sessions()
        with rt.store.write() as tx:
            live_ids = instances.live_instance_ids(tx, rt.machine, rt.config.time)
            live_ids.add(rt.instance or "local")
            for row in records.queue_rows(
                tx, machine=rt.machine, states=("processing", "interrupted")
            ):
                with self.lock:
                    mine = row.id in self.running
                # a row this very supervisor took whose thread is gone (it ended while the
                # database was away) is recovered; another live one's rows are its own
                orphan = rt.instance is not None and row.owner == rt.instance
                if mine or (row.state == "processing" and row.owner in live_ids and not orphan):
                    continue
                if row.state == "processing" and pid_alive(row.pid):
                    report.append({"queue": row.id, "action": "orphan-alive", "pid": row.pid})
                    continue
                report.append(self._recover_row(tx, row))
        for item in report:
            rt.log.info("pool", f"recovery: {item['action']}", queue=item["queue"])
        return report

    def _close_orphaned_sessions(self) -> None:
        """Close the sessions of this pool whose process a row of this very supervisor
        names while no thread runs its turn: the turn crashed (the database went away
        during it) and could not hand its row back. The session's process is kept
        between turns, so it would outlive the row forever; closed, the row is recovered
        as any other (its session is resumed by its native id)."""
        rt = self.rt
        with self.lock:
            running = set(self.running)
            in_use = {r.session.pid for r in self.running.values() if r.session is not None}
            pids = {
                lv.session.pid: lv
                for lv in self.live.values()
                if lv.session.pid and lv.session.pid not in in_use  # a running turn's: kept
            }
        if rt.instance is None or not pids:
            return
        with rt.store.autocommit() as tx:
            rows = records.queue_rows(tx, machine=rt.machine, states=("processing",))
        for row in rows:
            lv = pids.get(row.pid) if row.pid and row.owner == rt.instance else None
            if lv is not None and row.id not in running:
                rt.log.warn("pool", "closing the session of a crashed turn", queue=row.id)
                self.forget(lv.kind, lv.lane_key)

    def _recover_row(self, tx: Tx, row: QueueRow) -> dict[str, Any]:
        rt = self.rt
        card = tx.card(row.card_id)
        moved = outcomes.moved_on(card, row)
        if moved is not None:
            tx.lose_running_turns(row.id, "delivered" if moved == "delivered" else "superseded")
            records.set_row(
                tx, row.id, state="done", pid=None, payload={**row.payload, "note": moved}
            )
            return {"queue": row.id, "action": "closed", "outcome": moved}
        assert card is not None
        # a crash counts against the row only when it cost a turn that was running
        crashed = tx.lose_running_turns(row.id) > 0 and row.state == "processing"
        recoveries = row.recoveries + (1 if crashed else 0)
        if recoveries >= RECOVERY_BOUND:
            place_hold(
                rt,
                tx,
                card,
                "crash",
                RECOVERY_BOUND,
                f"the supervisor stopped during its turn {recoveries} times",
            )
            records.set_row(
                tx,
                row.id,
                state="failed",
                recoveries=recoveries,
                pid=None,
                last_error=f"the supervisor stopped during the turn {recoveries} times",
            )
            return {"queue": row.id, "action": "held"}
        reason = "the supervisor crashed during the turn" if crashed else "the supervisor restarted"
        records.set_row(
            tx,
            row.id,
            state="pending",
            owner=None,
            pid=None,
            recoveries=recoveries,
            attempts=row.attempts if crashed else max(row.attempts - 1, 0),
            payload={**row.payload, "resume_reason": reason},
        )
        return {"queue": row.id, "action": "requeued", "crashed": crashed}

    def close_idle(self, older_than_s: float) -> int:
        """Close sessions idle for longer than ``older_than_s``, and at once every idle
        session whose card is terminal (done or canceled); returns how many."""
        with self.lock:
            idle = [lv for lv in self.live.values() if not lv.busy]
        if not idle:
            return 0
        with self.rt.store.autocommit() as tx:
            ended = {lv.card_id for lv in idle if _terminal(tx.card(lv.card_id))}
        old = [
            lv
            for lv in idle
            if lv.card_id in ended or time.monotonic() - lv.last_used > older_than_s
        ]
        for lv in old:
            self.forget(lv.kind, lv.lane_key)
        return len(old)

    def settle_sessions(self) -> int:
        """Records that claim a process this pool does not run (a crash, a stop) say so."""
        with self.lock:
            mine = {(lv.kind, lv.lane_key) for lv in self.live.values()}
        n = 0
        with self.rt.store.write() as tx:
            for rec in records.live_sessions(tx):
                if (rec.agent_kind, rec.lane_key) in mine or pid_alive(rec.pid):
                    continue
                card = tx.card(rec.card_id) if rec.card_id is not None else None
                records.set_session_state(tx, rec.id, "closed" if _terminal(card) else "idle")
                n += 1
        return n

    def interrupt_all(self, wait_s: float = 20.0) -> None:
        """Interrupt every running turn and close every session, and go on (shutdown, or a
        fenced supervisor: its cards belong to others now)."""
        with self.lock:
            running = list(self.running.values())
        for r in running:
            if r.session is not None:
                r.session.interrupt()
        deadline = time.monotonic() + wait_s
        for r in running:
            r.thread.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            keys = list(self.live)
        for kind, key in keys:
            self.forget(kind, key)
        try:
            self.settle_sessions()
        except Exception as exc:  # the board may be gone at shutdown
            self.rt.log.warn("pool", f"settling session records failed: {exc}")

    def shutdown(self, wait_s: float = 20.0) -> None:
        self.stopping = True
        self.interrupt_all(wait_s)
        board_socket.stop(self.rt.board)  # the sessions' board socket goes with them
