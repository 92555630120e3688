"""Records of the board. Times are epoch milliseconds (UTC)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from laneboard.domain.clock import iso
from laneboard.domain.cursor import EventCursor
from laneboard.domain.status import TERMINAL, Status
from laneboard.errors import LaneboardError


class ActorKind(StrEnum):
    HUMAN = "human"
    AGENT = "agent"
    SYSTEM = "system"


class AcceptanceMode(StrEnum):
    OFF = "off"
    AUTO = "auto"
    HUMAN = "human"


class CardKind(StrEnum):
    TASK = "task"
    EPIC = "epic"


class CommentKind(StrEnum):
    NOTE = "note"
    QUESTION = "question"
    ANSWER = "answer"
    DECISION = "decision"
    CONFIRM = "confirm"
    CHANGE = "change"
    FINDING = "finding"


AWAITING_REASONS = ("E1", "E2", "E3", "E4", "E5")
PROJECT_KEY_RE = re.compile(r"^[A-Z][A-Z0-9]{0,9}$")
REF_RE = re.compile(r"^([A-Z][A-Z0-9]{0,9})-([1-9][0-9]*)$")


@dataclass(frozen=True)
class Actor:
    """Who performs a write. ``card_id`` and ``epoch`` scope an agent credential."""

    kind: ActorKind
    name: str
    card_id: int | None = None
    epoch: int | None = None
    session_id: str | None = None

    @property
    def is_human(self) -> bool:
        return self.kind is ActorKind.HUMAN

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "name": self.name, "card_id": self.card_id}


def human(name: str = "human") -> Actor:
    return Actor(ActorKind.HUMAN, name)


def system(name: str = "Orchestrator") -> Actor:
    return Actor(ActorKind.SYSTEM, name)


def agent(name: str, card_id: int | None = None, epoch: int | None = None) -> Actor:
    return Actor(ActorKind.AGENT, name, card_id, epoch)


@dataclass(frozen=True)
class Project:
    id: int
    key: str
    name: str
    path: str | None
    base_ref: str | None
    created_at: int
    remote: str | None = None  # a shared git remote: lanes across machines

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "key": self.key,
            "name": self.name,
            "path": self.path,
            "base_ref": self.base_ref,
            "remote": self.remote,
            "created_at": iso(self.created_at),
        }


@dataclass(frozen=True)
class Criterion:
    id: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "text": self.text}


@dataclass(frozen=True)
class Card:
    id: int
    ref: str
    project_id: int
    title: str
    description: str
    kind: CardKind
    parent_id: int | None
    status: Status
    assignee: str | None
    priority: int
    labels: tuple[str, ...]
    acceptance: tuple[Criterion, ...]
    acceptance_mode: AcceptanceMode
    delivery_round: int
    checks: tuple[str, ...]
    allowed_paths: tuple[str, ...]
    holder: str | None
    holder_kind: ActorKind | None
    session_id: str | None
    claimed_at: int | None
    heartbeat_at: int | None
    claim_epoch: int
    meta: dict[str, Any]
    idempotency_key: str | None
    run_id: int | None
    status_since: int
    created_at: int
    updated_at: int
    version: int
    depends_on: tuple[int, ...] = field(default=())

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        # ``_value_`` is the plain attribute behind ``.value``, read without its descriptor:
        # a list renders these fields for every card
        return {
            "id": self.id,
            "ref": self.ref,
            "project_id": self.project_id,
            "title": self.title,
            "description": self.description,
            "kind": self.kind._value_,
            "parent_id": self.parent_id,
            "status": self.status._value_,
            "assignee": self.assignee,
            "priority": self.priority,
            "labels": list(self.labels),
            "acceptance": [c.to_dict() for c in self.acceptance],
            "acceptance_mode": self.acceptance_mode._value_,
            "delivery_round": self.delivery_round,
            "checks": list(self.checks),
            "allowed_paths": list(self.allowed_paths),
            "claim": {
                "holder": self.holder,
                "actor_kind": self.holder_kind._value_ if self.holder_kind else None,
                "session_id": self.session_id,
                "claimed_at": iso(self.claimed_at),
                "heartbeat_at": iso(self.heartbeat_at),
                "epoch": self.claim_epoch,
            },
            "meta": self.meta,
            "idempotency_key": self.idempotency_key,
            "run_id": self.run_id,
            "depends_on": list(self.depends_on),
            "status_since": iso(self.status_since),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "version": self.version,
        }


@dataclass(frozen=True)
class Comment:
    id: int
    card_id: int
    kind: CommentKind
    body: str
    author: str
    author_kind: ActorKind
    created_at: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "card_id": self.card_id,
            "kind": self.kind.value,
            "body": self.body,
            "author": self.author,
            "author_kind": self.author_kind.value,
            "created_at": iso(self.created_at),
        }


@dataclass(frozen=True)
class Evidence:
    command: str
    exit_code: int
    digest: str
    summary: str = ""
    log_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "exit_code": self.exit_code,
            "digest": self.digest,
            "summary": self.summary,
            "log_path": self.log_path,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Evidence:
        return Evidence(
            command=str(d["command"]),
            exit_code=int(d["exit_code"]),
            digest=str(d.get("digest", "")),
            summary=str(d.get("summary", "")),
            log_path=d.get("log_path"),
        )


@dataclass(frozen=True)
class Report:
    id: int
    card_id: int
    round: int
    body: str
    commit: str | None
    evidence: tuple[Evidence, ...]
    author: str
    author_kind: ActorKind
    created_at: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "card_id": self.card_id,
            "round": self.round,
            "body": self.body,
            "commit": self.commit,
            "evidence": [e.to_dict() for e in self.evidence],
            "author": self.author,
            "author_kind": self.author_kind.value,
            "created_at": iso(self.created_at),
        }


@dataclass(frozen=True)
class Event:
    id: int
    at: int
    type: str
    card_id: int | None
    project_id: int | None
    run_id: int | None
    actor: str
    actor_kind: str
    payload: dict[str, Any]
    xid: int = 0  # the writing transaction on PostgreSQL (0 on SQLite): see domain.cursor

    @property
    def cursor(self) -> str:
        """This event's position in the log, as a resumable cursor."""
        return str(EventCursor(self.xid, self.id))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cursor": self.cursor,
            "at": iso(self.at),
            "type": self.type,
            "card_id": self.card_id,
            "project_id": self.project_id,
            "run_id": self.run_id,
            "actor": self.actor,
            "actor_kind": self.actor_kind,
            "payload": self.payload,
        }


def parse_enum(enum: type[StrEnum], value: str, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        names = ", ".join(m.value for m in enum)
        raise LaneboardError(
            "BAD_INPUT", f"unknown {what} {value!r}", f"use one of: {names}"
        ) from None


def check_priority(value: int) -> int:
    if not 0 <= value <= 3:
        raise LaneboardError(
            "BAD_INPUT", f"priority {value} is out of range", "use 0 (highest) to 3 (lowest)"
        )
    return value
