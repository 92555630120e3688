"""Credentials: tokens stored hashed; an agent token is scoped to one card and epoch."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laneboard.board import inputs
from laneboard.board.authority import Caller, require
from laneboard.domain.clock import iso
from laneboard.domain.model import Actor, ActorKind
from laneboard.errors import LaneboardError, bad_input
from laneboard.store import Store

if TYPE_CHECKING:
    from laneboard.store.tx import Tx

PREFIX = "lbt_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    kind: str
    card_id: int | None
    epoch: int | None
    expires_at: int | None
    created_at: int
    revoked_at: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "card_id": self.card_id,
            "epoch": self.epoch,
            "expires_at": iso(self.expires_at),
            "created_at": iso(self.created_at),
            "revoked_at": iso(self.revoked_at),
        }


def _info(r: dict[str, Any]) -> TokenInfo:
    return TokenInfo(
        r["id"],
        r["name"],
        r["kind"],
        r["card_id"],
        r["epoch"],
        r["expires_at"],
        r["created_at"],
        r["revoked_at"],
    )


def _insert(
    tx: Tx, actor: Actor, token: str, name: str, kind: str,
    card_id: int | None, epoch: int | None, expires_at: int | None,
) -> TokenInfo:  # fmt: skip
    r = tx.insert_token(digest(token), name, kind, card_id, epoch, expires_at)
    tx.append_event(
        "token.created",
        actor,
        card_id=card_id,
        payload={"token": r["id"], "name": name, "kind": kind},
    )
    return _info(r)


@dataclass(frozen=True)
class AgentToken:
    """An agent token made for a session before its turn (its environment and token file
    name it) and stored in the transaction that starts the turn: an agent acts only on
    its prompt, which is sent after that commit."""

    token: str
    name: str
    card_id: int
    epoch: int
    expires_at: int

    @classmethod
    def mint(cls, name: str, card_id: int, epoch: int, expires_at: int) -> AgentToken:
        inputs.text(name, "token name", limit=200)
        return cls(PREFIX + secrets.token_urlsafe(32), name, card_id, epoch, expires_at)

    def store(self, tx: Tx, actor: Actor) -> TokenInfo:
        """The token's row and its ``token.created`` event, in the caller's transaction."""
        require(actor, Caller.PERSON, "create tokens")
        return _insert(
            tx, actor, self.token, self.name, "agent", self.card_id, self.epoch, self.expires_at
        )


class Tokens:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self,
        actor: Actor,
        name: str,
        kind: str = "agent",
        *,
        card_id: int | None = None,
        epoch: int | None = None,
        expires_at: int | None = None,
    ) -> tuple[str, TokenInfo]:
        """Returns the plaintext token (shown once) and its record."""
        if kind not in ("agent", "human"):
            raise bad_input(f"token kind {kind!r} is not valid", "use agent or human")
        require(actor, Caller.PERSON, "create tokens")
        if not isinstance(name, str) or not name.strip():
            raise bad_input("a token needs a name", "pass --name")
        inputs.text(name, "token name", limit=200)
        if card_id is not None:
            inputs.row_id(card_id, "card")
        if epoch is not None:
            inputs.cursor(epoch, "epoch")
        token = PREFIX + secrets.token_urlsafe(32)
        with self.store.write() as tx:
            info = _insert(tx, actor, token, name, kind, card_id, epoch, expires_at)
        return token, info

    def list(self, actor: Actor) -> list[TokenInfo]:
        require(actor, Caller.PERSON, "list tokens")
        with self.store.read() as tx:
            return [_info(r) for r in tx.token_rows()]

    def revoke(self, actor: Actor, token_id: int) -> TokenInfo:
        require(actor, Caller.PERSON, "revoke tokens")
        inputs.row_id(token_id, "token")
        with self.store.write() as tx:
            r = tx.revoke_token(token_id)
            if r is None:
                raise LaneboardError(
                    "NOT_FOUND", f"no active token {token_id}", "list tokens with: lb token list"
                )
            tx.append_event("token.revoked", actor, payload={"token": token_id})
        return _info(r)

    def resolve(self, token: str) -> Actor:
        """The actor a presented token stands for, or ``UNAUTHORIZED``."""
        if not token.isascii() or not token.isprintable():
            raise LaneboardError(
                "UNAUTHORIZED", "the token is malformed", "use a current token (lb token list)"
            )
        with self.store.autocommit() as tx:  # one statement: a read needs no transaction
            r = tx.token_by_hash(digest(token))
            now = tx.now()
        if r is None or r["revoked_at"] is not None:
            raise LaneboardError(
                "UNAUTHORIZED",
                "the token is unknown or revoked",
                "use a current token (lb token list)",
            )
        if r["expires_at"] is not None and r["expires_at"] <= now:
            raise LaneboardError("UNAUTHORIZED", "the token has expired", "create a new token")
        kind = ActorKind.HUMAN if r["kind"] == "human" else ActorKind.AGENT
        return Actor(kind, r["name"], r["card_id"], r["epoch"])
