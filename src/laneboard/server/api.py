"""REST handlers under ``/api/v1``: each one parses, calls a board service, renders.

Every operation is declared once in ``OPS``: the router and the OpenAPI document are
both built from that table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import QueryParams

from laneboard.board import access
from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import Actor, ActorKind
from laneboard.errors import LaneboardError
from laneboard.server import schemas as S
from laneboard.server import status as st
from laneboard.server.http import card_ref, project_ref, query_bool, query_int, query_text
from laneboard.store import Store

MAX_ID = 2**53


@dataclass
class Call:
    store: Store
    board: Board
    tokens: Tokens
    actor: Actor
    path: dict[str, str]
    query: QueryParams
    body: dict[str, Any]
    idempotency_key: str | None


Result = tuple[int, Any]
Handler = Callable[[Call], Result]


@dataclass(frozen=True)
class Param:
    name: str
    where: str  # path | query | header
    schema: dict[str, Any]
    required: bool = False
    description: str = ""
    repeat: bool = False


@dataclass(frozen=True)
class Op:
    method: str
    path: str
    op_id: str
    summary: str
    handler: Handler
    body: dict[str, Any] | None = None
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()
    status: int = 200
    tag: str = "board"
    extra: dict[str, Any] = field(default_factory=dict)


REF = Param("ref", "path", {"type": "string"}, True, "card reference like WEB-12, or its id")
IDEM = Param(
    "Idempotency-Key",
    "header",
    {"type": "string", "maxLength": 500},
    False,
    "a repeat with the same key returns the first result",
)


def _ref(c: Call) -> str:
    return card_ref(c.path["ref"])


def _many(q: QueryParams, name: str) -> list[str]:
    out = []
    for v in q.getlist(name):
        t = query_text(v, name)
        if t:
            out.append(t)
    return out


def _human(actor: Actor, what: str) -> None:
    if actor.kind is ActorKind.AGENT:
        raise LaneboardError("FORBIDDEN", f"agents may not {what}", "ask a human to do it")


# -- handlers ---------------------------------------------------------------------
def me(c: Call) -> Result:
    return 200, c.actor.to_dict()


def list_projects(c: Call) -> Result:
    return 200, [p.to_dict() for p in c.board.projects()]


def add_project(c: Call) -> Result:
    b = c.body
    p = c.board.add_project(c.actor, b["key"], b.get("name"), b.get("path"), b.get("base_ref"))
    return 201, p.to_dict()


def get_project(c: Call) -> Result:
    return 200, c.board.project(project_ref(c.path["project"])).to_dict()


def list_cards(c: Call) -> Result:
    q = c.query
    run = query_int(q.get("run"), "run", 0, 0, MAX_ID)
    cards = c.board.list_cards(
        project=query_text(q.get("project"), "project"),
        statuses=_many(q, "status"),
        assignee=query_text(q.get("assignee"), "assignee"),
        unassigned=query_bool(q.get("unassigned"), "unassigned"),
        label=query_text(q.get("label"), "label"),
        parent=_opt_ref(query_text(q.get("parent"), "parent")),
        run_id=run or None,
        limit=query_int(q.get("limit"), "limit", 500, 1, 10_000),
    )
    return 200, [x.to_dict() for x in access.filter_cards(c.board, c.actor, cards)]


def _opt_ref(raw: str | None) -> str | None:
    return card_ref(raw) if raw is not None else None


def create_card(c: Call) -> Result:
    b = dict(c.body)
    project = b.pop("project")
    title = b.pop("title")
    b["parent"] = _opt_ref(b.get("parent"))
    b["depends_on"] = [card_ref(d) for d in b.get("depends_on", [])]
    card = c.board.create_card(
        c.actor, project_ref(project), title, idempotency_key=c.idempotency_key, **b
    )
    return 201, card.to_dict()


def get_card(c: Call) -> Result:
    return 200, access.detail(c.board, c.actor, _ref(c))


def edit_card(c: Call) -> Result:
    b = dict(c.body)
    if "parent" in b:
        b["parent"] = _opt_ref(b["parent"])
    return 200, c.board.edit(c.actor, _ref(c), **b).to_dict()


def move_card(c: Call) -> Result:
    b = c.body
    card = c.board.move(
        c.actor,
        _ref(c),
        b["to"],
        reason=b.get("reason"),
        question=b.get("question"),
        note=b.get("note"),
        idempotency_key=c.idempotency_key,
    )
    return 200, card.to_dict()


def claim_card(c: Call) -> Result:
    b = c.body
    card = c.board.claim(
        c.actor,
        _ref(c),
        holder=b.get("holder"),
        session_id=b.get("session_id"),
        idempotency_key=c.idempotency_key,
    )
    return 200, card.to_dict()


def heartbeat(c: Call) -> Result:
    return 200, c.board.heartbeat(c.actor, _ref(c)).to_dict()


def release(c: Call) -> Result:
    return 200, c.board.release(c.actor, _ref(c), note=c.body.get("note")).to_dict()


def list_comments(c: Call) -> Result:
    access.get(c.board, c.actor, _ref(c))
    after = query_int(c.query.get("after"), "after", 0, 0, MAX_ID)
    return 200, [x.to_dict() for x in c.board.comments(_ref(c), after=after)]


def add_comment(c: Call) -> Result:
    b = c.body
    return 201, c.board.comment(c.actor, _ref(c), b["body"], b.get("kind", "note")).to_dict()


def list_reports(c: Call) -> Result:
    access.get(c.board, c.actor, _ref(c))
    return 200, [r.to_dict() for r in c.board.reports(_ref(c))]


def add_report(c: Call) -> Result:
    b = c.body
    rep = c.board.report(
        c.actor,
        _ref(c),
        b["body"],
        commit=b.get("commit"),
        evidence=b.get("evidence", []),
        verdict=b.get("verdict"),
    )
    return 201, rep.to_dict()


def add_link(c: Call) -> Result:
    return 201, c.board.link(c.actor, _ref(c), card_ref(c.body["depends_on"])).to_dict()


def remove_link(c: Call) -> Result:
    return 200, c.board.unlink(c.actor, _ref(c), card_ref(c.path["dep"])).to_dict()


def candidates(c: Call) -> Result:
    q = c.query
    got = c.board.candidates(
        assignees=_many(q, "assignee"),
        include_unassigned=query_bool(q.get("include_unassigned"), "include_unassigned"),
        stale=query_bool(q.get("stale"), "stale"),
        project=query_text(q.get("project"), "project"),
        limit=query_int(q.get("limit"), "limit", 50, 1, 1000),
    )
    allowed = access.readable_ids(c.board, c.actor)
    return 200, [x.to_dict() for x in got if allowed is None or x.card.id in allowed]


def list_events(c: Call) -> Result:
    q = c.query
    run = query_int(q.get("run"), "run", 0, 0, MAX_ID)
    card = _opt_ref(query_text(q.get("card"), "card"))
    if card is not None:
        access.get(c.board, c.actor, card)
    events = c.board.events(
        query_int(q.get("after"), "after", 0, 0, MAX_ID),
        card=card,
        project=query_text(q.get("project"), "project"),
        run_id=run or None,
        limit=query_int(q.get("limit"), "limit", 100, 1, 1000),
    )
    return 200, [e.to_dict() for e in access.filter_events(c.board, c.actor, events)]


def status(c: Call) -> Result:
    _human(c.actor, "read the supervisor status")
    return 200, st.status(c.store)


def doctor(c: Call) -> Result:
    _human(c.actor, "read the doctor report")
    return 200, st.doctor(c.store)


def list_tokens(c: Call) -> Result:
    _human(c.actor, "list tokens")
    return 200, [t.to_dict() for t in c.tokens.list()]


def create_token(c: Call) -> Result:
    b = c.body
    card_id = epoch = None
    if b.get("card"):
        card = c.board.get(card_ref(b["card"]))
        card_id, epoch = card.id, None
    expires = None
    if b.get("expires_in_s"):
        expires = c.store.clock.now_ms() + int(b["expires_in_s"]) * 1000
    token, info = c.tokens.create(
        c.actor, b["name"], b.get("kind", "agent"), card_id=card_id, epoch=epoch, expires_at=expires
    )
    return 201, {**info.to_dict(), "token": token}


def revoke_token(c: Call) -> Result:
    tid = query_int(c.path["token_id"], "token_id", 0, 1, MAX_ID)
    return 200, c.tokens.revoke(c.actor, tid).to_dict()


P = "/api/v1"
Q = Param
OPS: tuple[Op, ...] = (
    Op("GET", P + "/me", "whoami", "The caller's identity", me, tag="auth"),
    Op("GET", P + "/projects", "listProjects", "List projects", list_projects),
    Op(
        "POST",
        P + "/projects",
        "addProject",
        "Add a project",
        add_project,
        S.PROJECT_CREATE,
        errors=(403, 409, 422),
        status=201,
    ),
    Op(
        "GET",
        P + "/projects/{project}",
        "getProject",
        "One project",
        get_project,
        params=(Q("project", "path", {"type": "string"}, True, "project key, name or id"),),
        errors=(404,),
    ),
    Op(
        "GET",
        P + "/cards",
        "listCards",
        "List cards (a card-scoped agent sees its card and dependencies)",
        list_cards,
        params=(
            Q("project", "query", {"type": "string"}),
            Q("status", "query", {"type": "string", "enum": S.STATUSES}, repeat=True),
            Q("assignee", "query", {"type": "string"}),
            Q("unassigned", "query", {"type": "boolean"}),
            Q("label", "query", {"type": "string"}),
            Q("parent", "query", {"type": "string"}),
            Q("run", "query", {"type": "integer", "minimum": 0}),
            Q("limit", "query", {"type": "integer", "minimum": 1, "maximum": 10000}),
        ),
        errors=(404, 422),
    ),
    Op(
        "POST",
        P + "/cards",
        "createCard",
        "Create a card",
        create_card,
        S.CARD_CREATE,
        params=(IDEM,),
        errors=(403, 404, 409, 422),
        status=201,
    ),
    Op(
        "GET",
        P + "/cards/{ref}",
        "getCard",
        "A card with comments, reports, deps",
        get_card,
        params=(REF,),
        errors=(403, 404),
    ),
    Op(
        "PATCH",
        P + "/cards/{ref}",
        "editCard",
        "Change fields of a card",
        edit_card,
        S.CARD_EDIT,
        params=(REF,),
        errors=(403, 404, 409, 422),
    ),
    Op(
        "POST",
        P + "/cards/{ref}/move",
        "moveCard",
        "Move a card to another status",
        move_card,
        S.MOVE,
        params=(REF, IDEM),
        errors=(403, 404, 409, 422),
    ),
    Op(
        "POST",
        P + "/cards/{ref}/claim",
        "claimCard",
        "Claim a card (compare-and-swap)",
        claim_card,
        S.CLAIM,
        params=(REF, IDEM),
        errors=(403, 404, 409),
    ),
    Op(
        "POST",
        P + "/cards/{ref}/heartbeat",
        "heartbeat",
        "Refresh a claim",
        heartbeat,
        params=(REF,),
        errors=(403, 404, 409),
    ),
    Op(
        "POST",
        P + "/cards/{ref}/release",
        "releaseCard",
        "Give a card back to todo",
        release,
        S.RELEASE,
        params=(REF,),
        errors=(403, 404, 409),
    ),
    Op(
        "GET",
        P + "/cards/{ref}/comments",
        "listComments",
        "Comments of a card",
        list_comments,
        params=(REF, Q("after", "query", {"type": "integer", "minimum": 0})),
        errors=(403, 404, 422),
    ),
    Op(
        "POST",
        P + "/cards/{ref}/comments",
        "addComment",
        "Comment (a human comment on an awaiting card releases it to todo)",
        add_comment,
        S.COMMENT,
        params=(REF,),
        errors=(403, 404, 422),
        status=201,
    ),
    Op(
        "GET",
        P + "/cards/{ref}/reports",
        "listReports",
        "Delivery reports of a card",
        list_reports,
        params=(REF,),
        errors=(403, 404),
    ),
    Op(
        "POST",
        P + "/cards/{ref}/reports",
        "addReport",
        "Write the current round's report",
        add_report,
        S.REPORT,
        params=(REF,),
        errors=(403, 404, 409, 422),
        status=201,
    ),
    Op(
        "POST",
        P + "/cards/{ref}/links",
        "addLink",
        "Make the card depend on another",
        add_link,
        S.LINK,
        params=(REF,),
        errors=(403, 404, 409),
        status=201,
    ),
    Op(
        "DELETE",
        P + "/cards/{ref}/links/{dep}",
        "removeLink",
        "Remove a dependency",
        remove_link,
        params=(REF, Q("dep", "path", {"type": "string"}, True)),
        errors=(403, 404),
    ),
    Op(
        "GET",
        P + "/candidates",
        "candidates",
        "Claimable cards, heaviest first",
        candidates,
        params=(
            Q("assignee", "query", {"type": "string"}, repeat=True),
            Q("include_unassigned", "query", {"type": "boolean"}),
            Q("stale", "query", {"type": "boolean"}),
            Q("project", "query", {"type": "string"}),
            Q("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}),
        ),
        errors=(404, 422),
    ),
    Op(
        "GET",
        P + "/events",
        "events",
        "The event log: JSON, or Server-Sent Events with Accept: text/event-stream",
        list_events,
        params=(
            Q("after", "query", {"type": "integer", "minimum": 0}),
            Q("card", "query", {"type": "string"}),
            Q("project", "query", {"type": "string"}),
            Q("run", "query", {"type": "integer", "minimum": 0}),
            Q("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}),
            Q("Last-Event-ID", "header", {"type": "string"}, False, "resume the stream"),
        ),
        errors=(403, 404, 422),
        tag="events",
    ),
    Op(
        "GET",
        P + "/status",
        "status",
        "Supervisor, pool, sessions and queue",
        status,
        errors=(403,),
        tag="ops",
    ),
    Op(
        "GET",
        P + "/doctor",
        "doctor",
        "The doctor report, when installed",
        doctor,
        errors=(403, 404),
        tag="ops",
    ),
    Op(
        "GET",
        P + "/tokens",
        "listTokens",
        "List tokens (humans)",
        list_tokens,
        errors=(403,),
        tag="auth",
    ),
    Op(
        "POST",
        P + "/tokens",
        "createToken",
        "Create a token; the plaintext is shown once",
        create_token,
        S.TOKEN_CREATE,
        errors=(403, 404, 422),
        status=201,
        tag="auth",
    ),
    Op(
        "DELETE",
        P + "/tokens/{token_id}",
        "revokeToken",
        "Revoke a token",
        revoke_token,
        params=(Q("token_id", "path", {"type": "integer", "minimum": 1}, True),),
        errors=(403, 404, 422),
        tag="auth",
    ),
)
