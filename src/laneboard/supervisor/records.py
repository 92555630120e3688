"""Durable supervisor records: queue rows, sessions, turns, deferrals, instances."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from laneboard.domain.clock import iso
from laneboard.store.base import Row
from laneboard.store.rows import dumps
from laneboard.store.tx import Tx

ACTIVE = ("pending", "processing")


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
    live = tx.one(
        "SELECT id FROM queue WHERE card_id = ? AND role = ? AND kind = ? "
        "AND state IN ('pending', 'processing')",
        (card_id, role, kind),
    )
    if live:
        return None
    now = tx.now()
    r = tx.one(
        "INSERT INTO queue (kind, card_id, role, project_id, machine, target_dir, round, epoch, "
        "state, payload, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)"
        " RETURNING *",
        (
            kind,
            card_id,
            role,
            project_id,
            machine,
            target_dir,
            round_,
            epoch,
            dumps(payload),
            now,
            now,
        ),
    )
    assert r is not None
    return _qrow(r)


def queue_row(tx: Tx, row_id: int) -> QueueRow | None:
    r = tx.one("SELECT * FROM queue WHERE id = ?", (row_id,))
    return _qrow(r) if r else None


def queue_rows(
    tx: Tx,
    *,
    machine: str | None = None,
    states: tuple[str, ...] = ACTIVE,
    card_id: int | None = None,
    limit: int = 1000,
) -> list[QueueRow]:
    where = ["state IN (" + ",".join("?" * len(states)) + ")"]
    params: list[Any] = list(states)
    if machine is not None:
        where.append("machine = ?")
        params.append(machine)
    if card_id is not None:
        where.append("card_id = ?")
        params.append(card_id)
    got = tx.all(
        f"SELECT * FROM queue WHERE {' AND '.join(where)} ORDER BY id LIMIT ?", [*params, limit]
    )
    return [_qrow(r) for r in got]


def pending_rows(
    tx: Tx, machine: str, *, last_kinds: tuple[str, ...] = (), limit: int = 200
) -> list[QueueRow]:
    """Pending rows of one machine key, oldest first, rows of ``last_kinds`` after all others."""
    params: list[Any] = [machine]
    order = "id"
    if last_kinds:
        order = f"CASE WHEN kind IN ({','.join('?' * len(last_kinds))}) THEN 1 ELSE 0 END, id"
        params.extend(last_kinds)
    got = tx.all(
        f"SELECT * FROM queue WHERE machine = ? AND state = 'pending' ORDER BY {order} LIMIT ?",
        [*params, limit],
    )
    return [_qrow(r) for r in got]


def active_card_ids(tx: Tx) -> set[int]:
    return {
        int(r["card_id"])
        for r in tx.all(
            "SELECT DISTINCT card_id FROM queue WHERE state IN ('pending', 'processing')"
        )
    }


def queue_counts(tx: Tx) -> dict[str, int]:
    return {
        str(r["state"]): int(r["n"])
        for r in tx.all("SELECT state, count(*) AS n FROM queue GROUP BY state")
    }


def take_row(tx: Tx, row_id: int, owner: str) -> bool:
    """pending -> processing for this owner (compare-and-swap)."""
    return (
        tx.run(
            "UPDATE queue SET state = 'processing', owner = ?, attempts = attempts + 1, "
            "started_at = ?, updated_at = ? WHERE id = ? AND state = 'pending'",
            (owner, tx.now(), tx.now(), row_id),
        )
        == 1
    )


def set_row(tx: Tx, row_id: int, **fields: Any) -> None:
    if "payload" in fields:
        fields["payload"] = dumps(fields["payload"])
    if fields.get("state") in ("done", "failed"):
        fields.setdefault("finished_at", tx.now())
    sets = ", ".join(f"{k} = ?" for k in fields)
    tx.run(
        f"UPDATE queue SET {sets}, updated_at = ? WHERE id = ?",
        [*fields.values(), tx.now(), row_id],
    )


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
    r = tx.one(
        "SELECT * FROM sessions WHERE agent_kind = ? AND lane_key = ?", (agent_kind, lane_key)
    )
    return _srec(r) if r else None


def sessions(
    tx: Tx, states: tuple[str, ...] = ("open", "idle", "closed", "stale")
) -> list[SessionRecord]:
    got = tx.all(
        "SELECT * FROM sessions WHERE state IN (" + ",".join("?" * len(states)) + ") ORDER BY id",
        states,
    )
    return [_srec(r) for r in got]


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
    now = tx.now()
    existing = session_record(tx, agent_kind, lane_key)
    if existing is None:
        tx.run(
            "INSERT INTO sessions (agent_kind, lane_key, card_id, role, cwd, native_id, "
            "round, state, resumed_by_replay, pid, last_used_at, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                agent_kind,
                lane_key,
                card_id,
                role,
                cwd,
                native_id,
                round_,
                state,
                1 if replayed else 0,
                pid,
                now,
                now,
                now,
            ),
        )
    else:
        tx.run(
            "UPDATE sessions SET card_id = ?, role = ?, cwd = ?, native_id = ?, round = ?, "
            "state = ?, resumed_by_replay = ?, pid = ?, last_used_at = ?, updated_at = ? "
            "WHERE id = ?",
            (
                card_id,
                role,
                cwd,
                native_id,
                round_,
                state,
                1 if replayed else 0,
                pid,
                now,
                now,
                existing.id,
            ),
        )
    rec = session_record(tx, agent_kind, lane_key)
    assert rec is not None
    return rec


def set_session_state(tx: Tx, rec_id: int, state: str, pid: int | None = None) -> None:
    tx.run(
        "UPDATE sessions SET state = ?, pid = ?, updated_at = ? WHERE id = ?",
        (state, pid, tx.now(), rec_id),
    )


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
    r = tx.one(
        "INSERT INTO turns (queue_id, card_id, round, session_row, agent_kind, native_id, "
        "prompt, outcome, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?) "
        "RETURNING id",
        (queue_id, card_id, round_, session_row, agent_kind, native_id, prompt, tx.now()),
    )
    assert r is not None
    return int(r["id"])


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
    tx.run(
        "UPDATE turns SET outcome = ?, final_text = ?, error = ?, exit_code = ?, "
        "input_tokens = ?, output_tokens = ?, cost_usd = ?, duration_ms = ?, finished_at = ? "
        "WHERE id = ?",
        (
            outcome,
            final_text[-8000:],
            error,
            exit_code,
            int(usage.get("input_tokens", 0)),
            int(usage.get("output_tokens", 0)),
            usage.get("cost_usd"),
            int(usage.get("duration_ms", 0)),
            tx.now(),
            turn_id,
        ),
    )


def turns_for_card(tx: Tx, card_id: int, limit: int = 100) -> list[Row]:
    return tx.all(
        "SELECT * FROM turns WHERE card_id = ? ORDER BY id DESC LIMIT ?", (card_id, limit)
    )[::-1]


def session_transcript(tx: Tx, session_row: int, limit: int = 12) -> list[Row]:
    return tx.all(
        "SELECT prompt, final_text, outcome FROM turns WHERE session_row = ? "
        "ORDER BY id DESC LIMIT ?",
        (session_row, limit),
    )[::-1]


# -- deferrals ------------------------------------------------------------------------
def deferral(tx: Tx, card_id: int) -> Row | None:
    return tx.one("SELECT * FROM deferrals WHERE card_id = ?", (card_id,))


def deferred_until(tx: Tx) -> dict[int, int]:
    return {
        int(r["card_id"]): int(r["next_at"])
        for r in tx.all("SELECT card_id, next_at FROM deferrals")
    }


def record_deferral(tx: Tx, card_id: int, failures: int, next_at: int, error: str) -> None:
    if deferral(tx, card_id) is None:
        tx.run(
            "INSERT INTO deferrals (card_id, failures, next_at, last_error, updated_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (card_id, failures, next_at, error, tx.now()),
        )
    else:
        tx.run(
            "UPDATE deferrals SET failures = ?, next_at = ?, last_error = ?, updated_at = ? "
            "WHERE card_id = ?",
            (failures, next_at, error, tx.now(), card_id),
        )


def clear_deferral(tx: Tx, card_id: int) -> None:
    tx.run("DELETE FROM deferrals WHERE card_id = ?", (card_id,))


def deferrals(tx: Tx) -> list[Row]:
    return tx.all("SELECT * FROM deferrals ORDER BY card_id")
