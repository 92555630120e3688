"""The claim statements: one compare-and-swap per claim, in portable SQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from laneboard.domain.claims import ClaimWindows
from laneboard.store.base import Row

NOT_READY = (
    "EXISTS (SELECT 1 FROM links l JOIN cards d ON d.id = l.depends_on "
    "WHERE l.card_id = cards.id AND d.status <> 'done')"
)


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
        f"CASE WHEN {NOT_READY} THEN 0 ELSE 1 END AS deps_done, "
        f"(SELECT {deps} FROM links WHERE links.card_id = cards.id) AS deps "
        f"FROM cards WHERE {by} = ?"
    )


class ClaimQueries:
    """The claim queries of ``Tx`` (``store.tx``), which defines ``pg``, ``now`` and ``one``."""

    pg: bool

    if TYPE_CHECKING:

        def now(self) -> int: ...

        def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

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
        now = self.now()
        sets = (
            "status = 'in_progress', holder = ?, holder_kind = ?, "
            "session_id = ?, claimed_at = ?, heartbeat_at = ?, claim_epoch = claim_epoch + 1, "
            "version = version + 1, updated_at = ?, assignee = coalesce(assignee, ?), "
            "status_since = CASE WHEN status = 'in_progress' THEN status_since ELSE ? END"
        )
        claimable = (
            f"(status = 'todo' AND (assignee IS NULL OR assignee = ? OR ? = 1) AND NOT {NOT_READY})"
            " OR (status = 'in_progress' AND holder = ? AND "
            "(heartbeat_at IS NULL OR heartbeat_at <= ?))"
            " OR (status = 'in_progress' AND coalesce(heartbeat_at, status_since) <= ?)"
        )
        set_params = (holder, holder_kind, session_id, now, now, now, holder, now)
        where_params = (
            holder,
            1 if bypass_assignee else 0,
            holder,
            now - windows.fresh_ms,
            now - windows.takeover_ms,
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

    def claim_next(
        self,
        ordered_ids: Sequence[int],
        holder: str,
        holder_kind: str,
        session_id: str | None,
        *,
        bypass_assignee: bool = False,
    ) -> Row | None:
        """Claim the first still-claimable ``todo`` card of ``ordered_ids`` in one statement.

        On PostgreSQL the pick takes ``FOR UPDATE SKIP LOCKED``, so racing callers each
        take a different card instead of queueing on the same row. None: none was left.
        """
        ids = [int(i) for i in ordered_ids]
        if not ids:
            return None
        now = self.now()
        order = " ".join(f"WHEN {cid} THEN {k}" for k, cid in enumerate(ids))
        pick = (
            f"SELECT id FROM cards WHERE id IN ({','.join(str(i) for i in ids)}) "
            "AND status = 'todo' AND (assignee IS NULL OR assignee = ? OR ? = 1) "
            f"AND NOT {NOT_READY} ORDER BY CASE id {order} END LIMIT 1"
        )
        if self.pg:
            pick += " FOR UPDATE SKIP LOCKED"
        row = self.one(
            "UPDATE cards SET status = 'in_progress', holder = ?, holder_kind = ?, "
            "session_id = ?, claimed_at = ?, heartbeat_at = ?, claim_epoch = claim_epoch + 1, "
            "version = version + 1, updated_at = ?, assignee = coalesce(assignee, ?), "
            f"status_since = ? WHERE id = ({pick}) RETURNING *",
            (holder, holder_kind, session_id, now, now, now, holder, now,
             holder, 1 if bypass_assignee else 0),
        )  # fmt: skip
        if row is not None:
            row["prev_status"], row["prev_holder"] = "todo", None
        return row
