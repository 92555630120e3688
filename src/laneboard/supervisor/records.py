"""Durable supervisor records: queue rows, sessions, turns, deferrals, instances."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from laneboard.domain.clock import iso
from laneboard.store.base import Row, Store
from laneboard.store.q_queue import take_pending_row
from laneboard.store.tx import Tx

ACTIVE = ("pending", "processing")
LIVE_SESSION = ("open", "running", "idle")  # session states that may have a process


@dataclass(frozen=True)
class QueueRow:
    id: int
    kind: str
    card_id: int
    role: str
    project_id: int
    machine: str
    target_dir: str
    round: int
    epoch: int
    state: str
    attempts: int
    recoveries: int
    owner: str | None
    pid: int | None
    payload: dict[str, Any]
    last_error: str | None
    created_at: int
    updated_at: int
    started_at: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "card_id": self.card_id,
            "role": self.role,
            "machine": self.machine,
            "target_dir": self.target_dir,
            "round": self.round,
            "epoch": self.epoch,
            "state": self.state,
            "attempts": self.attempts,
            "recoveries": self.recoveries,
            "owner": self.owner,
            "pid": self.pid,
            "payload": self.payload,
            "last_error": self.last_error,
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
        }


def _qrow(r: Row) -> QueueRow:
    return QueueRow(
        r["id"],
        r["kind"],
        r["card_id"],
        r["role"],
        r["project_id"],
        r["machine"],
        r["target_dir"],
        r["round"],
        r["epoch"],
        r["state"],
        r["attempts"],
        r["recoveries"],
        r["owner"],
        r["pid"],
        json.loads(r["payload"]),
        r["last_error"],
        r["created_at"],
        r["updated_at"],
        r["started_at"],
    )


def enqueue(
    tx: Tx,
    kind: str,
    card_id: int,
    role: str,
    project_id: int,
    machine: str,
    target_dir: str,
    round_: int,
    epoch: int,
    payload: dict[str, Any],
) -> QueueRow | None:
    """Insert a pending row unless one for (card, role, kind) is already live (coalesced)."""
    r = tx.enqueue_row(kind, card_id, role, project_id, machine, target_dir, round_, epoch, payload)
    return _qrow(r) if r is not None else None


def queue_row(tx: Tx, row_id: int) -> QueueRow | None:
    r = tx.queue_row(row_id)
    return _qrow(r) if r else None


def queue_rows(
    tx: Tx,
    *,
    machine: str | None = None,
    states: tuple[str, ...] = ACTIVE,
    card_id: int | None = None,
    limit: int = 1000,
) -> list[QueueRow]:
    got = tx.queue_rows(states, machine=machine, card_id=card_id, limit=limit)
    return [_qrow(r) for r in got]


def pending_rows(
    tx: Tx, machine: str, *, last_kinds: tuple[str, ...] = (), limit: int = 200
) -> list[QueueRow]:
    """Pending rows of one machine key, oldest first, rows of ``last_kinds`` after all others."""
    return [_qrow(r) for r in tx.pending_queue_rows(machine, last_kinds, limit)]


def active_card_ids(tx: Tx) -> set[int]:
    return tx.queued_card_ids()


def queue_counts(tx: Tx) -> dict[str, int]:
    return tx.queue_counts()


def take_row(tx: Tx, row_id: int, owner: str) -> bool:
    """pending -> processing for this owner (compare-and-swap)."""
    return tx.take_queue_row(row_id, owner)


def taken_row(tx: Tx, row_id: int, owner: str) -> QueueRow | None:
    """``take_row`` in one statement, returning the row as taken (None: not pending)."""
    r = tx.claim_queue_row(row_id, owner)
    return _qrow(r) if r is not None else None


def take_pending(store: Store, row_id: int, owner: str) -> QueueRow | None:
    """``taken_row`` as a statement of its own (the pool's drain)."""
    r = take_pending_row(store, row_id, owner)
    return _qrow(r) if r is not None else None


def set_row(tx: Tx, row_id: int, **fields: Any) -> None:
    if fields.get("state") in ("done", "failed"):
        fields.setdefault("finished_at", tx.now())
    tx.update_queue_row(row_id, fields)


# -- sessions -----------------------------------------------------------------------
@dataclass(frozen=True)
class SessionRecord:
    id: int
    agent_kind: str
    lane_key: str
    card_id: int | None
    role: str
    cwd: str
    native_id: str | None
    round: int
    state: str
    resumed_by_replay: bool
    pid: int | None
    last_used_at: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent_kind": self.agent_kind,
            "lane_key": self.lane_key,
            "card_id": self.card_id,
            "role": self.role,
            "cwd": self.cwd,
            "native_id": self.native_id,
            "round": self.round,
            "state": self.state,
            "resumed_by_replay": self.resumed_by_replay,
            "pid": self.pid,
            "last_used_at": iso(self.last_used_at),
        }


def _srec(r: Row) -> SessionRecord:
    return SessionRecord(
        r["id"],
        r["agent_kind"],
        r["lane_key"],
        r["card_id"],
        r["role"],
        r["cwd"],
        r["native_id"],
        r["round"],
        r["state"],
        bool(r["resumed_by_replay"]),
        r["pid"],
        r["last_used_at"],
    )


def session_record(tx: Tx, agent_kind: str, lane_key: str) -> SessionRecord | None:
    r = tx.session_row(agent_kind, lane_key)
    return _srec(r) if r else None


def sessions(
    tx: Tx, states: tuple[str, ...] = ("open", "idle", "closed", "stale")
) -> list[SessionRecord]:
    return [_srec(r) for r in tx.session_rows(states)]


def live_sessions(tx: Tx) -> list[SessionRecord]:
    """The sessions that may still have a process (``LIVE_SESSION``), by an index that
    holds only them: the table keeps every session the board ever had."""
    return [_srec(r) for r in tx.live_session_rows()]


def save_session(
    tx: Tx,
    agent_kind: str,
    lane_key: str,
    *,
    card_id: int | None,
    role: str,
    cwd: str,
    native_id: str | None,
    round_: int,
    state: str,
    replayed: bool = False,
    pid: int | None = None,
) -> SessionRecord:
    # one statement: a replayed session used again (the same native id) stays marked
    values = {
        "card_id": card_id,
        "role": role,
        "cwd": cwd,
        "native_id": native_id,
        "round": round_,
        "state": state,
        "replayed": replayed,
        "pid": pid,
    }
    return _srec(tx.upsert_session(agent_kind, lane_key, values))


def set_session_state(tx: Tx, rec_id: int, state: str, pid: int | None = None) -> None:
    tx.set_session_state(rec_id, state, pid)


# -- turns ----------------------------------------------------------------------------
def start_turn(
    tx: Tx,
    queue_id: int | None,
    card_id: int,
    round_: int,
    session_row: int | None,
    agent_kind: str,
    native_id: str | None,
    prompt: str,
) -> int:
    return tx.start_turn(queue_id, card_id, round_, session_row, agent_kind, native_id, prompt)


def finish_turn(
    tx: Tx,
    turn_id: int,
    outcome: str,
    *,
    final_text: str,
    error: str | None,
    exit_code: int | None,
    usage: dict[str, Any],
) -> None:
    tx.finish_turn(turn_id, outcome, final_text, error, exit_code, usage)


def turns_for_card(tx: Tx, card_id: int, limit: int = 100) -> list[Row]:
    return tx.turns_for_card(card_id, limit)


def session_transcript(tx: Tx, session_row: int, limit: int = 12) -> list[Row]:
    return tx.session_transcript(session_row, limit)


# -- deferrals (per card and machine) ---------------------------------------------------
def deferral(tx: Tx, card_id: int, machine: str) -> Row | None:
    return tx.deferral(card_id, machine)


def deferred_until(tx: Tx, machine: str) -> dict[int, int]:
    return tx.deferred_until(machine)


def record_deferral(
    tx: Tx, card_id: int, machine: str, failures: int, next_at: int, error: str
) -> None:
    if deferral(tx, card_id, machine) is None:
        tx.insert_deferral(card_id, machine, failures, next_at, error)
    else:
        tx.update_deferral(card_id, machine, failures, next_at, error)


def deferral_failures(tx: Tx, card_id: int) -> dict[str, int]:
    return tx.deferral_failures(card_id)


def clear_deferral(tx: Tx, card_id: int) -> bool:
    """End every machine's deferral of the card; whether it had any."""
    return tx.clear_deferral(card_id)


def deferrals(tx: Tx) -> list[Row]:
    return tx.deferrals()
