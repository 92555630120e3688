"""The claim statements: one compare-and-swap per claim, in portable SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from laneboard.domain.claims import ClaimWindows
from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.weights import DEFAULT_SLA, SLA_OVERDUE, SLA_RAMP
from laneboard.store.base import Row
from laneboard.store.q_base import Queries

if TYPE_CHECKING:
    from laneboard.store.base import Store
    from laneboard.store.sqlite import SQLiteStore

NOT_READY = (
    "EXISTS (SELECT 1 FROM links l JOIN cards d ON d.id = l.depends_on "
    "WHERE l.card_id = cards.id AND d.status <> 'done')"
)

# an open card waits on it (``links.card_open``, migration 210): one index probe
WAITED_ON = "EXISTS (SELECT 1 FROM links l WHERE l.card_open = 1 AND l.depends_on = cards.id)"


class ReadyKey(NamedTuple):
    """What ``claim --next`` orders a ready card by (``domain.weights``) and who it is for."""

    id: int
    priority: int
    status_since: int
    created_at: int
    assignee: str | None
    waited_on: bool  # an open card depends on it (its fan-out weighs in)
    review: bool  # a review card (``meta.review_of``): its ``review_aging`` presses


def _ready_key(r: Row) -> ReadyKey:
    return ReadyKey(
        int(r["id"]),
        int(r["priority"]),
        int(r["status_since"]),
        int(r["created_at"]),
        r["assignee"],
        bool(r["waited_on"]),
        bool(r["review"]),
    )


def review_of(pg: bool) -> str:
    """The row's ``meta.review_of`` (NULL when unset or JSON null)."""
    return "(meta::jsonb ->> 'review_of')" if pg else "json_extract(meta, '$.review_of')"


def review_column(pg: bool) -> str:
    """1 for a review card (``meta.review_of`` set and not null), else 0, as ``review``."""
    return f"CASE WHEN {review_of(pg)} IS NOT NULL THEN 1 ELSE 0 END AS review"


# ``domain.weights`` order without fan-out, as an ascending integer key over the columns
# ``since`` (status_since clamped to now), ``aged`` (age in ms, >= 0) and ``review``: the
# weight × 2 × MINUTE_MS minus a constant (3 × now). Parameters: half limit, limit, half
# limit, limit, limit, limit (the ``review_aging`` limit in ms).
READY_RANK = (
    "2 * since - aged - 2 * (CASE WHEN review = 1 THEN "
    f"{SLA_RAMP} * (CASE WHEN aged <= ? THEN 0 WHEN aged < ? THEN aged - ? ELSE ? - ? END) "
    f"+ {SLA_OVERDUE} * (CASE WHEN aged > ? THEN aged - ? ELSE 0 END) ELSE 0 END)"
)


def ready_rank_params(review_aging_min: int) -> list[int]:
    limit = review_aging_min * MINUTE_MS
    half = limit // 2
    return [half, limit, half, limit, half, limit, limit]


@cache
def card_columns(alias: str = "cards") -> str:
    """Every column of ``cards``, named: a statement that names them may be prepared."""
    from laneboard.store.migrations import declared

    return ", ".join(f"{alias}.{c.name}" for c in declared()["cards"].columns)


def deps_column(pg: bool) -> str:
    """A card's dependency ids as one comma-separated column, ``deps``."""
    agg = (
        "string_agg(depends_on::text, ',' ORDER BY depends_on)"
        if pg
        else "group_concat(depends_on, ',')"
    )
    return f"(SELECT {agg} FROM links WHERE links.card_id = cards.id) AS deps"


def claim_probe_sql(by: str, pg: bool) -> str:
    """One read statement: a card's claim fields, ``deps_done`` and its dependency ids."""
    assert by in ("id", "ref")
    deps = (
        "string_agg(depends_on::text, ',' ORDER BY depends_on)"
        if pg
        else "group_concat(depends_on, ',')"
    )
    return (
        "SELECT id, ref, status, assignee, holder, heartbeat_at, status_since, version, "
        "claim_epoch, project_id, run_id, "
        f"CASE WHEN {NOT_READY} THEN 0 ELSE 1 END AS deps_done, "
        f"(SELECT {deps} FROM links WHERE links.card_id = cards.id) AS deps "
        f"FROM cards WHERE {by} = ?"
    )


def claim_probe(store: Store, by: str, value: int | str) -> Row | None:
    """A card's claim probe (``claim_probe_sql``) on its own snapshot, by id or ref."""
    got = store.query(claim_probe_sql(by, store.dialect == "postgresql"), (value,))
    return got[0] if got else None


def cas_parts(
    now: int,
    holder: str,
    holder_kind: str,
    session_id: str | None,
    windows: ClaimWindows,
    bypass_assignee: bool,
) -> tuple[str, tuple[Any, ...], str, tuple[Any, ...]]:
    """The claim CAS's ``SET`` list and claimable condition, each with its parameters."""
    sets = (
        "status = 'in_progress', holder = ?, holder_kind = ?, "
        "session_id = ?, claimed_at = ?, heartbeat_at = ?, claim_epoch = claim_epoch + 1, "
        "version = version + 1, updated_at = ?, assignee = coalesce(assignee, ?), "
        "status_since = CASE WHEN status = 'in_progress' THEN status_since ELSE ? END, "
        "claim_rank = CASE WHEN status = 'in_progress' OR claim_rank IS NULL THEN claim_rank "
        "WHEN ? < created_at THEN NULL ELSE 2 * ? + created_at END"
    )
    claimable = (
        f"(status = 'todo' AND (assignee IS NULL OR assignee = ? OR ? = 1) AND NOT {NOT_READY})"
        " OR (status = 'in_progress' AND holder = ? AND "
        "(heartbeat_at IS NULL OR heartbeat_at <= ?))"
        " OR (status = 'in_progress' AND coalesce(heartbeat_at, status_since) <= ?)"
    )
    set_params = (holder, holder_kind, session_id, now, now, now, holder, now, now, now)
    where_params = (
        holder,
        1 if bypass_assignee else 0,
        holder,
        now - windows.fresh_ms,
        now - windows.takeover_ms,
    )
    return sets, set_params, claimable, where_params


def claim_with_event(
    store: Store,
    probe: Row,
    holder: str,
    holder_kind: str,
    session_id: str | None,
    windows: ClaimWindows,
    bypass_assignee: bool,
    event: tuple[Any, ...],
) -> Row | None:
    """The CAS against a probed version and its event, in one statement.

    The statement is its own transaction: the event row is written only when the CAS
    updated the card, so exactly the winner's claim and its event commit together (on
    SQLite the statement's trigger writes it, ``SQLiteStore.claim_statement``).
    ``event`` is the event's ``at, type, actor, actor_kind, payload`` (its card, project
    and run come from the claimed row): the claim of a probed version knows them before
    it runs. None: the card moved on since the probe.
    """
    sets, set_params, claimable, where_params = cas_parts(
        store.clock.now_ms(), holder, holder_kind, session_id, windows, bypass_assignee
    )
    params = (*set_params, probe["id"], probe["version"], *where_params)
    if store.dialect != "postgresql":
        sql = (
            f"UPDATE cards SET {sets} WHERE id = ? AND version = ? AND ({claimable}) "
            f"RETURNING {card_columns()}, {deps_column(False)}"
        )
        at, _type, actor, actor_kind, payload = event
        got = _sqlite(store).claim_statement(
            sql, params, (at, actor, actor_kind, payload, None, None)
        )
        return _with_prev(got, probe["status"], probe["holder"])
    sql = (
        f"WITH c AS (UPDATE cards SET {sets} WHERE id = ? AND version = ? AND ({claimable}) "
        f"RETURNING {card_columns()}), "
        "e AS (INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
        "payload) SELECT ?, ?, c.id, c.project_id, c.run_id, ?, ?, ? FROM c RETURNING id, xid) "
        f"SELECT {card_columns('c')}, e.id AS event_id, e.xid AS event_xid "
        "FROM c CROSS JOIN e"
    )
    got = store.write_statement(sql, (*params, *event), types="card.claimed")
    return _with_prev(got, probe["status"], probe["holder"])


def _with_prev(got: list[Row], status: str, holder: str | None) -> Row | None:
    """The claimed row, with the values its claim replaced; None: nothing was claimed."""
    if not got:
        return None
    row = got[0]
    row["prev_status"], row["prev_holder"] = status, holder
    return row


def _sqlite(store: Store) -> SQLiteStore:
    from laneboard.store.sqlite import SQLiteStore

    assert isinstance(store, SQLiteStore)
    return store


PICK_RULE = f"status = 'todo' AND (assignee IS NULL OR assignee = ? OR ? = 1) AND NOT {NOT_READY}"


def pick_sql(pg: bool, ids: list[int], holder: str, bypass: bool) -> tuple[str, list[Any]]:
    """The first claimable ``todo`` card of ``ids``, in their order (one id column)."""
    rule = PICK_RULE
    who: list[Any] = [holder, 1 if bypass else 0]
    if pg:  # the ids travel as one parameter: the statement text stays fixed
        sql = (
            f"SELECT id FROM cards WHERE id = ANY(?::bigint[]) AND {rule} "
            "ORDER BY array_position(?::bigint[], id) LIMIT 1"
        )
        return sql, [ids, *who, ids]
    sql = (  # SQLite: a JSON array, walked in order, so the compiled statement is reused
        "SELECT cards.id FROM json_each(?) AS j JOIN cards ON cards.id = j.value "
        f"WHERE {rule} ORDER BY j.key LIMIT 1"
    )
    return sql, [json.dumps(ids), *who]


def claim_next_update(
    pg: bool,
    now: int,
    ids: list[int],
    holder: str,
    holder_kind: str,
    session_id: str | None,
    bypass_assignee: bool,
    skip_locked: bool,
) -> tuple[str, list[Any]]:
    """The ``claim --next`` statement: claim the first claimable card of ``ids``."""
    pick, pick_params = pick_sql(pg, ids, holder, bypass_assignee)
    if pg:
        pick += " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"
    return _claim_picked(pg, now, pick, pick_params, holder, holder_kind, session_id)


# a claimed ``todo`` card's new ``claim_rank`` (its status time is the claim's), as
# ``claim_rank`` computes it: still NULL for a card weighed in full
PICKED_RANK = (
    "claim_rank = CASE WHEN claim_rank IS NULL OR ? < created_at THEN NULL "
    "ELSE 2 * ? + created_at END"
)


def _claim_picked(
    pg: bool,
    now: int,
    pick: str,
    pick_params: Sequence[Any],
    holder: str,
    holder_kind: str,
    session_id: str | None,
) -> tuple[str, list[Any]]:
    """The claim of the card a one-id ``pick`` statement names, returning the card."""
    sql = (
        "UPDATE cards SET status = 'in_progress', holder = ?, holder_kind = ?, "
        "session_id = ?, claimed_at = ?, heartbeat_at = ?, claim_epoch = claim_epoch + 1, "
        "version = version + 1, updated_at = ?, assignee = coalesce(assignee, ?), "
        f"status_since = ?, {PICKED_RANK} "
        f"WHERE id = ({pick}) RETURNING {card_columns()}, {deps_column(pg)}"
    )
    return sql, [
        holder,
        holder_kind,
        session_id,
        now,
        now,
        now,
        holder,
        now,
        now,
        now,
        *pick_params,
    ]


def ready_window(
    pg: bool, assignees: Sequence[str], unassigned: bool, project_id: int | None, limit: int
) -> tuple[str, list[Any]] | None:
    """The first ``limit`` ready cards of a claim set by ``(priority, id)``, as keys."""
    who = ["assignee IN (" + ",".join("?" * len(assignees)) + ")"] if assignees else []
    if unassigned:
        who.append("assignee IS NULL")
    if not who:
        return None
    extra = " AND project_id = ?" if project_id is not None else ""
    params = [*assignees, *([project_id] if project_id is not None else []), limit]
    sql = (
        "SELECT id, priority, status_since, created_at, assignee, "
        f"CASE WHEN {WAITED_ON} THEN 1 ELSE 0 END AS waited_on, {review_column(pg)} "
        "FROM cards "
        f"WHERE status = 'todo' AND ({' OR '.join(who)}){extra} AND NOT {NOT_READY} "
        "ORDER BY priority, id LIMIT ?"
    )
    return sql, params


def ready_first_sql(
    pg: bool,
    now: int,
    n: int,
    assignees: Sequence[str],
    unassigned: bool,
    project_id: int | None,
    limit: int,
    review_aging_min: int,
) -> tuple[str, list[Any]] | None:
    """``ready_first``'s statement: the window's first ``n`` in weight order, ranked in
    SQL, each row with ``any_waited`` (1: a card of the window is waited on)."""
    window = ready_window(pg, assignees, unassigned, project_id, limit)
    if window is None:
        return None
    sql = (
        "SELECT k.*, max(waited_on) OVER () AS any_waited FROM (SELECT w.*, "
        "CASE WHEN status_since < ? THEN status_since ELSE ? END AS since, "
        "CASE WHEN created_at < ? THEN ? - created_at ELSE 0 END AS aged "
        f"FROM ({window[0]}) w) k ORDER BY priority, {READY_RANK}, id LIMIT ?"
    )
    return sql, [now, now, now, now, *window[1], *ready_rank_params(review_aging_min), n]


class ClaimSet(NamedTuple):
    """Whose ready cards ``claim --next`` takes, and how many of the heaviest it tries."""

    assignees: Sequence[str]
    unassigned: bool
    project_id: int | None
    limit: int  # ready cards read by (priority, id), as ``candidates`` reads them
    pick: int  # the heaviest of them the claim statement tries, in order
    review_aging_min: int  # the ``review_aging`` limit that presses on the order


# no ``todo`` card is waited on by an open card (fan-out is weighed in Python) and none
# is stamped after the reader's clock (the weight's clamp would reorder it): the two
# conditions under which ``claim_rank`` orders ranked cards exactly (one parameter: now)
# the open links are read first (SQLite keeps a CROSS JOIN's order): they are few, where
# ``todo`` cards may be many
RANK_HOLDS = (
    "NOT EXISTS (SELECT 1 FROM links l CROSS JOIN cards d "
    "WHERE l.card_open = 1 AND d.id = l.depends_on AND d.status = 'todo') "
    "AND coalesce((SELECT max(status_since) FROM cards WHERE status = 'todo'), 0) <= ?"
)


def ranked_sql(pg: bool, now: int, claim_set: ClaimSet, n: int) -> tuple[str, list[Any]] | None:
    """The ids of the heaviest ``n`` ready cards of a claim set, in
    ``domain.weights`` order, or no row when ``RANK_HOLDS`` does not (None: the claim
    set is empty).

    The ranked cards (``claim_rank`` set) are read from ``cards_claim_rank`` in weight
    order, only the first ``n`` of them; the others (review cards, whose SLA pressure
    grows with time, and cards stamped before their creation) are all read and weighed
    in full. The heaviest of the two sets together are the heaviest of all.
    """
    who = ["assignee IN (" + ",".join("?" * len(claim_set.assignees)) + ")"]
    if not claim_set.assignees:
        who = []
    if claim_set.unassigned:
        who.append("assignee IS NULL")
    if not who:
        return None
    pid = claim_set.project_id
    where = f"status = 'todo' AND ({' OR '.join(who)})" + (
        " AND project_id = ?" if pid is not None else ""
    )
    base = [*claim_set.assignees, *([pid] if pid is not None else [])]
    keys = "id, priority, status_since, created_at"
    ranked = (
        f"SELECT {keys}, 0 AS review FROM cards WHERE {where} AND claim_rank IS NOT NULL "
        f"AND NOT {NOT_READY} ORDER BY priority, claim_rank, id LIMIT ?"
    )
    weighed = (
        f"SELECT {keys}, {review_column(pg)} FROM cards WHERE {where} "
        f"AND claim_rank IS NULL AND NOT {NOT_READY}"
    )
    cols = f"{keys}, review"  # named, not ``*``: the statement may then be prepared
    sql = (
        f"SELECT k.id FROM (SELECT {cols}, "
        "CASE WHEN status_since < ? THEN status_since ELSE ? END AS since, "
        "CASE WHEN created_at < ? THEN ? - created_at ELSE 0 END AS aged "
        f"FROM (SELECT {cols} FROM ({ranked}) r UNION ALL SELECT {cols} FROM ({weighed}) o) u "
        f"WHERE {RANK_HOLDS}) k ORDER BY priority, {READY_RANK}, id LIMIT ?"
    )
    params = [now, now, now, now, *base, n, *base, now]
    return sql, [*params, *ready_rank_params(claim_set.review_aging_min), n]


def ranked_claim(
    pg: bool,
    now: int,
    claim_set: ClaimSet,
    holder: str,
    holder_kind: str,
    session_id: str | None,
    bypass_assignee: bool,
) -> tuple[str, list[Any]] | None:
    """The ``claim --next`` statement: claim the first free card of ``ranked_sql``,
    returning the card.

    On PostgreSQL the ranked ids are read once, as one array in their order, and each
    candidate is then one primary-key probe that skips rows locked by other writes
    (``FOR UPDATE`` cannot lock the rows of a union itself); on
    SQLite the statement runs under the write lock, so the first ranked card is free.
    It claims nothing when ``RANK_HOLDS`` does not hold, when nothing is ready, or (on
    PostgreSQL) when every candidate is taken or locked. None: the claim set is empty.
    """
    first = ranked_sql(pg, now, claim_set, claim_set.pick if pg else 1)
    if first is None:
        return None
    if pg:
        pick = (
            f"SELECT cards.id FROM unnest(ARRAY({first[0]})) WITH ORDINALITY AS u (id, ord) "
            f"JOIN cards ON cards.id = u.id WHERE {PICK_RULE} ORDER BY u.ord LIMIT 1 "
            "FOR UPDATE OF cards SKIP LOCKED"
        )
        params = [*first[1], holder, 1 if bypass_assignee else 0]
    else:  # every ranked card is claimable by the caller (``ClaimSet``) and none is locked
        pick, params = first
    return _claim_picked(pg, now, pick, params, holder, holder_kind, session_id)


def ranked_claim_with_event(
    store: Store,
    claim_set: ClaimSet,
    holder: str,
    holder_kind: str,
    session_id: str | None,
    bypass_assignee: bool,
    event: tuple[Any, ...],
    payload: tuple[str, str, str],
) -> Row | None:
    """``ranked_claim`` and its ``card.claimed`` event as one statement.

    ``event`` is the event's ``at, actor, actor_kind``; ``payload`` its JSON text around
    the claimed card's new epoch and its ref: ``head + epoch + middle + ref + tail``
    (the ref as a JSON string). One round trip: the ranking, the claim and the event
    commit together (on SQLite the statement's trigger writes the event, and the write
    lock is held for this statement alone). None: nothing was claimed (``claim_next``
    finds out why).
    """
    pg = store.dialect == "postgresql"
    got = ranked_claim(
        pg,
        store.clock.now_ms(),
        claim_set,
        holder,
        holder_kind,
        session_id,
        bypass_assignee,
    )
    if got is None:
        return None
    if not pg:
        armed = (*event, *payload)
        return _with_prev(_sqlite(store).claim_statement(got[0], got[1], armed), "todo", None)
    sql = (
        f"WITH c AS ({got[0]}), "
        "e AS (INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
        "payload) SELECT ?, 'card.claimed', c.id, c.project_id, c.run_id, ?, ?, "
        "?::text || c.claim_epoch::text || ?::text || to_json(c.ref)::text || ?::text "
        "FROM c RETURNING id, xid) "
        f"SELECT {card_columns('c')}, c.deps, e.id AS event_id, e.xid AS event_xid "
        "FROM c CROSS JOIN e"
    )
    rows = store.write_statement(sql, [*got[1], *event, *payload], types="card.claimed")
    return _with_prev(rows, "todo", None)


class ClaimQueries(Queries):
    """The claim queries of ``Tx`` (``store.tx``)."""

    def deps_done(self, card_id: int) -> bool:
        return not self.one(
            "SELECT 1 AS x FROM links l JOIN cards d ON d.id = l.depends_on "
            "WHERE l.card_id = ? AND d.status <> 'done' LIMIT 1",
            (card_id,),
        )

    def claim(
        self,
        card_id: int,
        holder: str,
        holder_kind: str,
        session_id: str | None,
        windows: ClaimWindows,
        *,
        bypass_assignee: bool = False,
        expect: Row | None = None,
    ) -> Row | None:
        """The claim: one compare-and-swap statement. Returns the new row or None.

        The row also carries ``prev_status`` and ``prev_holder``: the values the CAS
        replaced (for the takeover comment and the event). ``expect`` is a card row
        read before the transaction: the CAS then also requires its ``version``, so a
        success proves the replaced values are the expected ones (no read under lock).
        """
        sets, set_params, claimable, where_params = cas_parts(
            self.now(), holder, holder_kind, session_id, windows, bypass_assignee
        )
        if expect is not None:
            row = self.one(
                f"UPDATE cards SET {sets} WHERE id = ? AND version = ? AND ({claimable}) "
                "RETURNING *",
                (*set_params, card_id, expect["version"], *where_params),
            )
            if row is not None:
                row["prev_status"], row["prev_holder"] = expect["status"], expect["holder"]
            return row
        if self.pg:
            # the old values come from the row version the statement locked
            return self.one(
                f"UPDATE cards SET {sets} FROM (SELECT id AS old_id, status AS prev_status, "
                "holder AS prev_holder FROM cards WHERE id = ? FOR UPDATE) old "
                f"WHERE cards.id = old.old_id AND ({claimable}) "
                "RETURNING cards.*, old.prev_status, old.prev_holder",
                (*set_params, card_id, *where_params),
            )
        # SQLite: the write lock is already exclusive, so a read first is exact
        prev = self.one("SELECT status, holder FROM cards WHERE id = ?", (card_id,))
        if prev is None:
            return None
        row = self.one(
            f"UPDATE cards SET {sets} WHERE id = ? AND ({claimable}) RETURNING *",
            (*set_params, card_id, *where_params),
        )
        if row is not None:
            row["prev_status"], row["prev_holder"] = prev["status"], prev["holder"]
        return row

    def ready_keys(
        self,
        *,
        assignees: Sequence[str] = (),
        unassigned: bool = True,
        project_id: int | None = None,
        limit: int = 200,
    ) -> list[ReadyKey]:
        """``ready_cards`` reduced to the ordering keys, in ``(priority, id)`` order."""
        window = ready_window(self.pg, assignees, unassigned, project_id, limit)
        if window is None:
            return []
        return [_ready_key(r) for r in self.all(*window)]

    def ready_first(
        self,
        n: int,
        *,
        assignees: Sequence[str] = (),
        unassigned: bool = True,
        project_id: int | None = None,
        limit: int = 200,
        review_aging_min: int = DEFAULT_SLA.review_aging_min,
    ) -> list[ReadyKey] | None:
        """The first ``n`` of ``ready_keys`` in ``domain.weights`` order, ranked in SQL.

        Without fan-out a card's weight is its time in status, half its age and the SLA
        pressure of a review card (``review_aging``, limit ``review_aging_min``), so the
        integer key ``READY_RANK`` ranks exactly as ``weights.order``. None when a card
        of the window is waited on: its fan-out is weighed by the caller.
        """
        first = ready_first_sql(
            self.pg, self.now(), n, assignees, unassigned, project_id, limit, review_aging_min
        )
        if first is None:
            return []
        got = self.all(*first)
        if got and got[0]["any_waited"]:
            return None
        return [_ready_key(r) for r in got]

    def claim_next(
        self,
        ordered_ids: Sequence[int],
        holder: str,
        holder_kind: str,
        session_id: str | None,
        *,
        bypass_assignee: bool = False,
        skip_locked: bool = True,
    ) -> Row | None:
        """Claim the first still-claimable ``todo`` card of ``ordered_ids`` in one statement.

        On PostgreSQL the pick takes ``FOR UPDATE SKIP LOCKED``, so racing callers each
        take a different card instead of queueing on the same row; ``skip_locked=False``
        waits for the rows' locks instead (pass one id: a transaction that holds no lock
        and waits for one row cannot deadlock). None: none was left. The row carries
        ``deps``, the card's dependency ids (comma-separated, or None).
        """
        ids = [int(i) for i in ordered_ids]
        if not ids:
            return None
        sql, params = claim_next_update(
            self.pg, self.now(), ids, holder, holder_kind, session_id, bypass_assignee, skip_locked
        )
        row = self.one(sql, params)
        if row is not None:
            row["prev_status"], row["prev_holder"] = "todo", None
        return row

    def claim_ranked(
        self,
        claim_set: ClaimSet,
        holder: str,
        holder_kind: str,
        session_id: str | None,
        *,
        bypass_assignee: bool = False,
    ) -> Row | None:
        """``ranked_claim`` in this transaction (SQLite: under the write lock). The row
        carries ``deps``; None: it claimed nothing (``claim_next`` finds out why)."""
        got = ranked_claim(
            self.pg, self.now(), claim_set, holder, holder_kind, session_id, bypass_assignee
        )
        row = self.one(*got) if got is not None else None
        if row is not None:
            row["prev_status"], row["prev_holder"] = "todo", None
        return row

    def first_claimable(
        self, ordered_ids: Sequence[int], holder: str, *, bypass_assignee: bool = False
    ) -> int | None:
        """The first of ``ordered_ids`` claimable as last committed (no lock taken)."""
        ids = [int(i) for i in ordered_ids]
        if not ids:
            return None
        got = self.one(*self._pick(ids, holder, bypass_assignee))
        return int(got["id"]) if got else None

    def _pick(self, ids: list[int], holder: str, bypass: bool) -> tuple[str, list[Any]]:
        return pick_sql(self.pg, ids, holder, bypass)
