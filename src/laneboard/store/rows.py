"""Row <-> record conversion."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from laneboard.domain.clock import iso
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
    return Project(
        r["id"], r["key"], r["name"], r["path"], r["base_ref"], r["created_at"], r.get("remote")
    )


def dep_ids(text: str | None) -> tuple[int, ...]:
    """Dependency ids from their comma-separated column (``deps`` of the card reads)."""
    return tuple(sorted(int(d) for d in str(text or "").split(",") if d))


# A list of cards repeats the same few label sets, checks and paths: their parses (immutable
# tuples, a pure function of the column's text) are kept rather than redone per row.
_STATUS = {s.value: s for s in Status}
_KIND = {k.value: k for k in CardKind}
_MODE = {m.value: m for m in AcceptanceMode}
_ACTOR = {a.value: a for a in ActorKind}


@lru_cache(maxsize=4096)
def _strings(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))


@lru_cache(maxsize=4096)
def _criteria(text: str) -> tuple[Criterion, ...]:
    return tuple(Criterion(c["id"], c["text"]) for c in json.loads(text))


def _object(text: str) -> dict[str, Any]:
    return {} if text == "{}" else dict(json.loads(text))


def card(r: Row, depends_on: tuple[int, ...] = ()) -> Card:
    return Card(
        id=r["id"],
        ref=r["ref"],
        project_id=r["project_id"],
        title=r["title"],
        description=r["description"],
        kind=_KIND[r["kind"]],
        parent_id=r["parent_id"],
        status=_STATUS[r["status"]],
        assignee=r["assignee"],
        priority=r["priority"],
        labels=_strings(r["labels"]),
        acceptance=_criteria(r["acceptance"]),
        acceptance_mode=_MODE[r["acceptance_mode"]],
        delivery_round=r["delivery_round"],
        checks=_strings(r["checks"]),
        allowed_paths=_strings(r["allowed_paths"]),
        holder=r["holder"],
        holder_kind=_ACTOR[r["holder_kind"]] if r["holder_kind"] else None,
        session_id=r["session_id"],
        claimed_at=r["claimed_at"],
        heartbeat_at=r["heartbeat_at"],
        claim_epoch=r["claim_epoch"],
        meta=_object(r["meta"]),
        idempotency_key=r["idempotency_key"],
        run_id=r["run_id"],
        status_since=r["status_since"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        version=r["version"],
        depends_on=depends_on,
    )


def card_dict(r: Row, depends_on: Sequence[int] = ()) -> dict[str, Any]:
    """``card(r, depends_on).to_dict()`` built straight from the row, without the record:
    what a card list answers, for every card on it."""
    holder_kind = r["holder_kind"]
    return {
        "id": r["id"],
        "ref": r["ref"],
        "project_id": r["project_id"],
        "title": r["title"],
        "description": r["description"],
        "kind": _KIND[r["kind"]]._value_,
        "parent_id": r["parent_id"],
        "status": _STATUS[r["status"]]._value_,
        "assignee": r["assignee"],
        "priority": r["priority"],
        "labels": list(_strings(r["labels"])),
        "acceptance": [c.to_dict() for c in _criteria(r["acceptance"])],
        "acceptance_mode": _MODE[r["acceptance_mode"]]._value_,
        "delivery_round": r["delivery_round"],
        "checks": list(_strings(r["checks"])),
        "allowed_paths": list(_strings(r["allowed_paths"])),
        "claim": {
            "holder": r["holder"],
            "actor_kind": _ACTOR[holder_kind]._value_ if holder_kind else None,
            "session_id": r["session_id"],
            "claimed_at": iso(r["claimed_at"]),
            "heartbeat_at": iso(r["heartbeat_at"]),
            "epoch": r["claim_epoch"],
        },
        "meta": _object(r["meta"]),
        "idempotency_key": r["idempotency_key"],
        "run_id": r["run_id"],
        "depends_on": list(depends_on),
        "status_since": iso(r["status_since"]),
        "created_at": iso(r["created_at"]),
        "updated_at": iso(r["updated_at"]),
        "version": r["version"],
    }


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
        int(r.get("xid") or 0),
    )
