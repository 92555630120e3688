"""Credentials: token rows, stored by the hash of the token."""

from __future__ import annotations

from laneboard.store.base import Row
from laneboard.store.q_base import Queries


class TokenQueries(Queries):
    def insert_token(
        self,
        token_hash: str,
        name: str,
        kind: str,
        card_id: int | None,
        epoch: int | None,
        expires_at: int | None,
    ) -> Row:
        r = self.one(
            "INSERT INTO tokens (token_hash, name, kind, card_id, epoch, expires_at, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *",
            (token_hash, name, kind, card_id, epoch, expires_at, self.now()),
        )
        assert r is not None
        return r

    def token_rows(self) -> list[Row]:
        return self.all("SELECT * FROM tokens ORDER BY id")

    def revoke_token(self, token_id: int) -> Row | None:
        """Revoke an active token; None when there is none with that id."""
        return self.one(
            "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL RETURNING *",
            (self.now(), token_id),
        )

    def token_by_hash(self, token_hash: str) -> Row | None:
        return self.one("SELECT * FROM tokens WHERE token_hash = ?", (token_hash,))
