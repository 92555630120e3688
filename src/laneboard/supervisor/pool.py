"""The session pool: turns queued handoff rows into agent turns.

One worker session per card (keyed by agent kind and lane key), opened in the card's
directory. The native session id is stored before a turn starts, so a crash can resume
it; a session that cannot be resumed is replayed from the supervisor's own transcript.
A row whose agent process is still alive is never given to a second worker.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from laneboard.agents.base import Adapter, AdapterError, Session
from laneboard.agents.env import agent_env
from laneboard.agents.procs import pid_alive
from laneboard.agents.registry import adapter_for
from laneboard.board.tokens import Tokens
from laneboard.domain import prompts
from laneboard.domain.model import Card
from laneboard.domain.roles import Role
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError
from laneboard.supervisor import instances, outcomes, records
from laneboard.supervisor.outcomes import RECOVERY_BOUND, _redacted
from laneboard.supervisor.records import QueueRow
from laneboard.supervisor.runtime import Runtime
from laneboard.workspace.brief import brief_path

PULSE_MS = 240_000  # heartbeat the claim every 4 minutes while the agent runs


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


def lane_key(role: Role, card: Card) -> str:
    lane = "reviewer" if "reviewer" in role.lanes and "worker" not in role.lanes else "worker"
    return f"{lane}:{card.ref}:r{card.delivery_round}"


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
        self.changed = threading.Event()
        # rows whose session was reopened by its stored native id (a failed first turn
        # there means the native session may be gone: the next attempt replays)
        self._reopened: set[int] = set()  # set when a turn ends (the board may have moved)

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
        with rt.store.read() as tx:
            pending = records.queue_rows(tx, machine=rt.machine, states=("pending",), limit=100)
        started = 0
        for row in pending:
            with self.lock:
                if len(self.running) >= rt.config.max_concurrency:
                    break
            with rt.store.write() as tx:
                if not records.take_row(tx, row.id, rt.instance or "local"):
                    continue
                taken = records.queue_row(tx, row.id)
            assert taken is not None
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
            with self.rt.store.write() as tx:
                records.set_row(
                    tx,
                    row.id,
                    state="pending",
                    owner=None,
                    pid=None,
                    last_error=f"{type(exc).__name__}: {exc}",
                )
        finally:
            with self.lock:
                self.running.pop(row.id, None)
            self.changed.set()

    # -- one turn ----------------------------------------------------------------------------
    def _turn(self, row: QueueRow) -> None:
        rt = self.rt
        card = rt.board.get(row.card_id)
        if card.status is not Status.IN_PROGRESS or card.claim_epoch != row.epoch:
            outcomes.finish_row(
                self, row, "done", note=f"completed locally: card is {card.status.value}"
            )
            return
        role = rt.roles.get(row.role) or Role(row.role)
        kind = str(row.payload.get("agent_kind") or rt.kind_for(role) or role.agent)
        key = lane_key(role, card)
        try:
            session, prompt, rec_id, replayed = self._open(row, card, role, kind, key)
        except (AdapterError, LaneboardError, OSError) as exc:
            outcomes.dispatch_failed(self, row, card, str(exc))
            return
        with self.lock:
            running = self.running.get(row.id)
            if running is not None:
                running.session = session
        turn_started = rt.now()
        with rt.store.write() as tx:
            records.save_session(
                tx,
                kind,
                key,
                card_id=card.id,
                role=role.id,
                cwd=row.target_dir,
                native_id=session.session_id,
                round_=card.delivery_round,
                state="running",
                replayed=replayed,
                pid=session.pid,
            )
            records.set_row(tx, row.id, pid=session.pid)
            turn_id = records.start_turn(
                tx, row.id, card.id, card.delivery_round, rec_id, kind, session.session_id, prompt
            )
            tx.append_event(
                "turn.started",
                rt.actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={
                    "queue": row.id,
                    "kind": kind,
                    "session": session.session_id,
                    "pid": session.pid,
                    "replayed": replayed,
                },
            )
        rt.log.info(
            "pool",
            "turn started",
            card=card.ref,
            kind=kind,
            pid=session.pid,
            session=session.session_id,
        )
        watchdog = threading.Thread(
            target=self._watch, args=(row.id, card, session, turn_started), daemon=True
        )
        watchdog.start()
        cap = rt.config.time.turn_timeout * 4  # the clock-driven watchdog cuts first
        result = session.send(prompt, timeout=cap)
        with self.lock:
            running = self.running.get(row.id)
            timed_out = result.timed_out or bool(running and running.timed_out)
        outcome = (
            "interrupted"
            if result.interrupted and self.stopping and not timed_out
            else "timed_out"
            if timed_out
            else "ok"
            if result.ok
            else "failed"
        )
        with rt.store.write() as tx:
            records.finish_turn(
                tx,
                turn_id,
                outcome,
                final_text=result.final_text,
                error=result.error,
                exit_code=result.exit_code,
                usage=result.usage.to_dict(),
            )
            tx.append_event(
                "turn.finished",
                rt.actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={
                    "queue": row.id,
                    "outcome": outcome,
                    "error": _redacted(result.error),
                    "usage": result.usage.to_dict(),
                },
            )
        rt.log.info("pool", f"turn {outcome}", card=card.ref, error=result.error)
        outcomes.after_turn(self, row, card, kind, key, rec_id, session, result, outcome)

    def _open(
        self, row: QueueRow, card: Card, role: Role, kind: str, key: str
    ) -> tuple[Session, str, int | None, bool]:
        rt = self.rt
        adapter = self.adapter(kind)
        env = self._env(card, role)
        self._carry(row, card, role, kind, key)
        with rt.store.read() as tx:
            rec = records.session_record(tx, kind, key)
        reason = str(row.payload.get("resume_reason") or "the card was handed back to you")
        detail = str(row.payload.get("resume_detail") or "")
        with self.lock:
            live = self.live.get((kind, key))
        if live is not None and live.session.alive() and rec is not None:
            live.busy, live.last_used = True, time.monotonic()
            self._env(card, role)  # the live session's token file follows the new claim epoch
            return live.session, prompts.resume(card, reason, detail), rec.id, False
        if live is not None:
            self._forget(kind, key)
        if rec is not None and rec.native_id and rec.round == card.delivery_round:
            why = "its last resume failed"
            if rec.state != "needs_replay":
                try:
                    session = adapter.open_session(row.target_dir, rec.native_id, role, env)
                    self._remember(kind, key, card.id, session)
                    with self.lock:
                        self._reopened.add(row.id)
                    return session, prompts.resume(card, reason, detail), rec.id, False
                except AdapterError as exc:
                    why = str(exc)
            with rt.store.read() as tx:
                turns = records.session_transcript(tx, rec.id, prompts.REPLAY_TURNS)
            session = adapter.open_session(row.target_dir, None, role, env)
            self._remember(kind, key, card.id, session)
            transcript = [prompts.TranscriptTurn(t["prompt"], t["final_text"]) for t in turns]
            return session, prompts.replay(card, role, transcript, why), rec.id, True
        self._evict_if_full()
        session = adapter.open_session(row.target_dir, None, role, env)
        self._remember(kind, key, card.id, session)
        with rt.store.write() as tx:
            new = records.save_session(
                tx,
                kind,
                key,
                card_id=card.id,
                role=role.id,
                cwd=row.target_dir,
                native_id=session.session_id,
                round_=card.delivery_round,
                state="open",
                pid=session.pid,
            )
        return session, prompts.handoff(card, role, brief_path(row.target_dir, card)), new.id, False

    def _carry(self, row: QueueRow, card: Card, role: Role, kind: str, key: str) -> None:
        """A rework (``resume_from_round``) continues the previous round's session.

        Only in the same directory: a rework that runs in a new lane directory starts a
        fresh session, whose handoff lists the must-fix items on the acceptance list.
        """
        prev = row.payload.get("resume_from_round")
        if not isinstance(prev, int) or prev == card.delivery_round:
            return
        old_key = lane_key(role, replace(card, delivery_round=prev))
        with self.rt.store.write() as tx:
            old = records.session_record(tx, kind, old_key)
            if records.session_record(tx, kind, key) is not None or old is None:
                return
            if not old.native_id or os.path.realpath(old.cwd) != os.path.realpath(row.target_dir):
                return
            records.save_session(
                tx,
                kind,
                key,
                card_id=card.id,
                role=role.id,
                cwd=row.target_dir,
                native_id=old.native_id,
                round_=card.delivery_round,
                state="idle",
            )
            records.set_session_state(tx, old.id, "closed")
        with self.lock:
            live = self.live.pop((kind, old_key), None)
            if live is not None:
                live.lane_key = key
                self.live[(kind, key)] = live

    def _env(self, card: Card, role: Role) -> dict[str, str]:
        rt = self.rt
        ttl = rt.config.time.turn_timeout * 3 * 1000
        token, _ = Tokens(rt.store).create(
            rt.actor,
            role.id,
            "agent",
            card_id=card.id,
            epoch=card.claim_epoch,
            expires_at=rt.now() + ttl,
        )
        tokdir = rt.config.state_path("tokens")
        os.makedirs(tokdir, mode=0o700, exist_ok=True)
        tokfile = os.path.join(tokdir, f"{card.ref}.token")
        fd = os.open(tokfile + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token)
        os.replace(tokfile + ".tmp", tokfile)
        kind_cfg = rt.config.agent_kinds.get(role.agent, {})
        env = agent_env(
            os.environ,
            token=token,
            card_ref=card.ref,
            db_url=rt.store.url,
            secrets=kind_cfg.get("secret_env", ()),
            extra={
                "LANEBOARD_TOKEN_FILE": tokfile,
                "LANEBOARD_AGENT_STATE": rt.config.state_path("agents", role.id),
                # one file per session (role lane, card and round), never the supervisor log
                "LANEBOARD_AGENT_STDERR": rt.config.state_path(
                    "agents", "stderr", lane_key(role, card).replace(":", "-") + ".log"
                ),
                **(
                    {"LANEBOARD_NOW": os.environ["LANEBOARD_NOW"]}
                    if os.environ.get("LANEBOARD_NOW")
                    else {}
                ),
            },
        )
        return env

    def _remember(self, kind: str, key: str, card_id: int, session: Session) -> None:
        with self.lock:
            self.live[(kind, key)] = Live(session, kind, key, card_id, busy=True)

    def _forget(self, kind: str, key: str) -> None:
        with self.lock:
            live = self.live.pop((kind, key), None)
        if live is not None:
            try:
                live.session.close()
            except Exception as exc:
                self.rt.log.warn("pool", f"closing a session failed: {exc}")

    def _evict_if_full(self) -> None:
        """At the cap, close the least recently used idle session (its id is kept)."""
        with self.lock:
            if len(self.live) < self.rt.config.pool_max_sessions:
                return
            idle = [lv for lv in self.live.values() if not lv.busy]
            if not idle:
                return
            victim = min(idle, key=lambda lv: lv.last_used)
        self._forget(victim.kind, victim.lane_key)
        with self.rt.store.write() as tx:
            rec = records.session_record(tx, victim.kind, victim.lane_key)
            if rec is not None:
                records.set_session_state(tx, rec.id, "idle")
        self.rt.log.info("pool", "evicted idle session (id kept)", lane=victim.lane_key)

    def _watch(self, row_id: int, card: Card, session: Session, started: int) -> None:
        """Clock-driven: pulse the claim heartbeat; cut the turn at the turn timeout."""
        rt = self.rt
        last_pulse = started
        limit = rt.config.time.turn_timeout * 1000
        while True:
            time.sleep(0.1)
            with self.lock:
                running = self.running.get(row_id)
                if running is None or running.session is not session:
                    return
            if not session.alive() and session.pid is not None:
                return
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

    # -- recovery and shutdown --------------------------------------------------------------
    def recover(self) -> list[dict[str, Any]]:
        """Requeue rows left by a supervisor that is gone; never under a live agent."""
        rt = self.rt
        report: list[dict[str, Any]] = []
        with rt.store.write() as tx:
            live_ids = instances.live_instance_ids(tx, rt.machine, rt.config.time)
            live_ids.add(rt.instance or "local")
            for row in records.queue_rows(
                tx, machine=rt.machine, states=("processing", "interrupted")
            ):
                with self.lock:
                    mine = row.id in self.running
                if mine or (row.state == "processing" and row.owner in live_ids):
                    continue
                if row.state == "processing" and pid_alive(row.pid):
                    report.append({"queue": row.id, "action": "orphan-alive", "pid": row.pid})
                    continue
                crashed = row.state == "processing"
                tx.run(
                    "UPDATE turns SET outcome = 'lost', finished_at = ? "
                    "WHERE queue_id = ? AND outcome = 'running'",
                    (tx.now(), row.id),
                )
                recoveries = row.recoveries + (1 if crashed else 0)
                reason = (
                    "the supervisor crashed during the turn"
                    if crashed
                    else "the supervisor restarted"
                )
                if recoveries >= RECOVERY_BOUND:
                    card = tx.card(row.card_id)
                    if card is not None:
                        rt.board.hold(
                            tx,
                            rt.actor,
                            card,
                            "crash recovery",
                            RECOVERY_BOUND,
                            f"recovered {recoveries} times after crashes",
                        )
                    records.set_row(tx, row.id, state="failed", recoveries=recoveries, pid=None)
                    report.append({"queue": row.id, "action": "held"})
                    continue
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
                report.append({"queue": row.id, "action": "requeued", "crashed": crashed})
        for item in report:
            rt.log.info("pool", f"recovery: {item['action']}", queue=item["queue"])
        return report

    def close_idle(self, older_than_s: float) -> int:
        with self.lock:
            old = [
                lv
                for lv in self.live.values()
                if not lv.busy and time.monotonic() - lv.last_used > older_than_s
            ]
        for lv in old:
            self._forget(lv.kind, lv.lane_key)
        return len(old)

    def shutdown(self, wait_s: float = 20.0) -> None:
        self.stopping = True
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
            self._forget(kind, key)
