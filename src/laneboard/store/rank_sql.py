"""``claim --next``'s statement: rank the ready cards of a claim set and claim the first
free one, with its event, in one statement (``store.claim_sql`` holds the claim's parts)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from laneboard.store.base import Row
from laneboard.store.claim_sql import (
    NOT_READY,
    PICK_RULE,
    READY_RANK,
    _claim_picked,
    _sqlite,
    _with_prev,
    card_columns,
    ready_rank_params,
    review_column,
)

if TYPE_CHECKING:
    from laneboard.store.base import Store


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


def _set_where(claim_set: ClaimSet) -> tuple[str, list[Any]] | None:
    """The ``todo`` cards of a claim set, as a condition and its parameters (None: none)."""
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
    return where, [*claim_set.assignees, *([pid] if pid is not None else [])]


def index_pick(
    pg: bool, now: int, claim_set: ClaimSet, holder: str, bypass: bool
) -> tuple[str, list[Any]] | None:
    """The first free ranked card in ``cards_claim_rank`` order, when that order is the
    weight order: no card of the set is weighed in full (no unranked one) and
    ``RANK_HOLDS`` holds; else no row. Then the index walk itself is the ranking, as a
    bare ``ORDER BY ... LIMIT 1`` is: no candidates to read, sort and probe again (on
    PostgreSQL the walk skips rows other writes hold). None: the claim set is empty.
    """
    got = _set_where(claim_set)
    if got is None:
        return None
    where, base = got
    weighed = f"SELECT 1 FROM cards WHERE {where} AND claim_rank IS NULL AND NOT {NOT_READY}"
    sql = (
        f"SELECT id FROM cards WHERE {where} AND claim_rank IS NOT NULL AND {PICK_RULE} "
        f"AND NOT EXISTS ({weighed}) AND {RANK_HOLDS} "
        "ORDER BY priority, claim_rank, id LIMIT 1" + (" FOR UPDATE SKIP LOCKED" if pg else "")
    )
    return sql, [*base, holder, 1 if bypass else 0, *base, now]


def ranked_sql(pg: bool, now: int, claim_set: ClaimSet, n: int) -> tuple[str, list[Any]] | None:
    """The ids of the heaviest ``n`` ready cards of a claim set, in
    ``domain.weights`` order, or no row when ``RANK_HOLDS`` does not (None: the claim
    set is empty).

    The ranked cards (``claim_rank`` set) are read from ``cards_claim_rank`` in weight
    order, only the first ``n`` of them; the others (review cards, whose SLA pressure
    grows with time, and cards stamped before their creation) are all read and weighed
    in full. The heaviest of the two sets together are the heaviest of all.
    """
    got = _set_where(claim_set)
    if got is None:
        return None
    where, base = got
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


NOW = object()  # stands for the time in a statement built once for one claimant
INDEX, RANK, EITHER = "index", "rank", "either"  # which pick a claim statement makes


def ranked_claim(
    pg: bool,
    now: int,
    claim_set: ClaimSet,
    holder: str,
    holder_kind: str,
    session_id: str | None,
    bypass_assignee: bool,
    part: str = EITHER,
) -> tuple[str, list[Any]] | None:
    """``build_ranked_claim``, built once per claimant, claim set and part (a worker
    claims the next card again and again): only the time changes from one call to the
    next."""
    key = claim_set._replace(assignees=tuple(claim_set.assignees))
    got = _ranked_claim(pg, key, holder, holder_kind, session_id, bypass_assignee, part)
    if got is None:
        return None
    return got[0], [now if p is NOW else p for p in got[1]]


@functools.lru_cache(maxsize=256)
def _ranked_claim(
    pg: bool,
    claim_set: ClaimSet,
    holder: str,
    holder_kind: str,
    session_id: str | None,
    bypass_assignee: bool,
    part: str,
) -> tuple[str, tuple[Any, ...]] | None:
    got = build_ranked_claim(
        pg, NOW, claim_set, holder, holder_kind, session_id, bypass_assignee, part
    )
    return None if got is None else (got[0], tuple(got[1]))


def build_ranked_claim(
    pg: bool,
    now: Any,
    claim_set: ClaimSet,
    holder: str,
    holder_kind: str,
    session_id: str | None,
    bypass_assignee: bool,
    part: str = EITHER,
) -> tuple[str, list[Any]] | None:
    """The ``claim --next`` statement: claim the first free card of ``ranked_sql``,
    returning the card (``now`` is only ever a parameter).

    ``part`` says how it picks: ``INDEX`` walks the index, and claims nothing unless the
    index order is the weight order (``index_pick``); ``RANK`` ranks; ``EITHER`` walks the
    index when its order is the weight order and ranks only when not, in one statement.
    On PostgreSQL the ranked ids are read once, as one array in their order, and each
    candidate is then one primary-key probe that skips rows locked by other writes
    (``FOR UPDATE`` cannot lock the rows of a union itself); on
    SQLite the statement runs under the write lock, so the first ranked card is free.
    It claims nothing when nothing is ready, when (``INDEX``) the index order is not the
    weight order, or (on PostgreSQL) when every candidate is taken or locked; ``RANK`` and
    ``EITHER`` also when ``RANK_HOLDS`` does not hold. None: the claim set is empty.
    """
    assert part in (INDEX, RANK, EITHER)
    first = ranked_sql(pg, now, claim_set, claim_set.pick if pg else 1)
    fast = index_pick(pg, now, claim_set, holder, bypass_assignee)
    if first is None or fast is None:
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
    if part == INDEX:
        pick, params = fast
    elif part == EITHER:  # the index walk when it is the ranking; the ranking only when not
        pick, params = f"SELECT coalesce(({fast[0]}), ({pick}))", [*fast[1], *params]
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
    """``ranked_claim`` and its ``card.claimed`` event as one statement (on PostgreSQL
    the index walk first, and the ranking only when it claimed nothing).

    ``event`` is the event's ``at, actor, actor_kind``; ``payload`` its JSON text around
    the claimed card's new epoch and its ref: ``head + epoch + middle + ref + tail``
    (the ref as a JSON string). Each statement is its own transaction: the pick, the claim
    and the event commit together (on SQLite the statement's trigger writes the event,
    and the write lock is held for this statement alone). The common case is one round
    trip; on PostgreSQL a claim set whose index order is not the weight order (a review
    card or a waited-on card is ready) takes two. None: nothing was claimed
    (``claim_next`` finds out why).
    """
    pg = store.dialect == "postgresql"
    now = store.clock.now_ms()
    args = (claim_set, holder, holder_kind, session_id, bypass_assignee)
    if not pg:  # one statement: SQLite compiles it once and runs only the pick it needs
        got = ranked_claim(pg, now, *args)
        if got is None:
            return None
        armed = (*event, *payload)
        return _with_prev(_sqlite(store).claim_statement(got[0], got[1], armed), "todo", None)
    # PostgreSQL plans a statement again at each run unless its generic plan looks as
    # cheap: the index walk alone is planned at about half the cost of both picks together
    for part in (INDEX, RANK):
        got = ranked_claim(pg, now, *args, part)
        if got is None:
            return None
        rows = store.write_statement(
            _with_event(got[0]), [*got[1], *event, *payload], types="card.claimed"
        )
        if rows:
            return _with_prev(rows, "todo", None)
    return None


@functools.lru_cache(maxsize=64)
def _with_event(claim: str) -> str:
    """A PostgreSQL claim statement that also writes its ``card.claimed`` event."""
    return (
        f"WITH c AS ({claim}), "
        "e AS (INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
        "payload) SELECT ?, 'card.claimed', c.id, c.project_id, c.run_id, ?, ?, "
        "?::text || c.claim_epoch::text || ?::text || to_json(c.ref)::text || ?::text "
        "FROM c RETURNING id, xid) "
        f"SELECT {card_columns('c')}, c.deps, e.id AS event_id, e.xid AS event_xid "
        "FROM c CROSS JOIN e"
    )
