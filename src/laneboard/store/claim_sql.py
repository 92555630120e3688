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
                f"RETURNING *, {deps_column(self.pg)}",
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
                f"RETURNING cards.*, old.prev_status, old.prev_holder, {deps_column(True)}",
                (*set_params, card_id, *where_params),
            )
        # SQLite: the write lock is already exclusive, so a read first is exact
        prev = self.one("SELECT status, holder FROM cards WHERE id = ?", (card_id,))
        if prev is None:
            return None
        row = self.one(
            f"UPDATE cards SET {sets} WHERE id = ? AND ({claimable}) "
            f"RETURNING *, {deps_column(False)}",
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
