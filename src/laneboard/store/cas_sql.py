"""Writes on a version read before: a card's fields, or a round's report, with the event.

A write whose checks ran on a read of the card outside any transaction (the read a
refusal is decided on) is a compare-and-swap on the version it read: the version proves
the card is still the one checked, so no lock is held while anything is read or decided.
On PostgreSQL each write is one statement in autocommit (its event is written only when
the card matched), on SQLite the write and its event take one short write lock. Also
here: a card's ``claim_rank`` (migration 150) as each write keeps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Actor, Card, Report
from laneboard.store import rows
from laneboard.store.base import Row
from laneboard.store.claim_sql import card_columns, deps_column, review_of
from laneboard.store.rows import dumps

if TYPE_CHECKING:
    from laneboard.store.base import Store

# the card columns stored as JSON text
JSON_CARD_COLUMNS = frozenset({"labels", "acceptance", "checks", "allowed_paths", "meta"})
# the condition of a write that needs the card's current round to have a report
REPORTED = (
    "EXISTS (SELECT 1 FROM reports WHERE reports.card_id = cards.id "
    "AND reports.round = cards.delivery_round)"
)


def claim_rank(meta: dict[str, Any], status_since: int, created_at: int) -> int | None:
    """A card's ``claim_rank`` (migration 150): ``2 × status_since + created_at``, the
    order of its weight in its tier while nothing time-dependent weighs in; None for a
    review card or a card stamped into its status before its creation."""
    if meta.get("review_of") is not None or status_since < created_at:
        return None
    return 2 * status_since + created_at


def rank_set(pg: bool, fields: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """The ``claim_rank = …`` item (and its parameters) of an update writing ``fields``:
    None when they leave it as it is (no status time, creation time or meta among them)."""
    if not {"status_since", "created_at", "meta"} & fields.keys():
        return None
    params: list[Any] = []
    if "meta" in fields:
        review = "? = 1"
        params.append(1 if fields["meta"].get("review_of") is not None else 0)
    else:
        review = f"{review_of(pg)} IS NOT NULL"
    ss = "?" if "status_since" in fields else "status_since"
    ca = "?" if "created_at" in fields else "created_at"
    pair = [fields[k] for k in ("status_since", "created_at") if k in fields]
    sql = f"claim_rank = CASE WHEN {review} OR {ss} < {ca} THEN NULL ELSE 2 * {ss} + {ca} END"
    return sql, [*params, *pair, *pair]


def card_update_sql(
    pg: bool,
    card_id: int,
    version: int,
    fields: dict[str, Any],
    now: int,
    *,
    reported: bool = False,
) -> tuple[str, list[Any]]:
    """The compare-and-swap ``UPDATE`` of a card's ``fields`` on its ``version`` (which
    it bumps, with ``updated_at``; ``claim_rank`` follows the fields it depends on);
    ``reported``: only while the card's current round has a report."""
    cols = list(fields)
    vals = [dumps(fields[c]) if c in JSON_CARD_COLUMNS else fields[c] for c in cols]
    items = [f"{c} = ?" for c in cols]
    rank = rank_set(pg, fields)
    if rank is not None:
        items.append(rank[0])
        vals.extend(rank[1])
    items.append("version = version + 1, updated_at = ?")
    where = f"id = ? AND version = ?{' AND ' + REPORTED if reported else ''}"
    return f"UPDATE cards SET {', '.join(items)} WHERE {where}", [*vals, now, card_id, version]


def save_with_event(
    store: Store,
    card_id: int,
    version: int,
    fields: dict[str, Any],
    event: tuple[str, Actor, dict[str, Any]],
    *,
    reported: bool = False,
) -> Row | None:
    """A card's ``fields`` written on a version read before (compare-and-swap), with its
    event (``type, actor, payload``; its card, project and run come from the row), as
    one transaction. The row has the card's dependency ids (``deps``). None: the card
    moved on since it was read (or, with ``reported``, its round has no report), and
    nothing was written.

    For a write whose checks ran on a read of the card outside any transaction: the
    version the write requires proves the card is still the one checked, so the write
    holds no lock while anything is read or decided. On PostgreSQL it is one statement
    (the event is written only when the update matched), on SQLite the update and the
    event under one short write lock.
    """
    type_, actor, payload = event
    now = store.clock.now_ms()
    pg = store.dialect == "postgresql"
    update, params = card_update_sql(pg, card_id, version, fields, now, reported=reported)
    returning = f"RETURNING {card_columns()}, {deps_column(pg)}"
    if not pg:
        with store.write() as tx:
            row = tx.one(f"{update} {returning}", params)
            if row is not None:
                tx.append_event(
                    type_,
                    actor,
                    card_id=card_id,
                    project_id=row["project_id"],
                    run_id=row["run_id"],
                    payload=payload,
                )
            return row
    sql = (
        f"WITH c AS ({update} {returning}), "
        "e AS (INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
        "payload) SELECT ?, ?, c.id, c.project_id, c.run_id, ?, ?, ? FROM c RETURNING id, xid) "
        f"SELECT {card_columns('c')}, c.deps, e.id AS event_id, e.xid AS event_xid "
        "FROM c CROSS JOIN e"
    )
    event_params = [now, type_, actor.name, actor.kind.value, dumps(payload)]
    got = store.write_statement(sql, [*params, *event_params], types=type_)
    return got[0] if got else None


def report_with_event(
    store: Store,
    card: Card,
    round_: int,
    report: tuple[str, str | None, list[dict[str, Any]], str | None],
    actor: Actor,
    payload: dict[str, Any],
) -> Report | None:
    """A round's report (``body, commit, evidence, verdict``; it replaces the round's
    earlier one) and its ``report.added`` event, on the card's version read before, as
    one statement (PostgreSQL). None: the card moved on since it was read (nothing was
    written). The old report is deleted before the new one is inserted (the insert
    waits for the delete's count), so the round's unique key holds throughout.
    """
    from laneboard.store.migrations import declared

    body, commit, evidence, verdict = report
    names = [c.name for c in declared()["reports"].columns]
    now = store.clock.now_ms()
    sql = (
        "WITH c AS (SELECT id, project_id, run_id FROM cards WHERE id = ? AND version = ? "
        "FOR UPDATE), "
        "d AS (DELETE FROM reports WHERE card_id = (SELECT id FROM c) AND round = ? "
        "RETURNING id), "
        "r AS (INSERT INTO reports (card_id, round, body, commit_sha, evidence, verdict, "
        "author, author_kind, created_at) SELECT c.id, ?, ?, ?, ?, ?, ?, ?, ? FROM c "
        f"WHERE (SELECT count(*) FROM d) >= 0 RETURNING {', '.join(names)}), "
        "e AS (INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
        "payload) SELECT ?, 'report.added', c.id, c.project_id, c.run_id, ?, ?, ? "
        "FROM c CROSS JOIN r RETURNING id, xid) "
        f"SELECT {', '.join('r.' + n for n in names)}, e.id AS event_id, e.xid AS event_xid "
        "FROM r CROSS JOIN e"
    )
    who = (actor.name, actor.kind.value)
    params = [card.id, card.version, round_, round_, body, commit, dumps(evidence), verdict]
    params += [*who, now, now, *who, dumps(payload)]
    got = store.write_statement(sql, params, types="report.added")
    return rows.report(got[0]) if got else None


def deliver_with_events(
    store: Store,
    card: Card,
    fields: dict[str, Any],
    report: tuple[str, str | None, list[dict[str, Any]]],
    actor: Actor,
    payloads: tuple[dict[str, Any], dict[str, Any]],
) -> tuple[Row, Report] | None:
    """A delivery on the card's version read before, as one statement (PostgreSQL): the
    card's ``fields`` (the move to ``in_review``), its round's report (``body, commit,
    evidence``; it replaces the round's earlier one) and the ``report.added`` and
    ``card.moved`` events (``payloads``), in that order. Returns the card's row (with
    ``deps``) and the report; None: the card moved on since it was read (nothing was
    written). The report is written only when the card's update matched.
    """
    from laneboard.store.migrations import declared

    body, commit, evidence = report
    names = [c.name for c in declared()["reports"].columns]
    now = store.clock.now_ms()
    update, params = card_update_sql(True, card.id, card.version, fields, now)
    sql = (
        f"WITH c AS ({update} RETURNING {card_columns()}, {deps_column(True)}), "
        "d AS (DELETE FROM reports WHERE card_id = (SELECT id FROM c) AND round = ? "
        "RETURNING id), "
        "r AS (INSERT INTO reports (card_id, round, body, commit_sha, evidence, verdict, "
        "author, author_kind, created_at) SELECT c.id, ?, ?, ?, ?, NULL, ?, ?, ? FROM c "
        f"WHERE (SELECT count(*) FROM d) >= 0 RETURNING {', '.join(names)}), "
        "e AS (INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
        "payload) SELECT ?, v.type, c.id, c.project_id, c.run_id, ?, ?, v.payload "
        "FROM c CROSS JOIN (SELECT count(*) AS n FROM r) w "
        "CROSS JOIN (VALUES (1, 'report.added', ?::text), (2, 'card.moved', ?::text)) "
        "AS v (n, type, payload) WHERE w.n = 1 ORDER BY v.n RETURNING id, xid) "
        f"SELECT {card_columns('c')}, c.deps, "
        f"{', '.join(f'r.{n} AS r_{n}' for n in names)}, e.id AS event_id, e.xid AS event_xid "
        "FROM c CROSS JOIN r CROSS JOIN e ORDER BY e.id DESC LIMIT 1"
    )
    rnd = card.delivery_round
    who = (actor.name, actor.kind.value)
    params += [rnd, rnd, body, commit, dumps(evidence), *who, now]
    params += [now, *who, dumps(payloads[0]), dumps(payloads[1])]
    got = store.write_statement(sql, params, types="card.moved,report.added")
    if not got:
        return None
    row = got[0]
    return row, rows.report({n: row[f"r_{n}"] for n in names})
