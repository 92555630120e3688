"""Row <-> record conversion."""

from __future__ import annotations

import json
from typing import Any

from laneboard.domain.model import (
    AcceptanceMode,
    ActorKind,
    Card,
    CardKind,
    Comment,
    CommentKind,
    Criterion,
    Event,
    Evidence,
    Project,
    Report,
)
from laneboard.domain.status import Status
from laneboard.store.base import Row


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def project(r: Row) -> Project:
    return Project(r["id"], r["key"], r["name"], r["path"], r["base_ref"], r["created_at"])


def card(r: Row, depends_on: tuple[int, ...] = ()) -> Card:
    return Card(
        id=r["id"],
        ref=r["ref"],
        project_id=r["project_id"],
        title=r["title"],
        description=r["description"],
        kind=CardKind(r["kind"]),
        parent_id=r["parent_id"],
        status=Status(r["status"]),
        assignee=r["assignee"],
        priority=r["priority"],
        labels=tuple(json.loads(r["labels"])),
        acceptance=tuple(Criterion(c["id"], c["text"]) for c in json.loads(r["acceptance"])),
        acceptance_mode=AcceptanceMode(r["acceptance_mode"]),
        delivery_round=r["delivery_round"],
        checks=tuple(json.loads(r["checks"])),
        allowed_paths=tuple(json.loads(r["allowed_paths"])),
        holder=r["holder"],
        holder_kind=ActorKind(r["holder_kind"]) if r["holder_kind"] else None,
        session_id=r["session_id"],
        claimed_at=r["claimed_at"],
        heartbeat_at=r["heartbeat_at"],
        claim_epoch=r["claim_epoch"],
        meta=json.loads(r["meta"]),
        idempotency_key=r["idempotency_key"],
        run_id=r["run_id"],
        status_since=r["status_since"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        version=r["version"],
        depends_on=depends_on,
    )


def comment(r: Row) -> Comment:
    return Comment(
        r["id"],
        r["card_id"],
        CommentKind(r["kind"]),
        r["body"],
        r["author"],
        ActorKind(r["author_kind"]),
        r["created_at"],
    )


def report(r: Row) -> Report:
    return Report(
        id=r["id"],
        card_id=r["card_id"],
        round=r["round"],
        body=r["body"],
        commit=r["commit_sha"],
        evidence=tuple(Evidence.from_dict(e) for e in json.loads(r["evidence"])),
        author=r["author"],
        author_kind=ActorKind(r["author_kind"]),
        created_at=r["created_at"],
    )


def event(r: Row) -> Event:
    return Event(
        r["id"],
        r["at"],
        r["type"],
        r["card_id"],
        r["project_id"],
        r["run_id"],
        r["actor"],
        r["actor_kind"],
        json.loads(r["payload"]),
    )
