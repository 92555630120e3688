"""The director lane: the one content-decision lane, one session per project directory.

It is opened only when a ``question``, ``route`` or ``triage`` row exists, runs on its own
clock (never inside the dispatch tick, which waits on the very worker turn a question
holds), and signs every board write as ``Director`` with a credential scoped to the row's
card. It never claims, never implements and never moves a card to done.

- **question** rows: an agent's open ``question`` on an ``in_progress`` card. The
  director answers with a note and releases the card to ``todo``, or escalates it to
  ``awaiting`` (E1–E5). Success is judged from the board — the card left
  ``in_progress`` — not from the turn's exit. A turn that leaves it in place is retried
  after 30 s; after 2 turns the row fails and the question is left for a human.
- **route** rows: an unassigned ``todo`` card older than 30 minutes. The director
  assigns it one role from the routing table built from the roles' declared shapes;
  after 2 turns without an assignee the card is parked ``blocked`` (decision).
- **triage** rows (``laneboard.supervisor.triage``): a producer accepted in the last 7
  days whose ``meta.stage_handoff`` is ``required`` and whose delivery round has no
  handoff decision. The director reads the round's ``## Handoff`` report section and
  creates the proposed cards and records the round consumed, or declines it with a
  reason. Judged from the decision marker on the producer; a producer no longer ``done``
  makes the row stale; after 2 turns the row fails, the producer gets a note (it stays
  ``done``) and ``lb doctor`` reports ``handoff_unconsumed``. Triage rows are enqueued
  and run after question and route rows, so they never keep a held worker waiting.

Rows live in the dispatch ``queue`` table (``kind`` = question | route | triage, role
``director``) under the lane's own machine key, so the worker pool never takes them and
they never count against the worker budget.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laneboard.agents.base import Adapter, AdapterError, Session
from laneboard.agents.env import INHERITED
from laneboard.agents.registry import adapter_for
from laneboard.board import handoff
from laneboard.board.tokens import Tokens
from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.model import Card, CardKind, CommentKind
from laneboard.domain.roles import Role
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError
from laneboard.supervisor import board_socket, records, sandboxing, triage
from laneboard.supervisor.holds import place_hold
from laneboard.supervisor.records import QueueRow
from laneboard.supervisor.runtime import Runtime
from laneboard.workspace.git import primary_checkout

DIRECTOR = handoff.DECIDER  # the lane's board identity
QUESTION_ATTEMPTS = 2
ROUTE_ATTEMPTS = 2
RETRY_MS = 30_000
ROUTE_AFTER_MS = 30 * MINUTE_MS
DEFAULT_INTERVAL_MS = 5_000
QUESTION = CommentKind.QUESTION.value
PROMPT_MAX = 6000
QUESTION_MAX = 1500
PASS_MAX = 50  # rows run in one pass of the lane


def lane_machine(machine: str) -> str:
    """The queue's machine key for this machine's director lane (the pool never reads it)."""
    return f"{machine}#director"


def director_role(rt: Runtime) -> Role:
    role = rt.roles.get("director")
    if role is not None:
        return role
    return Role("director", rt.config.agent_for("director"), ("director",), DIRECTOR)


def routing_table(rt: Runtime) -> list[dict[str, Any]]:
    """Worker-capable roles and the work shapes they declare (the reviewer is never routed)."""
    roles = dict(rt.roles)
    try:
        from laneboard.agents.roles import discover_roles

        for r in discover_roles().roles:
            known = roles.get(r.id)
            if known is None or (not known.shapes and r.shapes):
                roles[r.id] = r
    except Exception as exc:  # a broken role file never stops routing
        rt.log.warn("director", f"role discovery failed: {exc}")
    out = []
    for role in roles.values():
        if "worker" in role.lanes and role.id in rt.config.worker_roles:
            out.append({"role": role.id, "title": role.title, "shapes": list(role.shapes)})
    return sorted(out, key=lambda r: r["role"])


# -- scanning: which rows exist -----------------------------------------------------
def _rows_for(tx: Any, card_id: int, kind: str) -> list[QueueRow]:
    return records.queue_rows(
        tx, states=("pending", "processing", "done", "failed"), card_id=card_id
    )


def open_question(tx: Any, card: Card, newest: Any = False) -> Any:
    """The newest agent question asked since the card entered ``in_progress`` (``newest``:
    the card's newest agent question when the caller read it, None for none)."""
    r = tx.newest_agent_question(card.id, QUESTION, DIRECTOR) if newest is False else newest
    if r is None or int(r["created_at"]) < card.status_since:
        return None
    return r


def scan(rt: Runtime) -> dict[str, list[str]]:
    """Enqueue question rows (open agent questions), route rows (unowned todo cards) and,
    after both, triage rows (accepted producers owing a handoff decision).

    Each kind is read in one statement that finds only its candidates; the cards are read
    and the rows written (in one transaction) only when there are some."""
    out: dict[str, list[str]] = {"question": [], "route": [], "triage": []}
    with rt.store.autocommit() as tx:
        now = tx.now()
        asked = {  # asked since the card entered in_progress (``open_question``)
            cid: q
            for cid, q in tx.newest_agent_questions("in_progress", QUESTION, DIRECTOR).items()
            if int(q["created_at"]) >= int(q["card_since"])
        }
        unowned = tx.unowned_todo_ids(now - ROUTE_AFTER_MS, 2000)
        owing = tx.handoff_producer_ids(now - triage.WINDOW_MS, triage.SCAN_LIMIT)
    if not (asked or unowned or owing):
        return out
    machine = lane_machine(rt.machine)
    with rt.store.write() as tx:
        now = tx.now()
        projects = {p.id: p for p in tx.projects()}
        ids = list(asked)
        for card in tx.list_cards(statuses=["in_progress"], ids=ids, limit=2000) if ids else []:
            if card.kind is CardKind.EPIC or card.meta.get("review_of"):
                continue
            q = open_question(tx, card, asked.get(card.id))
            if q is None:
                continue
            qid = int(q["id"])
            rows = [r for r in _rows_for(tx, card.id, "question") if r.kind == "question"]
            if any(r.payload.get("question") == qid for r in rows):
                continue  # each question is dispatched by its own row, at most twice
            project = projects.get(card.project_id)
            if project is None or not project.path or not os.path.isdir(project.path):
                continue
            row = records.enqueue(
                tx, "question", card.id, "director", card.project_id, machine,
                project.path, card.delivery_round, card.claim_epoch,
                {"question": qid, "not_before": 0},
            )  # fmt: skip
            if row is not None:
                out["question"].append(card.ref)
                tx.append_event(
                    "director.enqueued",
                    rt.actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    payload={"queue": row.id, "kind": "question", "question": qid},
                )
        routed = (
            tx.list_cards(statuses=["todo"], unassigned=True, ids=unowned, limit=2000)
            if unowned
            else []
        )
        for card in routed:
            if card.kind is CardKind.EPIC or card.meta.get("review_of"):
                continue
            if now - card.status_since < ROUTE_AFTER_MS:
                continue
            rows = [r for r in _rows_for(tx, card.id, "route") if r.kind == "route"]
            if any(r.created_at >= card.status_since for r in rows):
                continue  # one route row per window
            project = projects.get(card.project_id)
            if project is None or not project.path or not os.path.isdir(project.path):
                continue
            row = records.enqueue(
                tx, "route", card.id, "director", card.project_id, machine, project.path,
                card.delivery_round, card.claim_epoch, {"not_before": 0},
            )  # fmt: skip
            if row is not None:
                out["route"].append(card.ref)
                tx.append_event(
                    "director.enqueued",
                    rt.actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    payload={"queue": row.id, "kind": "route"},
                )
        for card in triage.producers(tx, now) if owing else []:  # last: post-acceptance work
            if triage.already_offered(_rows_for(tx, card.id, triage.KIND), card):
                continue
            project = projects.get(card.project_id)
            if project is None or not project.path or not os.path.isdir(project.path):
                continue
            row = triage.enqueue(tx, card, machine, project.path)
            if row is not None:
                out["triage"].append(card.ref)
                tx.append_event(
                    "director.enqueued",
                    rt.actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    payload={"queue": row.id, "kind": triage.KIND, "round": card.delivery_round},
                )
    return out


# -- prompts ---------------------------------------------------------------------------
def question_prompt(card: Card, question: str, asker: str) -> str:
    q = question if len(question) <= QUESTION_MAX else question[: QUESTION_MAX - 1] + "…"
    text = (
        f"Director row: question\nCard: {card.ref}\nTitle: {card.title}\n"
        f"{asker} (the card's worker) asked and is waiting:\n{q}\n\n"
        f"Re-read the card first (lb card get {card.ref}); if it is no longer in_progress, "
        "do nothing. Otherwise decide:\n"
        f'- answer: lb card comment {card.ref} "<answer>" --kind note, then '
        f"lb card release {card.ref}\n"
        f"- escalate what you may not decide: lb card move {card.ref} awaiting "
        '--reason E1..E5 --question "<question for a human>"\n'
        "Never claim, implement or move a card to done."
    )
    return text[:PROMPT_MAX]


def route_prompt(card: Card, table: list[dict[str, Any]]) -> str:
    lines = [
        f"- {r['role']}: {r['title'] or r['role']} — {', '.join(r['shapes']) or 'any work'}"
        for r in table
    ]
    text = (
        f"Director row: route\nCard: {card.ref}\nTitle: {card.title}\n"
        f"Description: {card.description[:1500]}\n\n"
        "Nobody owns this card. Assign exactly one role from the routing table:\n"
        + "\n".join(lines)
        + f"\n\nCommand: lb card edit {card.ref} --assignee <role>\n"
        "Never claim, implement or move a card to done."
    )
    return text[:PROMPT_MAX]


# -- the lane -----------------------------------------------------------------------------
@dataclass
class Lane:
    session: Session
    kind: str
    token_file: str


@dataclass
class DirectorLane:
    rt: Runtime
    adapters: Callable[[str], Adapter] | None = None
    lanes: dict[str, Lane] = field(default_factory=dict)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _adapter(self, kind: str) -> Adapter:
        if self.adapters is not None:
            return self.adapters(kind)
        return adapter_for(kind, self.rt.config.agent_kinds.get(kind, {}))

    # clock entry: never blocks the supervisor loop
    def kick(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._safe_run, daemon=True, name="director")
            self._thread.start()

    def _safe_run(self) -> None:
        try:
            self.run_once()
        except Exception as exc:
            self.rt.log.error("director", f"director lane failed: {type(exc).__name__}: {exc}")

    def join(self, timeout: float | None = None) -> None:
        t = self._thread
        if t is not None:
            t.join(timeout)

    def run_once(self) -> dict[str, Any]:
        """Scan, then run every due row, one card per turn: question and route rows first,
        then triage rows, rescanning after each triage turn so a question asked meanwhile
        goes ahead of the remaining triage."""
        rt = self.rt
        found = scan(rt)
        ran: list[dict[str, Any]] = []
        seen: set[int] = set()
        for _ in range(PASS_MAX):
            row = self._next_due(seen)
            if row is None:
                break
            seen.add(row.id)
            with rt.store.write() as tx:
                if not records.take_row(tx, row.id, rt.instance or "director"):
                    continue
                taken = records.queue_row(tx, row.id)
            assert taken is not None
            ran.append(self._run_row(taken))
            if taken.kind == triage.KIND:
                for kind, refs in scan(rt).items():
                    found[kind].extend(refs)
        return {"enqueued": found, "ran": ran}

    def _next_due(self, seen: set[int]) -> QueueRow | None:
        with self.rt.store.read() as tx:
            pending = records.pending_rows(
                tx, lane_machine(self.rt.machine), last_kinds=(triage.KIND,)
            )
            now = tx.now()
        for row in pending:
            if row.id not in seen and int(row.payload.get("not_before") or 0) <= now:
                return row
        return None

    def _run_row(self, row: QueueRow) -> dict[str, Any]:
        rt = self.rt
        card = rt.board.get(row.card_id)
        if row.kind == "question":
            if card.status is not Status.IN_PROGRESS or card.claim_epoch != row.epoch:
                return self._finish(row, "done", f"settled before the turn: {card.status.value}")
            with rt.store.read() as tx:
                q = tx.comment(int(row.payload["question"]))
            if q is None:
                return self._finish(row, "failed", "the question comment is gone")
            prompt = question_prompt(card, q.body, q.author)
        elif row.kind == triage.KIND:
            settled, verdict = triage.verdict(card, row)
            if settled:  # stale or decided before the turn: completed without one
                return self._finish(row, "done", f"before the turn: {verdict}")
            with rt.store.read() as tx:
                section = handoff.round_section(tx, card)
            prompt = triage.prompt(card, section, routing_table(rt))
        else:
            if card.status is not Status.TODO or card.assignee is not None:
                return self._finish(row, "done", "routed before the turn")
            prompt = route_prompt(card, routing_table(rt))
        error = self._turn(row, card, prompt)
        fresh = rt.board.get(card.id)
        if row.kind == "question":
            settled = fresh.status is not Status.IN_PROGRESS or fresh.claim_epoch != row.epoch
            verdict = f"card is {fresh.status.value}"
            bound = QUESTION_ATTEMPTS
        elif row.kind == triage.KIND:
            settled, verdict = triage.verdict(fresh, row)
            bound = triage.ATTEMPTS
        else:
            settled = fresh.assignee is not None or fresh.status is not Status.TODO
            verdict = f"assigned to {fresh.assignee}" if fresh.assignee else "still unassigned"
            bound = ROUTE_ATTEMPTS
        if fresh.status is Status.DONE and row.kind != triage.KIND:
            rt.log.error("director", "the director must never close a card", card=card.ref)
        if settled:
            return self._finish(row, "done", verdict)
        why = error or f"the turn ended and the {row.kind} is not settled ({verdict})"
        if row.attempts >= bound:
            if row.kind == triage.KIND:  # a note on the producer; a done card is never parked
                rnd = int(row.payload.get("round") or row.round)
                rt.board.comment(
                    rt.actor, card.id, triage.exhausted_note(card, rnd, bound, why), "note"
                )
            if row.kind == "route":
                with rt.store.write() as tx:
                    current = tx.card(card.id)
                    if current is not None:
                        place_hold(
                            rt,
                            tx,
                            current,
                            "route",
                            ROUTE_ATTEMPTS,
                            f"the director could not route it in {bound} turns ({why}); "
                            f"assign it with lb card edit {card.ref} --assignee ROLE.",
                            reason="decision",
                        )
            return self._finish(row, "failed", why)
        with rt.store.write() as tx:
            records.set_row(
                tx,
                row.id,
                state="pending",
                owner=None,
                pid=None,
                last_error=why,
                payload={**row.payload, "not_before": tx.now() + RETRY_MS},
            )
        rt.log.info("director", f"{row.kind} row retried in 30 s: {why}", card=card.ref)
        return {"queue": row.id, "card": card.ref, "kind": row.kind, "state": "retry", "why": why}

    def _finish(self, row: QueueRow, state: str, note: str) -> dict[str, Any]:
        with self.rt.store.write() as tx:
            records.set_row(
                tx,
                row.id,
                state=state,
                owner=None,
                pid=None,
                last_error=None if state == "done" else note,
                payload={**row.payload, "note": note},
            )
            card = tx.card(row.card_id)
            tx.append_event(
                "director.row",
                self.rt.actor,
                card_id=row.card_id,
                project_id=card.project_id if card else None,
                payload={"queue": row.id, "kind": row.kind, "state": state, "note": note},
            )
        self.rt.log.info("director", f"{row.kind} row {state}: {note}", queue=row.id)
        return {"queue": row.id, "card_id": row.card_id, "kind": row.kind, "state": state}

    # -- sessions ---------------------------------------------------------------------------
    def _lane(self, row: QueueRow, role: Role, kind: str) -> Lane:
        key = row.target_dir
        lane = self.lanes.get(key)
        if lane is not None and lane.session.alive():
            return lane
        rt = self.rt
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        token_file = sandboxing.token_file(rt.config, f"director-{digest}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        env.update(
            {
                "LANEBOARD_TOKEN_FILE": token_file,
                "LANEBOARD_URL": board_socket.serve(rt.board, rt.config.state_path(), rt.log).url,
                "LANEBOARD_AGENT_STATE": rt.config.state_path("agents", "director"),
                "LANEBOARD_AGENT_STDERR": rt.config.state_path(
                    "agents", "stderr", f"director-{digest}.log"
                ),
            }
        )
        for name in ("LANEBOARD_NOW", *INHERITED):
            if os.environ.get(name):
                env[name] = os.environ[name]
        lane_key = f"director:{digest}"
        with rt.store.read() as tx:
            rec = records.session_record(tx, kind, lane_key)
        adapter = self._adapter(kind)
        box = sandboxing.session_sandbox(
            rt.config, kind=kind, lane_key=lane_key, cwd=key, env=env,
            checkout=primary_checkout(key) if os.path.isdir(key) else None,
            token=token_file, writable_cwd=False, database_url=rt.store.url,
        )  # fmt: skip
        session: Session | None = None
        if rec is not None and rec.native_id:
            try:
                session = adapter.open_session(key, rec.native_id, role, env, box)
            except AdapterError:
                session = None
        if session is None:
            session = adapter.open_session(key, None, role, env, box)
        with rt.store.write() as tx:
            records.save_session(
                tx,
                kind,
                lane_key,
                card_id=None,
                role=role.id,
                cwd=key,
                native_id=session.session_id,
                round_=1,
                state="open",
                pid=session.pid,
            )
        lane = Lane(session, kind, token_file)
        self.lanes[key] = lane
        return lane

    def _turn(self, row: QueueRow, card: Card, prompt: str) -> str | None:
        """One director turn on ``card``; returns an error line or None."""
        rt = self.rt
        role = director_role(rt)
        kind = rt.kind_for(role)
        if kind is None:
            return f"no available agent kind carries role {role.id}"
        try:
            lane = self._lane(row, role, kind)
        except (AdapterError, LaneboardError, OSError) as exc:
            return f"the director lane could not open: {exc}"
        token, _ = Tokens(rt.store).create(
            rt.actor,
            DIRECTOR,
            "agent",
            card_id=card.id,
            epoch=card.claim_epoch,
            expires_at=rt.now() + rt.config.time.turn_timeout * 2000,
        )
        sandboxing.write_token(lane.token_file, token)
        with rt.store.write() as tx:
            records.set_row(tx, row.id, pid=lane.session.pid)
            turn_id = records.start_turn(
                tx, row.id, card.id, card.delivery_round, None, lane.kind,
                lane.session.session_id, prompt,
            )  # fmt: skip
        result = lane.session.send(prompt, timeout=rt.config.time.turn_timeout)
        with rt.store.write() as tx:
            records.finish_turn(
                tx,
                turn_id,
                "ok" if result.ok else ("timed_out" if result.timed_out else "failed"),
                final_text=result.final_text,
                error=result.error,
                exit_code=result.exit_code,
                usage=result.usage.to_dict(),
            )
        if not result.ok or not lane.session.alive():
            self._close_lane(row.target_dir)
        return None if result.ok else (result.error or "the director turn failed")

    def _close_lane(self, key: str) -> None:
        lane = self.lanes.pop(key, None)
        if lane is not None:
            try:
                lane.session.close()
            except Exception as exc:
                self.rt.log.warn("director", f"closing the director session failed: {exc}")

    def close(self) -> None:
        self.join(30)
        for key in list(self.lanes):
            self._close_lane(key)


def director_clock(
    lane: DirectorLane, every_ms: int = DEFAULT_INTERVAL_MS
) -> tuple[str, int, Callable[[], Any]]:
    """The ``Supervisor(extra_clocks=...)`` entry: the lane on its own interval."""
    return ("director", every_ms, lane.kick)


def resume_payload(tx: Any, card: Card) -> dict[str, str]:
    """The answer to an escalated question, for the handoff row that resumes the worker.

    Present once: only when the human's answer is newer than the card's last handoff.
    """
    cid = card.meta.get("answer_comment")
    if not cid:
        return {}
    answer = tx.comment(int(cid))
    if answer is None:
        return {}
    last = tx.last_handoff_at(card.id)
    if last is not None and last > answer.created_at:
        return {}
    aw = card.meta.get("awaiting") or {}
    asked = tx.comment(int(aw["comment"])) if aw.get("comment") else None
    lines = []
    if asked is not None:
        lines.append(f"Escalated question ({aw.get('reason')}): {asked.body[:600]}")
    lines.append(f"Answer from {answer.author}: {answer.body[:1200]}")
    return {
        "resume_reason": "a human answered the escalated question",
        "resume_detail": "\n".join(lines),
    }
