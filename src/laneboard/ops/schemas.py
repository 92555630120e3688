"""JSON Schemas of what operations return (published in OpenAPI and as MCP output schemas).

``NAMED`` lists the shared ones; the OpenAPI document refers to them as components.
Stdlib only.
"""

from __future__ import annotations

from typing import Any

from laneboard.domain.runs import ACTIONS, REASONS, RunStatus
from laneboard.domain.status import Status

STATUSES = [s.value for s in Status]
RUN_STATUSES = [s.value for s in RunStatus]
COMMENT_KINDS = ["note", "question", "answer", "decision", "confirm", "change", "finding"]
ACTOR_KINDS = ["human", "agent", "system"]

S: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
B: dict[str, Any] = {"type": "boolean"}
N: dict[str, Any] = {"type": "number"}
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def opt(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema, or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def obj(props: dict[str, Any], *, extra: bool = False) -> dict[str, Any]:
    """An object with exactly these properties, all present."""
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": extra,
    }


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


TIME = opt(S)  # UTC ISO-8601 with milliseconds, or null
ACTOR = obj({"kind": {"type": "string", "enum": ACTOR_KINDS}, "name": S, "card_id": opt(INT)})
PROJECT = obj(
    {
        "id": INT,
        "key": S,
        "name": S,
        "path": opt(S),
        "base_ref": opt(S),
        "remote": opt(S),
        "created_at": S,
    }
)
CRITERION = obj({"id": S, "text": S})
CLAIM = obj(
    {
        "holder": opt(S),
        "actor_kind": opt({"type": "string", "enum": ACTOR_KINDS}),
        "session_id": opt(S),
        "claimed_at": TIME,
        "heartbeat_at": TIME,
        "epoch": INT,
    }
)
CARD_PROPS: dict[str, Any] = {
    "id": INT,
    "ref": S,
    "project_id": INT,
    "title": S,
    "description": S,
    "kind": {"type": "string", "enum": ["task", "epic"]},
    "parent_id": opt(INT),
    "status": {"type": "string", "enum": STATUSES},
    "assignee": opt(S),
    "priority": INT,
    "labels": array(S),
    "acceptance": array(CRITERION),
    "acceptance_mode": {"type": "string", "enum": ["off", "auto", "human"]},
    "delivery_round": INT,
    "checks": array(S),
    "allowed_paths": array(S),
    "claim": CLAIM,
    "meta": ANY_OBJECT,
    "idempotency_key": opt(S),
    "run_id": opt(INT),
    "depends_on": array(INT),
    "status_since": S,
    "created_at": S,
    "updated_at": S,
    "version": INT,
}
CARD = obj(CARD_PROPS)
COMMENT = obj(
    {
        "id": INT,
        "card_id": INT,
        "kind": {"type": "string", "enum": COMMENT_KINDS},
        "body": S,
        "author": S,
        "author_kind": {"type": "string", "enum": ACTOR_KINDS},
        "created_at": S,
    }
)
EVIDENCE = obj({"command": S, "exit_code": INT, "digest": S, "summary": S, "log_path": opt(S)})
REPORT = obj(
    {
        "id": INT,
        "card_id": INT,
        "round": INT,
        "body": S,
        "commit": opt(S),
        "evidence": array(EVIDENCE),
        "author": S,
        "author_kind": {"type": "string", "enum": ACTOR_KINDS},
        "created_at": S,
    }
)
TURN = obj(
    {
        "round": INT,
        "agent_kind": S,
        "native_id": opt(S),
        "outcome": opt(S),
        "input_tokens": opt(INT),
        "output_tokens": opt(INT),
        "cost_usd": opt(N),
        "duration_ms": opt(INT),
        "started_at": TIME,
    }
)
CARD_DETAIL = obj(
    {
        **CARD_PROPS,
        "comments": array(COMMENT),
        "reports": array(REPORT),
        "dependencies": array(obj({"ref": S, "status": {"type": "string", "enum": STATUSES}})),
        "turns": array(TURN),
    }
)
EVENT = obj(
    {
        "id": INT,
        "cursor": S,  # its position in the log (what a reader resumes after)
        "at": S,
        "type": S,
        "card_id": opt(INT),
        "project_id": opt(INT),
        "run_id": opt(INT),
        "actor": S,
        "actor_kind": S,
        "payload": ANY_OBJECT,
    }
)
CANDIDATE = obj(
    {
        "ref": S,
        "id": INT,
        "title": S,
        "status": {"type": "string", "enum": STATUSES},
        "assignee": opt(S),
        "priority": INT,
        "weight": N,
        "fanout": INT,
        "sla_pressure": N,
        "sla_row": opt(S),
        "stale": B,
    }
)
TOKEN_INFO_PROPS: dict[str, Any] = {
    "id": INT,
    "name": S,
    "kind": {"type": "string", "enum": ["agent", "human"]},
    "card_id": opt(INT),
    "epoch": opt(INT),
    "expires_at": TIME,
    "created_at": S,
    "revoked_at": TIME,
}
TOKEN_INFO = obj(TOKEN_INFO_PROPS)
TOKEN_CREATED = obj({**TOKEN_INFO_PROPS, "token": S})
PROJECT_CONFIG: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workspace": {"type": "string", "enum": ["lanes", "shared"]},
        "review_gate": array(S),
        "check_timeout": N,
        "base_ref": S,
    },
}
ASKED = obj(
    {
        **COMMENT["properties"],
        "question_id": INT,
        "wait": S,
    }
)
WAITED = obj(
    {
        "outcome": {
            "type": "string",
            "enum": ["answered", "escalated", "moved", "timeout", "error"],
        },
        "answer": S,
        "card": S,
        "question": INT,
        "status": opt(S),
        "reason": opt(S),
        "waited_s": N,
        "pulses": INT,
        "comments": array(COMMENT),
        "error": opt(S),
    }
)
DELIVERED = obj({"report": REPORT, "card": CARD})
LANDED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "card": S,
        "status": {"type": "string", "enum": STATUSES},
        "landed": B,
        "merge_commit": opt(S),
    },
    "required": ["card", "status"],
}
SCHEDULE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": S,
        "expression": S,
        "explanation": opt(S),
        "timezone": S,
        "enabled": B,
        "next_due": TIME,
        "next_due_local": TIME,
        "last_outcome": opt(S),
        "last_card": opt(S),
        "health": {
            "type": "string",
            "enum": ["never-run", "ok", "overdue", "failing", "broken"],
        },
        "broken": opt(S),
        "project": opt({"anyOf": [S, INT]}),
        "title": opt(S),
        "job": ANY_OBJECT,
    },
    "required": ["name", "expression", "timezone", "enabled", "health", "job"],
}
RUN_STATUS = {"type": "string", "enum": RUN_STATUSES}
RUN = obj(
    {
        "id": INT,
        "project": S,
        "goal": S,
        "status": RUN_STATUS,
        "options": obj(
            {"interval_ms": INT, "retry_backoff_ms": INT, "max_consecutive_errors": INT,
             "max_iterations": INT, "headless": B}
        ),
        "iterations": INT,
        "consecutive_errors": INT,
        "errors_total": INT,
        "convergence": obj(
            {"state": opt(S), "reason": opt({"type": "string", "enum": list(REASONS)})}
        ),
        "started_at": S,
        "ended_at": TIME,
        "last_error": opt(S),
        "last_tick_at": TIME,
        "stop_mode": opt({"type": "string", "enum": ["drain", "force"]}),
        "created_by": S,
        "updated_at": S,
        "cards": {"type": "object", "additionalProperties": INT},
        "card_total": INT,
        # an orchestrated run's usage against each budget (docs/orchestrate.md), else null
        "budgets": opt({"type": "object", "additionalProperties": obj({"used": INT, "limit": INT})}),
    }
)  # fmt: skip
RUN_TRANSITION = obj(
    {
        "run_id": INT,
        "action": {"type": "string", "enum": list(ACTIONS)},
        "from": RUN_STATUS,
        "target": RUN_STATUS,
        "status": RUN_STATUS,
        "replayed": B,
    }
)
RUN_SNAPSHOT = obj(
    {
        "run": RUN,
        "state": RUN_STATUS,
        "convergence": RUN["properties"]["convergence"],
        "updated_at": S,
        "as_of": S,
        "active_agents": INT,
        "queued_dispatches": INT,
        "open_deliveries": INT,
        "pending_approvals": INT,
        "blockers": INT,
        "blocked_cards": array(obj({"ref": S, "status": {"type": "string", "enum": STATUSES},
                                    "title": S})),
    }
)  # fmt: skip
REPORT_DOC: dict[str, Any] = {"type": "object"}  # status and doctor reports (documented in docs/)
DOCTOR: dict[str, Any] = {
    "type": "object",
    "properties": {"attention": B, "reasons": array(S)},
    "required": ["attention", "reasons"],
}

NAMED: dict[str, dict[str, Any]] = {
    "Actor": ACTOR,
    "Project": PROJECT,
    "Card": CARD,
    "CardDetail": CARD_DETAIL,
    "Comment": COMMENT,
    "Report": REPORT,
    "Event": EVENT,
    "Candidate": CANDIDATE,
    "TokenInfo": TOKEN_INFO,
    "TokenCreated": TOKEN_CREATED,
    "ProjectConfig": PROJECT_CONFIG,
    "Question": ASKED,
    "WaitResult": WAITED,
    "Delivery": DELIVERED,
    "Landing": LANDED,
    "Schedule": SCHEDULE,
    "Run": RUN,
    "RunTransition": RUN_TRANSITION,
    "RunSnapshot": RUN_SNAPSHOT,
    "Doctor": DOCTOR,
}
