"""JSON Schemas of request bodies (validated by ``http.validate``, published in OpenAPI)."""

from __future__ import annotations

from typing import Any

from laneboard.domain.model import AWAITING_REASONS, CommentKind
from laneboard.domain.status import Status

STATUSES = [s.value for s in Status]
COMMENT_KINDS = [k.value for k in CommentKind]


def s(max_length: int = 500, min_length: int = 0) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "minLength": min_length}


def opt(schema: dict[str, Any]) -> dict[str, Any]:
    out = {**schema, "type": [schema["type"], "null"]}
    if "enum" in schema:
        out["enum"] = [*schema["enum"], None]
    return out


def strings(max_items: int = 100, max_length: int = 500) -> dict[str, Any]:
    return {"type": "array", "items": s(max_length, 1), "maxItems": max_items}


CRITERION = {
    "oneOf": [
        s(5000, 1),
        {
            "type": "object",
            "properties": {"id": s(40), "text": s(5000, 1)},
            "required": ["text"],
            "additionalProperties": False,
        },
    ]
}

EVIDENCE = {
    "type": "object",
    "properties": {
        "command": s(5000, 1),
        "exit_code": {"type": "integer", "minimum": -1000, "maximum": 1000},
        "digest": s(200),
        "summary": s(20_000),
        "log_path": opt(s(4000)),
    },
    "required": ["command", "exit_code"],
    "additionalProperties": False,
}

PROJECT_CREATE = {
    "type": "object",
    "properties": {
        "key": s(10, 1),
        "name": opt(s(200)),
        "path": opt(s(4000)),
        "base_ref": opt(s(200)),
    },
    "required": ["key"],
    "additionalProperties": False,
}

CARD_FIELDS: dict[str, Any] = {
    "title": s(500, 1),
    "description": s(200_000),
    "kind": {"type": "string", "enum": ["task", "epic"]},
    "parent": opt(s(40)),
    "assignee": opt(s(200)),
    "priority": {"type": "integer", "minimum": 0, "maximum": 3},
    "labels": strings(),
    "acceptance": {"type": "array", "items": CRITERION, "maxItems": 100},
    "acceptance_mode": {"type": "string", "enum": ["off", "auto", "human"]},
    "checks": strings(100, 5000),
    "allowed_paths": strings(200, 1000),
    "meta": {"type": "object"},
}

CARD_CREATE = {
    "type": "object",
    "properties": {
        "project": s(200, 1),
        **CARD_FIELDS,
        "status": {"type": "string", "enum": ["todo", "backlog"]},
        "depends_on": strings(100, 40),
    },
    "required": ["project", "title"],
    "additionalProperties": False,
}

CARD_EDIT = {
    "type": "object",
    "properties": CARD_FIELDS,
    "additionalProperties": False,
}

MOVE = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "enum": STATUSES},
        "reason": opt(s(200)),
        "question": opt(s(20_000)),
        "note": opt(s(20_000)),
    },
    "required": ["to"],
    "additionalProperties": False,
}

CLAIM = {
    "type": "object",
    "properties": {"holder": opt(s(200, 1)), "session_id": opt(s(200, 1))},
    "additionalProperties": False,
}

RELEASE = {
    "type": "object",
    "properties": {"note": opt(s(20_000))},
    "additionalProperties": False,
}

COMMENT = {
    "type": "object",
    "properties": {"body": s(100_000, 1), "kind": {"type": "string", "enum": COMMENT_KINDS}},
    "required": ["body"],
    "additionalProperties": False,
}

REPORT = {
    "type": "object",
    "properties": {
        "body": s(200_000, 1),
        "commit": opt(s(200)),
        "evidence": {"type": "array", "items": EVIDENCE, "maxItems": 200},
        "verdict": opt({"type": "string", "enum": ["APPROVE", "REJECT"]}),
    },
    "required": ["body"],
    "additionalProperties": False,
}

LINK = {
    "type": "object",
    "properties": {"depends_on": s(40, 1)},
    "required": ["depends_on"],
    "additionalProperties": False,
}

TOKEN_CREATE = {
    "type": "object",
    "properties": {
        "name": s(200, 1),
        "kind": {"type": "string", "enum": ["agent", "human"]},
        "card": opt(s(40)),
        "expires_in_s": opt({"type": "integer", "minimum": 1, "maximum": 10 * 365 * 86400}),
    },
    "required": ["name"],
    "additionalProperties": False,
}

AWAITING = list(AWAITING_REASONS)

ERROR = {
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "fix": {"type": "string"},
    },
    "required": ["code", "message"],
}
