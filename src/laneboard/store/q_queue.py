"""The dispatch queue and session records: queue rows, sessions, turns, deferrals."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from laneboard.store import rows
from laneboard.store.base import Row
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps

if TYPE_CHECKING:
    from laneboard.domain.model import Project
    from laneboard.store.base import Store

# a live session's record once its process is gone: ``idle`` (it can be resumed) while its
# card is open, ``closed`` once the card is terminal or gone
SETTLE_SESSION = (
    "UPDATE sessions SET state = CASE WHEN EXISTS (SELECT 1 FROM cards c "
    "WHERE c.id = sessions.card_id AND c.status NOT IN ('done', 'canceled')) "
    "THEN 'idle' ELSE 'closed' END, pid = NULL, updated_at = ? "
    "WHERE agent_kind = ? AND lane_key = ? AND state IN ('open', 'running', 'idle')"
)


TAKE_ROW = (  # pending -> processing for one owner (compare-and-swap), the row as taken
    "UPDATE queue SET state = 'processing', owner = ?, attempts = attempts + 1, "
    "started_at = ?, updated_at = ? WHERE id = ? AND state = 'pending' RETURNING *"
)


def settle_session(store: Store, agent_kind: str, lane_key: str) -> None:
    """Record that a session no longer has a process (``SETTLE_SESSION``): one statement,
    its own transaction, and no wake-up (it writes no event)."""
    now = store.clock.now_ms()
    store.write_statement(SETTLE_SESSION, (now, agent_kind, lane_key), announce=False)


def take_pending_row(store: Store, row_id: int, owner: str) -> Row | None:
    """A pending queue row taken by ``owner`` (``TAKE_ROW``), as taken: one statement, its
    own transaction, and no wake-up (it writes no event). None: it was not pending."""
    now = store.clock.now_ms()
    got = store.write_statement(TAKE_ROW, (owner, now, now, row_id), announce=False)
    return got[0] if got else None


class QueueQueries(Queries):
    # -- queue rows ----------------------------------------------------------------------
    def enqueue_row(
        self,
        kind: str,
        card_id: int,
        role: str,
        project_id: int,
        machine: str,
        target_dir: str,
        round_: int,
        epoch: int,
        payload: dict[str, Any],
    ) -> Row | None:
        """A pending row, unless one of (card, role, kind) is pending or processing
        already (None then): the check and the insert are one statement."""
        now = self.now()
        return self.one(
            "INSERT INTO queue (kind, card_id, role, project_id, machine, target_dir, round, "
            "epoch, state, payload, created_at, updated_at) "
            "SELECT ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ? WHERE NOT EXISTS ("
            "SELECT 1 FROM queue WHERE card_id = ? AND role = ? AND kind = ? "
            "AND state IN ('pending', 'processing')) RETURNING *",
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
                card_id,
                role,
                kind,
            ),
        )

    def insert_queue_row(
        self,
        kind: str,
        card_id: int,
        role: str,
        project_id: int,
        machine: str,
        target_dir: str,
        round_: int,
        epoch: int,
        payload: dict[str, Any],
    ) -> Row:
        now = self.now()
        r = self.one(
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
        return r

    def queue_row(self, row_id: int) -> Row | None:
        return self.one("SELECT * FROM queue WHERE id = ?", (row_id,))

    def queue_rows(
        self,
        states: tuple[str, ...],
        *,
        machine: str | None = None,
        card_id: int | None = None,
        limit: int = 1000,
    ) -> list[Row]:
        where = ["state IN (" + ",".join("?" * len(states)) + ")"]
        params: list[Any] = list(states)
        if machine is not None:
            where.append("machine = ?")
            params.append(machine)
        if card_id is not None:
            where.append("card_id = ?")
            params.append(card_id)
        return self.all(
            f"SELECT * FROM queue WHERE {' AND '.join(where)} ORDER BY id LIMIT ?", [*params, limit]
        )

    def pending_queue_rows(
        self, machine: str, last_kinds: tuple[str, ...] = (), limit: int = 200
    ) -> list[Row]:
        """Pending rows of one machine key, oldest first, rows of ``last_kinds`` after all others."""
        params: list[Any] = [machine]
        order = "id"
        if last_kinds:
            order = f"CASE WHEN kind IN ({','.join('?' * len(last_kinds))}) THEN 1 ELSE 0 END, id"
            params.extend(last_kinds)
        return self.all(
            f"SELECT * FROM queue WHERE machine = ? AND state = 'pending' ORDER BY {order} LIMIT ?",
            [*params, limit],
        )

    def ended_unqueued_refs(self, refs: list[str]) -> list[str]:
        """Of these card references, those of cards done or canceled with no dispatch row
        pending or processing (one statement for any number)."""
        if not refs:
            return []
        got = self.all(
            "SELECT c.ref FROM cards c WHERE c.ref IN (" + ",".join("?" * len(refs)) + ") "
            "AND c.status IN ('done', 'canceled') AND NOT EXISTS (SELECT 1 FROM queue q "
            "WHERE q.card_id = c.id AND q.state IN ('pending', 'processing'))",
            refs,
        )
        return [str(r["ref"]) for r in got]

    def queued_card_ids(self) -> set[int]:
        """Cards with a pending or processing queue row."""
        return {
            int(r["card_id"])
            for r in self.all(
                "SELECT DISTINCT card_id FROM queue WHERE state IN ('pending', 'processing')"
            )
        }

    def queue_counts(self) -> dict[str, int]:
        return {
            str(r["state"]): int(r["n"])
            for r in self.all("SELECT state, count(*) AS n FROM queue GROUP BY state")
        }

    def claim_queue_row(self, row_id: int, owner: str) -> Row | None:
        """``take_queue_row``, returning the row as taken (None: it was not pending)."""
        now = self.now()
        return self.one(TAKE_ROW, (owner, now, now, row_id))

    def take_queue_row(self, row_id: int, owner: str) -> bool:
        """pending -> processing for this owner (compare-and-swap)."""
        return self.claim_queue_row(row_id, owner) is not None

    def update_queue_row(self, row_id: int, fields: dict[str, Any]) -> None:
        """Set columns of a queue row (``payload`` as JSON); bumps ``updated_at``."""
        if "payload" in fields:
            fields["payload"] = dumps(fields["payload"])
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.run(
            f"UPDATE queue SET {sets}, updated_at = ? WHERE id = ?",
            [*fields.values(), self.now(), row_id],
        )

    def last_handoff_target(self, card_id: int | None) -> str | None:
        """The target directory of a card's newest handoff row."""
        row = self.one(
            "SELECT target_dir FROM queue WHERE card_id = ? AND kind = 'handoff' "
            "ORDER BY id DESC LIMIT 1",
            (card_id,),
        )
        return str(row["target_dir"]) if row else None

    def last_handoff_at(self, card_id: int) -> int | None:
        """When a card's newest handoff row was created."""
        last = self.scalar(
            "SELECT max(created_at) FROM queue WHERE card_id = ? AND kind = 'handoff'", (card_id,)
        )
        return int(last) if last is not None else None

    # -- sessions ------------------------------------------------------------------------
    def session_row(self, agent_kind: str, lane_key: str) -> Row | None:
        return self.one(
            "SELECT * FROM sessions WHERE agent_kind = ? AND lane_key = ?", (agent_kind, lane_key)
        )

    def session_rows(self, states: tuple[str, ...]) -> list[Row]:
        return self.all(
            "SELECT * FROM sessions WHERE state IN ("
            + ",".join("?" * len(states))
            + ") ORDER BY id",
            states,
        )

    def live_session_rows(self) -> list[Row]:
        """The sessions that may still have a process (open, running, idle), by id: the
        partial index ``sessions_live`` (migration 250) holds them, in the same words."""
        return self.all(
            "SELECT * FROM sessions WHERE state IN ('open', 'running', 'idle') ORDER BY id"
        )

    def insert_session(self, agent_kind: str, lane_key: str, values: dict[str, Any]) -> Row:
        """``values``: card_id, role, cwd, native_id, round, state, replayed, pid; returns
        the new record."""
        now = self.now()
        v = values
        r = self.one(
            "INSERT INTO sessions (agent_kind, lane_key, card_id, role, cwd, native_id, "
            "round, state, resumed_by_replay, pid, last_used_at, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (
                agent_kind,
                lane_key,
                v["card_id"],
                v["role"],
                v["cwd"],
                v["native_id"],
                v["round"],
                v["state"],
                1 if v["replayed"] else 0,
                v["pid"],
                now,
                now,
                now,
            ),
        )
        assert r is not None
        return r

    def upsert_session(self, agent_kind: str, lane_key: str, values: dict[str, Any]) -> Row:
        """The record of (kind, lane) written in one statement: inserted, or reused with
        ``values`` (as for ``insert_session``); a replayed session used again with the same
        native id stays marked replayed. Returns it."""
        now = self.now()
        v = values
        r = self.one(
            "INSERT INTO sessions (agent_kind, lane_key, card_id, role, cwd, native_id, "
            "round, state, resumed_by_replay, pid, last_used_at, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (agent_kind, lane_key) DO UPDATE SET card_id = excluded.card_id, "
            "role = excluded.role, cwd = excluded.cwd, native_id = excluded.native_id, "
            "round = excluded.round, state = excluded.state, resumed_by_replay = CASE "
            "WHEN sessions.resumed_by_replay = 1 AND (sessions.native_id = excluded.native_id "
            "OR (sessions.native_id IS NULL AND excluded.native_id IS NULL)) THEN 1 "
            "ELSE excluded.resumed_by_replay END, pid = excluded.pid, "
            "last_used_at = excluded.last_used_at, updated_at = excluded.updated_at "
            "RETURNING *",
            (
                agent_kind,
                lane_key,
                v["card_id"],
                v["role"],
                v["cwd"],
                v["native_id"],
                v["round"],
                v["state"],
                1 if v["replayed"] else 0,
                v["pid"],
                now,
                now,
                now,
            ),
        )
        assert r is not None
        return r

    def turn_project(self, project_id: int) -> tuple[Project | None, dict[str, Any]]:
        """A turn's project and its board settings (``project_config``), in one read."""
        r = self.one("SELECT * FROM projects WHERE id = ?", (project_id,))
        if r is None:
            return None, {}
        return rows.project(r), dict(json.loads(r["config"])) if r["config"] else {}

    def update_session(self, rec_id: int, values: dict[str, Any]) -> Row:
        """Reuse a session record; ``values`` as for ``insert_session``; returns it."""
        now = self.now()
        v = values
        r = self.one(
            "UPDATE sessions SET card_id = ?, role = ?, cwd = ?, native_id = ?, round = ?, "
            "state = ?, resumed_by_replay = ?, pid = ?, last_used_at = ?, updated_at = ? "
            "WHERE id = ? RETURNING *",
            (
                v["card_id"],
                v["role"],
                v["cwd"],
                v["native_id"],
                v["round"],
                v["state"],
                1 if v["replayed"] else 0,
                v["pid"],
                now,
                now,
                rec_id,
            ),
        )
        assert r is not None
        return r

    def set_session_state(self, rec_id: int, state: str, pid: int | None = None) -> None:
        self.run(
            "UPDATE sessions SET state = ?, pid = ?, updated_at = ? WHERE id = ?",
            (state, pid, self.now(), rec_id),
        )

    # -- turns ---------------------------------------------------------------------------
    def start_turn(
        self,
        queue_id: int | None,
        card_id: int,
        round_: int,
        session_row: int | None,
        agent_kind: str,
        native_id: str | None,
        prompt: str,
    ) -> int:
        r = self.one(
            "INSERT INTO turns (queue_id, card_id, round, session_row, agent_kind, native_id, "
            "prompt, outcome, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?) "
            "RETURNING id",
            (queue_id, card_id, round_, session_row, agent_kind, native_id, prompt, self.now()),
        )
        assert r is not None
        return int(r["id"])

    def finish_turn(
        self,
        turn_id: int,
        outcome: str,
        final_text: str,
        error: str | None,
        exit_code: int | None,
        usage: dict[str, Any],
    ) -> None:
        self.run(
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
                self.now(),
                turn_id,
            ),
        )

    def lose_running_turns(self, queue_id: int, outcome: str = "lost") -> int:
        """A queue row's turns still marked running end as ``outcome`` (``lost``, or
        ``delivered`` when the card moved on before the turn was closed); returns how many."""
        return self.run(
            "UPDATE turns SET outcome = ?, finished_at = ? "
            "WHERE queue_id = ? AND outcome = 'running'",
            (outcome, self.now(), queue_id),
        )

    def turns_for_card(self, card_id: int, limit: int = 100) -> list[Row]:
        """A card's newest ``limit`` turns, oldest first."""
        return self.all(
            "SELECT * FROM turns WHERE card_id = ? ORDER BY id DESC LIMIT ?", (card_id, limit)
        )[::-1]

    def turn_outcomes(self, card_id: int) -> list[Row]:
        """The outcome of each of a card's turns."""
        return self.all("SELECT outcome FROM turns WHERE card_id = ?", (card_id,))

    def session_transcript(self, session_row: int, limit: int = 12) -> list[Row]:
        """A session's newest ``limit`` turns (prompt, final text, outcome), oldest first."""
        return self.all(
            "SELECT prompt, final_text, outcome FROM turns WHERE session_row = ? "
            "ORDER BY id DESC LIMIT ?",
            (session_row, limit),
        )[::-1]

    # -- deferrals: one row per card and machine ----------------------------------------
    def deferral(self, card_id: int, machine: str) -> Row | None:
        return self.one(
            "SELECT * FROM deferrals WHERE card_id = ? AND machine = ?", (card_id, machine)
        )

    def deferred_until(self, machine: str) -> dict[int, int]:
        """When ``machine`` may next try each card it deferred."""
        return {
            int(r["card_id"]): int(r["next_at"])
            for r in self.all(
                "SELECT card_id, next_at FROM deferrals WHERE machine = ?", (machine,)
            )
        }

    def deferral_failures(self, card_id: int) -> dict[str, int]:
        """How often each machine failed to admit the card, by machine."""
        rows = self.all("SELECT machine, failures FROM deferrals WHERE card_id = ?", (card_id,))
        return {str(r["machine"]): int(r["failures"]) for r in rows}

    def insert_deferral(
        self, card_id: int, machine: str, failures: int, next_at: int, error: str
    ) -> None:
        self.run(
            "INSERT INTO deferrals (card_id, machine, failures, next_at, last_error, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
            (card_id, machine, failures, next_at, error, self.now()),
        )

    def update_deferral(
        self, card_id: int, machine: str, failures: int, next_at: int, error: str
    ) -> None:
        self.run(
            "UPDATE deferrals SET failures = ?, next_at = ?, last_error = ?, updated_at = ? "
            "WHERE card_id = ? AND machine = ?",
            (failures, next_at, error, self.now(), card_id, machine),
        )

    def clear_deferral(self, card_id: int) -> bool:
        """End every machine's deferral of the card (it was claimed, or held); whether it
        had any."""
        return self.run("DELETE FROM deferrals WHERE card_id = ?", (card_id,)) > 0

    def deferrals(self) -> list[Row]:
        return self.all("SELECT * FROM deferrals ORDER BY card_id, machine")

    def card_refs(self, ids: Iterable[int]) -> dict[int, str]:
        """The refs of the cards ``ids`` (those that exist), by id."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        got = self.all(f"SELECT id, ref FROM cards WHERE id IN ({marks})", wanted)
        return {int(r["id"]): str(r["ref"]) for r in got}
