"""Repository queries, written once in portable SQL (``?`` placeholders).

``Tx`` holds the board's own queries and composes the named queries of each area
(``claim_sql`` and the ``q_*`` modules). The raw statement methods (``all``, ``one``,
``scalar``, ``run``) are for the store's modules only: everything else calls a named query.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Actor, Card, Comment, Project, Report
from laneboard.store import rows
from laneboard.store.base import Conn, Row
from laneboard.store.cas_sql import JSON_CARD_COLUMNS, card_update_sql, claim_rank
from laneboard.store.claim_sql import ClaimQueries, card_columns, deps_column
from laneboard.store.claim_sql import claim_probe as claim_probe
from laneboard.store.claim_sql import claim_probe_sql as claim_probe_sql
from laneboard.store.q_cards import CardQueries
from laneboard.store.q_events import EventQueries
from laneboard.store.q_lanes import LaneQueries
from laneboard.store.q_ops import OpsQueries
from laneboard.store.q_orchestrate import OrchestrateQueries
from laneboard.store.q_patrol import PatrolQueries
from laneboard.store.q_queue import QueueQueries
from laneboard.store.q_ready import ReadyQueries
from laneboard.store.q_ready import ReadySet as ReadySet
from laneboard.store.q_runs import RunQueries
from laneboard.store.q_schedules import ScheduleQueries
from laneboard.store.q_tokens import TokenQueries
from laneboard.store.q_transcript import TranscriptQueries
from laneboard.store.q_usage import UsageQueries
from laneboard.store.rows import dumps

if TYPE_CHECKING:
    from laneboard.store.base import Store

CARD_COLUMNS = (
    "project_id",
    "number",
    "ref",
    "title",
    "description",
    "kind",
    "parent_id",
    "status",
    "assignee",
    "priority",
    "labels",
    "acceptance",
    "acceptance_mode",
    "delivery_round",
    "checks",
    "allowed_paths",
    "meta",
    "idempotency_key",
    "run_id",
    "status_since",
    "created_at",
    "updated_at",
)


class Tx(
    ClaimQueries,
    CardQueries,
    EventQueries,
    LaneQueries,
    OpsQueries,
    OrchestrateQueries,
    PatrolQueries,
    QueueQueries,
    ReadyQueries,
    RunQueries,
    ScheduleQueries,
    TokenQueries,
    TranscriptQueries,
    UsageQueries,
):
    """One open transaction. Obtain it from ``Store.write()`` or ``Store.read()``."""

    def __init__(self, store: Store, conn: Conn) -> None:
        self.store = store
        self.conn = conn
        self.pg = store.dialect == "postgresql"
        self.events_pending = []
        self._last_event = None

    # -- primitives ----------------------------------------------------------------
    def now(self) -> int:
        return self.store.clock.now_ms()

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        if self.events_pending and "events" in sql:
            # appended events come before a statement on the log (a read of it, an event of
            # its own), in the order appended; else the commit writes them, in its round trip
            self.flush_events()
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        got = self.all(sql, params)
        return got[0] if got else None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        got = self.all(sql, params)
        return next(iter(got[0].values())) if got else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.all(sql, params)
        return self.conn.rowcount()

    def advisory_lock(self, key: int) -> None:
        """Serialize with other transactions taking the same key (PostgreSQL only)."""
        if self.pg:
            self.conn.execute("SELECT pg_advisory_xact_lock(?)", (key,))

    # -- projects ------------------------------------------------------------------
    def insert_project(
        self,
        key: str,
        name: str,
        path: str | None,
        base_ref: str | None,
        remote: str | None = None,
    ) -> int:
        row = self.one(
            "INSERT INTO projects (key, name, path, base_ref, remote, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (key, name, path, base_ref, remote, self.now()),
        )
        assert row is not None
        return int(row["id"])

    def project(
        self, *, id: int | None = None, key: str | None = None, name: str | None = None
    ) -> Project | None:
        if id is not None:
            r = self.one("SELECT * FROM projects WHERE id = ?", (id,))
        elif key is not None:
            r = self.one("SELECT * FROM projects WHERE key = ?", (key,))
        else:
            r = self.one("SELECT * FROM projects WHERE name = ?", (name,))
        return rows.project(r) if r else None

    def projects(self) -> list[Project]:
        return [rows.project(r) for r in self.all("SELECT * FROM projects ORDER BY id")]

    def projects_and_configs(self) -> tuple[list[Project], dict[int, dict[str, Any]]]:
        """Every project and its board settings (``project_config``), in one read."""
        got = self.all("SELECT * FROM projects ORDER BY id")
        configs = {int(r["id"]): dict(json.loads(r["config"])) if r["config"] else {} for r in got}
        return [rows.project(r) for r in got], configs

    def project_config(self, project_id: int) -> dict[str, Any]:
        got = self.scalar("SELECT config FROM projects WHERE id = ?", (project_id,))
        return dict(json.loads(got)) if got else {}

    def update_project(self, project_id: int, **fields: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        vals = [dumps(v) if k == "config" else v for k, v in fields.items()]
        self.run(f"UPDATE projects SET {sets} WHERE id = ?", [*vals, project_id])

    def take_card_number(self, project_id: int) -> int:
        row = self.one(
            "UPDATE projects SET next_number = next_number + 1 WHERE id = ?"
            " RETURNING next_number - 1 AS n",
            (project_id,),
        )
        assert row is not None
        return int(row["n"])

    # -- cards ---------------------------------------------------------------------
    def insert_card(self, values: dict[str, Any]) -> int:
        vals = [dumps(values[c]) if c in JSON_CARD_COLUMNS else values[c] for c in CARD_COLUMNS]
        vals.append(claim_rank(values["meta"], values["status_since"], values["created_at"]))
        row = self.one(
            f"INSERT INTO cards ({', '.join(CARD_COLUMNS)}, claim_rank) VALUES "
            f"({', '.join('?' * (len(CARD_COLUMNS) + 1))}) RETURNING id",
            vals,
        )
        assert row is not None
        return int(row["id"])

    def card(self, card_id: int, *, lock: bool = False) -> Card | None:
        """A card with its dependencies, in one statement (``lock``: its row, to commit)."""
        return self._card_where("id", card_id, lock)

    def card_by_ref(self, ref: str, *, lock: bool = False) -> Card | None:
        return self._card_where("ref", ref, lock)

    def _card_where(self, column: str, value: int | str, lock: bool) -> Card | None:
        sql = f"SELECT {card_columns()}, {deps_column(self.pg)} FROM cards WHERE {column} = ?"
        if lock and self.pg:
            sql += " FOR UPDATE OF cards"
        r = self.one(sql, (value,))
        return rows.card(r, rows.dep_ids(r["deps"])) if r else None

    def card_reported(self, ref: int | str) -> tuple[Card, bool] | None:
        """A card (by id or ref) and whether its current round has a report, in one
        statement."""
        sql = (
            f"SELECT {card_columns()}, {deps_column(self.pg)}, CASE WHEN EXISTS "
            "(SELECT 1 FROM reports WHERE reports.card_id = cards.id "
            "AND reports.round = cards.delivery_round) THEN 1 ELSE 0 END AS reported "
            f"FROM cards WHERE {'id' if isinstance(ref, int) else 'ref'} = ?"
        )
        r = self.one(sql, (ref,))
        return (rows.card(r, rows.dep_ids(r["deps"])), bool(r["reported"])) if r else None

    def card_id_exists(self, card_id: int) -> int | None:
        got = self.scalar("SELECT id FROM cards WHERE id = ?", (card_id,))
        return int(got) if got is not None else None

    def card_id_by_ref(self, ref: str) -> int | None:
        got = self.scalar("SELECT id FROM cards WHERE ref = ?", (ref,))
        return int(got) if got is not None else None

    def card_by_key(self, key: str) -> Card | None:
        r = self.one("SELECT * FROM cards WHERE idempotency_key = ?", (key,))
        return rows.card(r, self.dependencies(r["id"])) if r else None

    def update_card(self, card_id: int, version: int, fields: dict[str, Any]) -> bool:
        """Compare-and-swap on ``version``; bumps it and ``updated_at``."""
        return self.update_card_returning(card_id, version, fields) is not None

    def update_card_returning(
        self, card_id: int, version: int, fields: dict[str, Any]
    ) -> Row | None:
        """``update_card`` that returns the updated row (None: the version moved on)."""
        sql, params = card_update_sql(self.pg, card_id, version, fields, self.now())
        return self.one(f"{sql} RETURNING {card_columns()}", params)

    def list_cards(
        self,
        *,
        project_id: int | None = None,
        statuses: Sequence[str] = (),
        assignee: str | None = None,
        unassigned: bool = False,
        label: str | None = None,
        parent_id: int | None = None,
        run_id: int | None = None,
        ids: Sequence[int] = (),
        text: str | None = None,
        limit: int = 500,
        offset: int = 0,
    ) -> list[Card]:
        return [
            rows.card(r, deps)
            for r, deps in self._card_rows(
                project_id=project_id,
                statuses=statuses,
                assignee=assignee,
                unassigned=unassigned,
                label=label,
                parent_id=parent_id,
                run_id=run_id,
                ids=ids,
                text=text,
                limit=limit,
                offset=offset,
            )
        ]

    def list_card_dicts(self, **filters: Any) -> list[dict[str, Any]]:
        """``list_cards``' cards (same filters) as their dictionaries, built from the rows."""
        return [rows.card_dict(r, deps) for r, deps in self._card_rows(**filters)]

    def _card_rows(
        self,
        *,
        project_id: int | None = None,
        statuses: Sequence[str] = (),
        assignee: str | None = None,
        unassigned: bool = False,
        label: str | None = None,
        parent_id: int | None = None,
        run_id: int | None = None,
        ids: Sequence[int] = (),
        text: str | None = None,
        limit: int = 500,
        offset: int = 0,
    ) -> list[tuple[Row, tuple[int, ...]]]:
        where: list[str] = []
        params: list[Any] = []
        if text:
            like = "%" + re.sub(r"([\\%_])", r"\\\1", text.lower()) + "%"
            where.append(
                "(lower(title) LIKE ? ESCAPE '\\' OR lower(description) LIKE ? ESCAPE '\\'"
                " OR id IN (SELECT card_id FROM comments WHERE lower(body) LIKE ? ESCAPE '\\'))"
            )
            params.extend([like, like, like])
        if project_id is not None:
            where.append("project_id = ?")
            params.append(project_id)
        if statuses:
            where.append("status IN (" + ",".join("?" * len(statuses)) + ")")
            params.extend(statuses)
        if assignee is not None and unassigned:
            where.append("(assignee = ? OR assignee IS NULL)")
            params.append(assignee)
        elif assignee is not None:
            where.append("assignee = ?")
            params.append(assignee)
        elif unassigned:
            where.append("assignee IS NULL")
        if label is not None:
            where.append("labels LIKE ?")
            params.append("%" + json.dumps(label) + "%")
        if parent_id is not None:
            where.append("parent_id = ?")
            params.append(parent_id)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if ids:
            where.append("id IN (" + ",".join("?" * len(ids)) + ")")
            params.extend(ids)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        got = self.all(
            f"SELECT * FROM cards{clause} ORDER BY id LIMIT ? OFFSET ?", [*params, limit, offset]
        )
        deps = self.dependencies_of([r["id"] for r in got])
        return [(r, tuple(deps.get(r["id"], ()))) for r in got]

    # -- links ---------------------------------------------------------------------
    def dependencies(self, card_id: int) -> tuple[int, ...]:
        got = self.all(
            "SELECT depends_on FROM links WHERE card_id = ? ORDER BY depends_on", (card_id,)
        )
        return tuple(int(r["depends_on"]) for r in got)

    def dependencies_of(self, card_ids: Sequence[int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if not card_ids:
            return out
        for chunk_start in range(0, len(card_ids), 500):
            chunk = card_ids[chunk_start : chunk_start + 500]
            got = self.all(
                "SELECT card_id, depends_on FROM links WHERE card_id IN ("
                + ",".join("?" * len(chunk))
                + ") ORDER BY card_id, depends_on",
                chunk,
            )
            for r in got:
                out.setdefault(int(r["card_id"]), []).append(int(r["depends_on"]))
        return out

    def dependency_edges(self) -> dict[int, list[int]]:
        edges: dict[int, list[int]] = {}
        for r in self.all("SELECT card_id, depends_on FROM links"):
            edges.setdefault(int(r["card_id"]), []).append(int(r["depends_on"]))
        return edges

    def open_dependents(self) -> dict[int, list[int]]:
        """card -> cards (not terminal) that depend on it."""
        out: dict[int, list[int]] = {}
        for r in self.all("SELECT card_id, depends_on FROM links WHERE card_open = 1"):
            out.setdefault(int(r["depends_on"]), []).append(int(r["card_id"]))
        return out

    def insert_link(self, card_id: int, depends_on: int) -> bool:
        if self.one(
            "SELECT 1 AS x FROM links WHERE card_id = ? AND depends_on = ?", (card_id, depends_on)
        ):
            return False
        self.run(  # card_open: the dependant's status now; a trigger keeps it (migration 210)
            "INSERT INTO links (card_id, depends_on, created_at, card_open) SELECT ?, ?, ?, "
            "CASE WHEN status IN ('done', 'canceled') THEN 0 ELSE 1 END FROM cards WHERE id = ?",
            (card_id, depends_on, self.now(), card_id),
        )
        return True

    def delete_link(self, card_id: int, depends_on: int) -> bool:
        return (
            self.run(
                "DELETE FROM links WHERE card_id = ? AND depends_on = ?", (card_id, depends_on)
            )
            == 1
        )

    # -- comments and reports ------------------------------------------------------
    def insert_comment(self, card_id: int, kind: str, body: str, actor: Actor) -> Comment:
        r = self.one(
            "INSERT INTO comments (card_id, kind, body, author, author_kind, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
            (card_id, kind, body, actor.name, actor.kind.value, self.now()),
        )
        assert r is not None
        return rows.comment(r)

    def comments(self, card_id: int, *, after: int = 0, limit: int = 1000) -> list[Comment]:
        got = self.all(
            "SELECT * FROM comments WHERE card_id = ? AND id > ? ORDER BY id LIMIT ?",
            (card_id, after, limit),
        )
        return [rows.comment(r) for r in got]

    def comment(self, comment_id: int) -> Comment | None:
        r = self.one("SELECT * FROM comments WHERE id = ?", (comment_id,))
        return rows.comment(r) if r else None

    def upsert_report(
        self,
        card_id: int,
        round_: int,
        body: str,
        commit: str | None,
        evidence: list[dict[str, Any]],
        verdict: str | None,
        actor: Actor,
    ) -> Report:
        self.run("DELETE FROM reports WHERE card_id = ? AND round = ?", (card_id, round_))
        r = self.one(
            "INSERT INTO reports (card_id, round, body, commit_sha, evidence, verdict, author, "
            "author_kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (
                card_id,
                round_,
                body,
                commit,
                dumps(evidence),
                verdict,
                actor.name,
                actor.kind.value,
                self.now(),
            ),
        )
        assert r is not None
        return rows.report(r)

    def report(self, card_id: int, round_: int) -> Report | None:
        r = self.one("SELECT * FROM reports WHERE card_id = ? AND round = ?", (card_id, round_))
        return rows.report(r) if r else None

    def reports(self, card_id: int) -> list[Report]:
        got = self.all("SELECT * FROM reports WHERE card_id = ? ORDER BY round", (card_id,))
        return [rows.report(r) for r in got]

    # -- idempotency ---------------------------------------------------------------
    def idempotent_response(self, key: str) -> dict[str, Any] | None:
        got = self.scalar("SELECT response FROM idempotency WHERE key = ?", (key,))
        return dict(json.loads(got)) if got else None

    def idempotency_row(self, key: str) -> Row | None:
        return self.one("SELECT * FROM idempotency WHERE key = ?", (key,))

    def remember(self, key: str, scope: str, card_id: int | None, response: dict[str, Any]) -> None:
        self.run(
            "INSERT INTO idempotency (key, scope, card_id, response, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (key, scope, card_id, dumps(response), self.now()),
        )

    # -- locks (single-flight leases) ----------------------------------------------
    def acquire_lock(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew a lease; an expired lease is taken over (``acquire_locks``)."""
        return bool(self.acquire_locks([name], holder, ttl_ms))

    def release_lock(self, name: str, holder: str) -> bool:
        return self.run("DELETE FROM locks WHERE name = ? AND holder = ?", (name, holder)) == 1

    def lock_row(self, name: str) -> Row | None:
        return self.one("SELECT * FROM locks WHERE name = ?", (name,))

    def lock_rows(self) -> list[Row]:
        """Every held lease, by name."""
        return self.all("SELECT * FROM locks ORDER BY name")

    # -- agent turns (written by the supervisor's pool) ----------------------------------
    def turn_usage(self, card_id: int) -> list[dict[str, Any]]:
        """Per agent turn of a card: round, kind, outcome, tokens, cost and duration."""
        from laneboard.domain.clock import iso

        got = self.all(
            "SELECT round, agent_kind, native_id, outcome, input_tokens, output_tokens, "
            "cost_usd, duration_ms, started_at FROM turns WHERE card_id = ? ORDER BY id",
            (card_id,),
        )
        return [{**r, "started_at": iso(r["started_at"])} for r in got]
