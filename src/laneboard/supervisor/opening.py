"""Opening a turn's session: the live one, a resumed or replayed one, or a new one.

The pool calls :func:`open_turn` before each turn. A live session of the card's lane is
reused; else a stored native id is resumed; a session that cannot be resumed is replayed
from the supervisor's own transcript; else a new session starts with the handoff prompt.
Each session gets a fresh agent token, its environment and its sandbox here.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from laneboard.agents.base import AdapterError, Session
from laneboard.agents.env import agent_env
from laneboard.agents.sandbox import Sandbox
from laneboard.board.tokens import AgentToken
from laneboard.domain import prompts
from laneboard.domain.model import Card, Project
from laneboard.domain.roles import Role
from laneboard.secrets import register as register_secrets
from laneboard.supervisor import board_socket, boundary, records, sandboxing
from laneboard.supervisor.records import QueueRow
from laneboard.supervisor.runtime import Runtime
from laneboard.workspace.brief import brief_path
from laneboard.workspace.git import primary_checkout
from laneboard.workspace.lane_admit import LaneAdmitter
from laneboard.workspace.remote import checkout_of

if TYPE_CHECKING:
    from laneboard.store.tx import Tx
    from laneboard.supervisor.pool import Pool


def lane_key(role: Role, card: Card) -> str:
    lane = "reviewer" if "reviewer" in role.lanes and "worker" not in role.lanes else "worker"
    return f"{lane}:{card.ref}:r{card.delivery_round}"


class Opened(NamedTuple):
    """A turn's session, its prompt, its record (None: a new session, recorded when the
    turn starts), whether it was replayed, and the agent token it was given."""

    session: Session
    prompt: str
    rec_id: int | None
    replayed: bool
    token: AgentToken


def open_turn(
    pool: Pool, row: QueueRow, card: Card, role: Role, kind: str, key: str,
    project: Project | None = None,
) -> Opened:  # fmt: skip
    """The session for this turn, its prompt, its record id, whether it was replayed and
    its agent token (stored with the turn's start: nothing runs on it before its prompt).
    ``project``: the card's project, as the pool read it for the turn."""
    rt = pool.rt
    adapter = pool.adapter(kind)
    env, token = session_env(rt, card, role)
    box = session_sandbox(rt, card, kind, key, row.target_dir, env, project)
    carry(pool, row, card, role, kind, key)
    with rt.store.autocommit() as tx:
        rec = records.session_record(tx, kind, key)
    reason = str(row.payload.get("resume_reason") or "the card was handed back to you")
    detail = str(row.payload.get("resume_detail") or "")
    with pool.lock:
        live = pool.live.get((kind, key))
    if live is not None and live.session.alive() and rec is not None:
        live.busy, live.last_used = True, time.monotonic()
        # its token file already names the new token, for the new claim epoch
        return Opened(live.session, prompts.resume(card, reason, detail), rec.id, False, token)
    if live is not None:
        pool.forget(kind, key)
    if rec is not None and rec.native_id and rec.round == card.delivery_round:
        why = "its last resume failed"
        if rec.state != "needs_replay":
            try:
                session = adapter.open_session(row.target_dir, rec.native_id, role, env, box)
                pool.remember(kind, key, card.id, session)
                with pool.lock:
                    pool.reopened.add(row.id)
                return Opened(session, prompts.resume(card, reason, detail), rec.id, False, token)
            except AdapterError as exc:
                why = str(exc)
        with rt.store.autocommit() as tx:
            turns = records.session_transcript(tx, rec.id, prompts.REPLAY_TURNS)
        session = adapter.open_session(row.target_dir, None, role, env, box)
        pool.remember(kind, key, card.id, session)
        transcript = [prompts.TranscriptTurn(t["prompt"], t["final_text"]) for t in turns]
        return Opened(session, prompts.replay(card, role, transcript, why), rec.id, True, token)
    pool.evict_if_full()
    session = adapter.open_session(row.target_dir, None, role, env, box)
    pool.remember(kind, key, card.id, session)
    prompt = prompts.handoff(card, role, brief_path(row.target_dir, card))
    if "reviewer" in role.lanes:
        prompt += boundary.review_evidence(rt, card)
    # a new session is recorded, its native id with it, in the turn's start transaction
    return Opened(session, prompt, rec.id if rec is not None else None, False, token)


def start_turn(
    tx: Tx, rt: Runtime, row: QueueRow, card: Card, role: Role, kind: str, key: str,
    opened: Opened,
) -> tuple[int, str, int]:  # fmt: skip
    """The turn's records — its agent token, its session's record with the native id,
    the turn — and its ``turn.started`` event, in the caller's transaction: (turn id,
    prompt, session record id)."""
    session, replayed = opened.session, opened.replayed
    rec = records.save_session(
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
    followups = tx.pending_followups(card.id)
    prompt = prompts.with_followups(opened.prompt, [(f["author"], f["body"]) for f in followups])
    turn_id = records.start_turn(
        tx, row.id, card.id, card.delivery_round, rec.id, kind, session.session_id, prompt
    )
    tx.deliver_followups([int(f["id"]) for f in followups], turn_id)
    opened.token.store(tx, rt.actor)  # its event, like every event, after the writes
    tx.append_event(
        "turn.started",
        rt.actor,
        card_id=card.id,
        project_id=card.project_id,
        run_id=card.run_id,
        payload={
            "queue": row.id,
            "round": card.delivery_round,
            "kind": kind,
            "session": session.session_id,
            "pid": session.pid,
            "replayed": replayed,
            "turn": turn_id,
            "followups": len(followups),
        },
    )
    return turn_id, prompt, rec.id


def carry(pool: Pool, row: QueueRow, card: Card, role: Role, kind: str, key: str) -> None:
    """A rework (``resume_from_round``) continues the previous round's session.

    Only in the same directory: a rework that runs in a new lane directory starts a
    fresh session, whose handoff lists the must-fix items on the acceptance list.
    """
    prev = row.payload.get("resume_from_round")
    if not isinstance(prev, int) or prev == card.delivery_round:
        return
    old_key = lane_key(role, replace(card, delivery_round=prev))
    with pool.rt.store.write() as tx:
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
    with pool.lock:
        live = pool.live.pop((kind, old_key), None)
        if live is not None:
            live.lane_key = key
            pool.live[(kind, key)] = live


def session_env(rt: Runtime, card: Card, role: Role) -> tuple[dict[str, str], AgentToken]:
    """A fresh agent token for the card's claim (written to its token file; stored by the
    caller, ``AgentToken.store``), and the environment the agent's processes start with."""
    ttl = rt.config.time.turn_timeout * 3 * 1000
    pending = AgentToken.mint(role.id, card.id, card.claim_epoch, rt.now() + ttl)
    token = pending.token
    register_secrets([token], rt.config.agent_kinds.get(role.agent, {}).get("secret_env", ()))
    tokfile = sandboxing.token_file(rt.config, card.ref)
    sandboxing.write_token(tokfile, token)
    kind_cfg = rt.config.agent_kinds.get(role.agent, {})
    env = agent_env(
        os.environ,
        token=token,
        card_ref=card.ref,
        board_url=board_socket.serve(rt.board, rt.config.state_path(), rt.log).url,
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
    return env, pending


def session_sandbox(
    rt: Runtime, card: Card, kind: str, key: str, cwd: str, env: dict[str, str],
    project: Project | None = None,
) -> Sandbox | None:  # fmt: skip
    """The sandbox the session's processes start in (None: the sandbox is off)."""
    if project is None or project.id != card.project_id:
        with rt.store.autocommit() as tx:
            project = tx.project(id=card.project_id)
    path = checkout_of(project, rt.clones) if project else None  # a remote's: this machine's clone
    probe = (
        rt.admitter.primary_checkout if isinstance(rt.admitter, LaneAdmitter) else primary_checkout
    )  # the admitter remembers it for a couple of seconds: not two git runs per turn
    checkout = probe(path) if path and os.path.isdir(path) else None
    return sandboxing.session_sandbox(
        rt.config,
        kind=kind,
        lane_key=key,
        cwd=cwd,
        env=env,
        checkout=checkout,
        token=env.get("LANEBOARD_TOKEN_FILE"),
        database_url=rt.store.url,
    )
