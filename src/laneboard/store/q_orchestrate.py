"""Orchestrated runs: the run's orchestration row, its assignments and their revisions,
its roles' sessions and the ledger of dispatched turns."""

from __future__ import annotations

from typing import Any

from laneboard.store.base import Row
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps

ORCH_JSON = ("spec", "budgets", "usage", "start", "result")


class OrchestrateQueries(Queries):
    # -- the orchestration row -------------------------------------------------------
    def insert_orchestration(self, run_id: int, project_id: int, goal: str,
                             fields: dict[str, Any]) -> None:  # fmt: skip
        now = self.now()
        self.run(
            "INSERT INTO orchestrations (run_id, project_id, goal, spec, budgets, usage, start, "
            "phase, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, project_id, goal, dumps(fields["spec"]), dumps(fields["budgets"]),
             dumps(fields["usage"]), dumps(fields["start"]), fields["phase"], now, now),
        )  # fmt: skip

    def orchestration_row(self, run_id: int) -> Row | None:
        return self.one("SELECT * FROM orchestrations WHERE run_id = ?", (run_id,))

    def orchestrated_run_ids(self) -> set[int]:
        """Runs an orchestration drives (the supervisor neither claims nor ticks them)."""
        return {int(r["run_id"]) for r in self.all("SELECT run_id FROM orchestrations")}

    def orchestration_for_goal(self, project_id: int, goal: str) -> Row | None:
        return self.one(
            "SELECT * FROM orchestrations WHERE project_id = ? AND goal = ? "
            "ORDER BY run_id DESC LIMIT 1",
            (project_id, goal),
        )

    def update_orchestration(self, run_id: int, fields: dict[str, Any]) -> int:
        cols = list(fields)
        vals = [dumps(fields[c]) if c in ORCH_JSON else fields[c] for c in cols]
        sets = ", ".join(f"{c} = ?" for c in cols)
        return self.run(
            f"UPDATE orchestrations SET {sets}, version = version + 1, updated_at = ? "
            "WHERE run_id = ?",
            [*vals, self.now(), run_id],
        )

    # -- assignments -----------------------------------------------------------------
    def assignment_rows(self, run_id: int) -> list[Row]:
        return self.all("SELECT * FROM assignments WHERE run_id = ? ORDER BY card_id", (run_id,))

    def assignment_by_card(self, card_id: int) -> Row | None:
        return self.one("SELECT * FROM assignments WHERE card_id = ?", (card_id,))

    def upsert_assignment(self, card_id: int, run_id: int, record: dict[str, Any]) -> None:
        now = self.now()
        changed = self.run(
            "UPDATE assignments SET name = ?, owner = ?, state = ?, revision = ?, record = ?, "
            "updated_at = ? WHERE card_id = ?",
            (record["name"], record["owner"], record["state"], record["revision"],
             dumps(record), now, card_id),
        )  # fmt: skip
        if not changed:
            self.run(
                "INSERT INTO assignments (card_id, run_id, name, owner, state, revision, record, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (card_id, run_id, record["name"], record["owner"], record["state"],
                 record["revision"], dumps(record), now, now),
            )  # fmt: skip

    # -- revisions -------------------------------------------------------------------
    def revision_rows(self, card_id: int) -> list[Row]:
        return self.all(
            "SELECT * FROM assignment_revisions WHERE card_id = ? ORDER BY revision", (card_id,)
        )

    def revision_row(self, card_id: int, revision: int) -> Row | None:
        return self.one(
            "SELECT * FROM assignment_revisions WHERE card_id = ? AND revision = ?",
            (card_id, revision),
        )

    def put_revision(self, card_id: int, revision: int, fields: dict[str, Any]) -> None:
        """Set columns of one revision's row, creating it when new."""
        vals = {k: dumps(v) if k == "evidence" else v for k, v in fields.items()}
        now = self.now()
        if self.revision_row(card_id, revision) is None:
            cols = ["card_id", "revision", "state", "evidence", "created_at", "updated_at"]
            base = {"state": "open", "evidence": "[]", **vals}
            extra = [k for k in base if k not in ("state", "evidence")]
            names = [*cols, *extra]
            self.run(
                f"INSERT INTO assignment_revisions ({', '.join(names)}) "
                f"VALUES ({', '.join('?' * len(names))})",
                [card_id, revision, base["state"], base["evidence"], now, now,
                 *(base[k] for k in extra)],
            )  # fmt: skip
            return
        sets = ", ".join(f"{k} = ?" for k in vals)
        self.run(
            f"UPDATE assignment_revisions SET {sets}, updated_at = ? "
            "WHERE card_id = ? AND revision = ?",
            [*vals.values(), now, card_id, revision],
        )

    # -- roles -----------------------------------------------------------------------
    def role_rows(self, run_id: int) -> list[Row]:
        return self.all(
            "SELECT * FROM orchestration_roles WHERE run_id = ? ORDER BY role", (run_id,)
        )

    def put_role(self, run_id: int, role: str, kind: str, fields: dict[str, Any]) -> None:
        now = self.now()
        sets = "".join(f", {k} = ?" for k in fields)
        changed = self.run(
            f"UPDATE orchestration_roles SET kind = ?{sets}, updated_at = ? "
            "WHERE run_id = ? AND role = ?",
            [kind, *fields.values(), now, run_id, role],
        )
        if not changed:
            names = ["run_id", "role", "kind", *fields, "updated_at"]
            self.run(
                f"INSERT INTO orchestration_roles ({', '.join(names)}) "
                f"VALUES ({', '.join('?' * len(names))})",
                [run_id, role, kind, *fields.values(), now],
            )

    def revoke_run_tokens(self, run_id: int) -> int:
        """Revoke every agent credential scoped to a card of the run."""
        return self.run(
            "UPDATE tokens SET revoked_at = ? WHERE revoked_at IS NULL AND kind = 'agent' "
            "AND card_id IN (SELECT id FROM cards WHERE run_id = ?)",
            (self.now(), run_id),
        )

    # -- the turn ledger -------------------------------------------------------------
    def insert_turn(self, run_id: int, role: str, assignment: str | None,
                    revision: int | None, purpose: str) -> int:  # fmt: skip
        row = self.one(
            "INSERT INTO orchestration_turns (run_id, role, assignment, revision, purpose, "
            "state, output_bytes, started_at) VALUES (?, ?, ?, ?, ?, 'dispatched', 0, ?) "
            "RETURNING id",
            (run_id, role, assignment, revision, purpose, self.now()),
        )
        assert row is not None
        return int(row["id"])

    def end_turn(self, turn_id: int, state: str, output_bytes: int, detail: str) -> int:
        return self.run(
            "UPDATE orchestration_turns SET state = ?, output_bytes = ?, detail = ?, "
            "ended_at = ? WHERE id = ? AND state = 'dispatched'",
            (state, output_bytes, detail, self.now(), turn_id),
        )

    def turn_rows(self, run_id: int, state: str | None = None) -> list[Row]:
        if state is None:
            return self.all(
                "SELECT * FROM orchestration_turns WHERE run_id = ? ORDER BY id", (run_id,)
            )
        return self.all(
            "SELECT * FROM orchestration_turns WHERE run_id = ? AND state = ? ORDER BY id",
            (run_id, state),
        )
