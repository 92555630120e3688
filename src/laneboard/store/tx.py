"""Repository queries, written once in portable SQL (``?`` placeholders)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Actor, Card, Comment, Event, Project, Report
from laneboard.store import rows
from laneboard.store.base import Conn, Row
from laneboard.store.claim_sql import NOT_READY, ClaimQueries
from laneboard.store.claim_sql import claim_probe_sql as claim_probe_sql
from laneboard.store.rows import dumps

if TYPE_CHECKING:
    from laneboard.store.base import Store

EVENT_LOCK = 7_211_001  # PostgreSQL advisory lock that orders event ids by commit

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
JSON_CARD_COLUMNS = frozenset({"labels", "acceptance", "checks", "allowed_paths", "meta"})


class Tx(ClaimQueries):
    """One open transaction. Obtain it from ``Store.write()`` or ``Store.read()``."""

    def __init__(self, store: Store, conn: Conn) -> None:
        self.store = store
        self.conn = conn
        self.pg = store.dialect == "postgresql"

    # -- primitives ----------------------------------------------------------------
    def now(self) -> int:
        return self.store.clock.now_ms()

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        got = self.conn.execute(sql, params)
        return got[0] if got else None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        got = self.conn.execute(sql, params)
        return next(iter(got[0].values())) if got else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.conn.execute(sql, params)
        return self.conn.rowcount()

    def advisory_lock(self, key: int) -> None:
        """Serialize with other transactions taking the same key (PostgreSQL only)."""
        if self.pg:
            self.conn.execute("SELECT pg_advisory_xact_lock(?)", (key,))

    # -- events --------------------------------------------------------------------
    def append_event(
        self,
        type_: str,
        actor: Actor,
        *,
        card_id: int | None = None,
        project_id: int | None = None,
        run_id: int | None = None,
        payload: dict[str, Any] | None = None,
    ) -> int:
        if self.pg:
            # one round trip: the lock is taken before the id is drawn and held to commit,
            # so event ids appear in commit order
            sql = (
                "WITH l AS (SELECT pg_advisory_xact_lock(?) AS locked) "
                "INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
                "payload) SELECT ?::bigint, ?::text, ?::bigint, ?::bigint, ?::bigint, ?::text, "
                "?::text, ?::text FROM l RETURNING id"
            )
            lock: tuple[int, ...] = (EVENT_LOCK,)
        else:
            sql = (
                "INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
                "payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
            )
            lock = ()
        row = self.one(
            sql,
            (
                *lock,
                self.now(),
                type_,
                card_id,
                project_id,
                run_id,
                actor.name,
                actor.kind.value,
                dumps(payload or {}),
            ),
        )
        assert row is not None
        return int(row["id"])

    def events(
        self,
        after: int = 0,
        *,
        card_id: int | None = None,
        project_id: int | None = None,
        run_id: int | None = None,
        types: Iterable[str] = (),
        limit: int = 100,
    ) -> list[Event]:
        where: list[str] = ["id > ?"]
        params: list[Any] = [after]
        for col, val in (("card_id", card_id), ("project_id", project_id), ("run_id", run_id)):
            if val is not None:
                where.append(f"{col} = ?")
                params.append(val)
        tl = list(types)
        if tl:
            where.append("type IN (" + ",".join("?" * len(tl)) + ")")
            params.extend(tl)
        sql = f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        return [rows.event(r) for r in self.all(sql, [*params, limit])]

    def last_events(self, n: int, *, card_id: int | None = None) -> list[Event]:
        if card_id is None:
            got = self.all("SELECT * FROM events ORDER BY id DESC LIMIT ?", (n,))
        else:
            got = self.all(
                "SELECT * FROM events WHERE card_id = ? ORDER BY id DESC LIMIT ?", (card_id, n)
            )
        return [rows.event(r) for r in reversed(got)]

    def max_event_id(self) -> int:
        return int(self.scalar("SELECT coalesce(max(id), 0) FROM events") or 0)

    # -- projects ------------------------------------------------------------------
    def insert_project(self, key: str, name: str, path: str | None, base_ref: str | None) -> int:
        row = self.one(
            "INSERT INTO projects (key, name, path, base_ref, created_at) VALUES (?, ?, ?, ?, ?)"
            " RETURNING id",
            (key, name, path, base_ref, self.now()),
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
        row = self.one(
            f"INSERT INTO cards ({', '.join(CARD_COLUMNS)}) VALUES "
            f"({', '.join('?' * len(CARD_COLUMNS))}) RETURNING id",
            vals,
        )
        assert row is not None
        return int(row["id"])

    def card(self, card_id: int, *, lock: bool = False) -> Card | None:
        sql = "SELECT * FROM cards WHERE id = ?"
        if lock and self.pg:
            sql += " FOR UPDATE"
        r = self.one(sql, (card_id,))
        return rows.card(r, self.dependencies(card_id)) if r else None

    def card_id_by_ref(self, ref: str) -> int | None:
        got = self.scalar("SELECT id FROM cards WHERE ref = ?", (ref,))
        return int(got) if got is not None else None

    def card_by_key(self, key: str) -> Card | None:
        r = self.one("SELECT * FROM cards WHERE idempotency_key = ?", (key,))
        return rows.card(r, self.dependencies(r["id"])) if r else None

    def update_card(self, card_id: int, version: int, fields: dict[str, Any]) -> bool:
        """Compare-and-swap on ``version``; bumps it and ``updated_at``."""
        cols = list(fields)
        vals = [dumps(fields[c]) if c in JSON_CARD_COLUMNS else fields[c] for c in cols]
        sets = ", ".join(f"{c} = ?" for c in cols)
        sep = ", " if sets else ""
        n = self.run(
            f"UPDATE cards SET {sets}{sep}version = version + 1, updated_at = ? "
            "WHERE id = ? AND version = ?",
            [*vals, self.now(), card_id, version],
        )
        return n == 1

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
        limit: int = 500,
        offset: int = 0,
    ) -> list[Card]:
        where: list[str] = []
        params: list[Any] = []
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
        return [rows.card(r, tuple(deps.get(r["id"], ()))) for r in got]

    def ready_cards(
        self,
        *,
        assignees: Sequence[str] = (),
        unassigned: bool = True,
        project_id: int | None = None,
        limit: int = 500,
    ) -> list[Card]:
        """``todo`` cards whose dependencies are all done, for the given claim set."""
        who: list[str] = []
        params: list[Any] = []
        if assignees:
            who.append("assignee IN (" + ",".join("?" * len(assignees)) + ")")
            params.extend(assignees)
        if unassigned:
            who.append("assignee IS NULL")
        if not who:
            return []
        extra = ""
        if project_id is not None:
            extra = " AND project_id = ?"
            params.append(project_id)
        got = self.all(
            f"SELECT * FROM cards WHERE status = 'todo' AND ({' OR '.join(who)}){extra} "
            f"AND NOT {NOT_READY} ORDER BY priority, id LIMIT ?",
            [*params, limit],
        )
        return [rows.card(r) for r in got]

    def stale_cards(
        self,
        older_than: int,
        *,
        assignees: Sequence[str] = (),
        unassigned: bool = True,
        limit: int = 500,
    ) -> list[Card]:
        """``in_progress`` cards whose heartbeat is older than ``older_than`` (ms epoch)."""
        got = self.all(
            "SELECT * FROM cards WHERE status = 'in_progress' AND kind = 'task' AND "
            "(heartbeat_at IS NULL OR heartbeat_at <= ?) ORDER BY priority, id LIMIT ?",
            (older_than, limit),
        )
        out = []
        for r in got:
            owner = r["holder"] or r["assignee"]
            if (owner in assignees) or (unassigned and r["assignee"] is None) or not assignees:
                out.append(rows.card(r))
        return out

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
        for r in self.all(
            "SELECT l.card_id, l.depends_on FROM links l JOIN cards c ON c.id = l.card_id "
            "WHERE c.status NOT IN ('done', 'canceled')"
        ):
            out.setdefault(int(r["depends_on"]), []).append(int(r["card_id"]))
        return out

    def insert_link(self, card_id: int, depends_on: int) -> bool:
        if self.one(
            "SELECT 1 AS x FROM links WHERE card_id = ? AND depends_on = ?", (card_id, depends_on)
        ):
            return False
        self.run(
            "INSERT INTO links (card_id, depends_on, created_at) VALUES (?, ?, ?)",
            (card_id, depends_on, self.now()),
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

    def remember(self, key: str, scope: str, card_id: int | None, response: dict[str, Any]) -> None:
        self.run(
            "INSERT INTO idempotency (key, scope, card_id, response, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (key, scope, card_id, dumps(response), self.now()),
        )

    # -- locks (single-flight leases) ----------------------------------------------
    def acquire_lock(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew a lease; an expired lease is taken over."""
        now = self.now()
        n = self.run(
            "UPDATE locks SET holder = ?, acquired_at = ?, expires_at = ? "
            "WHERE name = ? AND (holder = ? OR expires_at <= ?)",
            (holder, now, now + ttl_ms, name, holder, now),
        )
        if n == 1:
            return True
        return (
            self.run(
                "INSERT INTO locks (name, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (name, holder, now, now + ttl_ms),
            )
            == 1
        )

    def release_lock(self, name: str, holder: str) -> bool:
        return self.run("DELETE FROM locks WHERE name = ? AND holder = ?", (name, holder)) == 1

    def lock_row(self, name: str) -> Row | None:
        return self.one("SELECT * FROM locks WHERE name = ?", (name,))

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
