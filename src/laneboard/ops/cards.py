"""Operations on cards as records: add, get, list, edit, link, candidates.

Each call imports the board lazily; this module stays cheap to load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneboard.ops import schemas as R
from laneboard.ops.invoke import Call
from laneboard.ops.render import card_text, cards_table, table
from laneboard.ops.spec import Caller, Op, Params, Route, p
from laneboard.ops.validate import card_ref

REF = p(
    "ref",
    "ref",
    "the card: a reference like WEB-12, or its id",
    required=True,
    http="path",
    metavar="CARD",
)
KEY = p(
    "idempotency_key",
    "text",
    "idempotency key: a repeat with the same key returns the first result",
    flag="--key",
    http="header",
    wire="Idempotency-Key",
)
REFS = {"items": {"type": "string", "maxLength": 40, "minLength": 1}}
PRIORITY = {"description": "0 highest … 3 lowest"}


def _refs(values: list[str] | None) -> list[str]:
    return [card_ref(v) for v in values or []]


# -- add --------------------------------------------------------------------------------
def add(c: Call, a: Params) -> Any:
    key = a.get("idempotency_key")
    existing = c.board.card_by_key(key) if key is not None else None
    card = c.board.create_card(
        c.actor,
        a["project"],
        a["title"],
        description=a.get("description") or "",
        kind=a["kind"],
        parent=a.get("parent"),
        assignee=a.get("assignee"),
        priority=a["priority"],
        labels=a.get("labels") or [],
        acceptance=a.get("acceptance") or [],
        acceptance_mode=a.get("acceptance_mode"),
        checks=a.get("checks") or [],
        allowed_paths=a.get("allowed_paths"),
        status=a["status"],
        depends_on=_refs(a.get("depends_on")),
        meta=a.get("meta"),
        idempotency_key=key,
        run_id=a.get("run"),
    )
    if existing is not None and existing.id == card.id:
        c.notes["existing"] = True
    return card.to_dict()


def add_text(d: Any, a: Params, notes: Mapping[str, Any]) -> str:
    if notes.get("existing"):
        return (
            f"{d['ref']} already has key {a.get('idempotency_key')}: "
            f"returned the existing card ({d['status']}), nothing created"
        )
    return f"{d['ref']} created ({d['status']})"


ADD = Op(
    "card.add",
    ("card", "add"),
    "create a card",
    "Create a card in a project, in todo (or backlog), optionally in one of the "
    "project's runs (--run). A repeat with the same --key creates nothing and returns "
    "the card the key first created.",
    (
        'lb card add WEB "Fix login" -d "the form 500s" --accept "login works" --check "pytest -q"',
        'lb card add WEB "Nightly report" --key nightly-2026-01-01 --json',
        'lb card add WEB "Export as CSV" --run 3',
    ),
    (
        p("project", "project", "project key or name", required=True, metavar="PROJECT"),
        p("title", "text", "one-line title", required=True, metavar="TITLE"),
        p("description", "text", "the card's description", flag="--description", short="-d",
          default="", schema={"maxLength": 200_000}),
        p("kind", "text", "task or epic", flag="--kind", default="task", choices=("task", "epic")),
        p("parent", "ref", "the epic this card belongs to", flag="--parent"),
        p("assignee", "text", "role or agent name (default: unassigned)", flag="--assignee",
          schema={"maxLength": 200}),
        p("priority", "int", "0 highest … 3 lowest", flag="--priority", short="-p", default=2,
          schema=PRIORITY),
        p("labels", "texts", "a label (repeatable)", flag="--label"),
        p("acceptance", "criteria", "an acceptance criterion (repeatable)", flag="--accept"),
        p("acceptance_mode", "text", "who may close it: off, auto (a reviewer's APPROVE) or "
          "human (default: the project's acceptance_mode, else auto)", flag="--acceptance-mode",
          choices=("off", "auto", "human")),
        p("checks", "texts", "a command that must pass before acceptance (repeatable)",
          flag="--check", schema={"items": {"type": "string", "minLength": 1, "maxLength": 5000}}),
        p("allowed_paths", "texts", "a repository-relative path the card may change (repeatable; "
          "default: the project's allowed_paths, else the whole repository)",
          flag="--allow-path", schema={"items": {"type": "string", "minLength": 1, "maxLength": 1000},
                                       "maxItems": 200}),
        p("status", "text", "where it starts", flag="--status", default="todo",
          choices=("todo", "backlog")),
        p("depends_on", "texts", "a card this one waits for (repeatable)", flag="--depends-on",
          schema=REFS),
        p("meta", "object", "a JSON object of extra fields", flag="--meta"),
        p("run", "int", "the run (of the same project) the card joins", flag="--run",
          schema={"minimum": 1}),
        KEY,
    ),
    Caller.PERSON,
    "board",
    add,
    add_text,
    R.CARD,
    routes=(Route("POST", "/cards", "createCard", 201),),
    tool="create_card",
    what="create cards",
)  # fmt: skip


# -- get / list -------------------------------------------------------------------------
def get(c: Call, a: Params) -> Any:
    from laneboard.board import access

    return access.detail(c.board, c.actor, a["ref"])


GET = Op(
    "card.get",
    ("card", "get"),
    "show one card",
    "One card with its description, acceptance criteria, checks, comments, delivery "
    "reports, dependencies and agent turns. An agent credential reads its own card, the "
    "cards it depends on and its epic.",
    ("lb card get WEB-12", "lb card get WEB-12 --json"),
    (REF,),
    Caller.CARD_READER,
    "card",
    get,
    lambda d, _a, _n: card_text(d),
    R.CARD_DETAIL,
    read_only=True,
    routes=(Route("GET", "/cards/{ref}", "getCard"),),
    tool="get_card",
)


def list_cards(c: Call, a: Params) -> Any:
    from laneboard.board import access

    return access.list_card_dicts(
        c.board,
        c.actor,
        project=a.get("project"),
        statuses=a.get("statuses") or [],
        assignee=a.get("assignee"),
        unassigned=bool(a.get("unassigned")),
        label=a.get("label"),
        parent=a.get("parent"),
        run_id=a.get("run"),
        text=a.get("search"),
        limit=a["limit"],
    )


LIST = Op(
    "card.list",
    ("card", "list"),
    "list cards",
    "Cards on the board, oldest first, filtered by project, status, assignee, label, "
    "epic, run or text (in the title, the description or a comment). An agent credential "
    "sees only the cards it may read.",
    ("lb card list --project WEB --status todo --status in_progress", "lb card list --unassigned",
     "lb card list --search 'login page'"),
    (
        p("project", "project", "only this project", flag="--project", http="query"),
        p("statuses", "texts", "only this status (repeatable)", flag="--status", http="query",
          wire="status", choices=tuple(R.STATUSES)),
        p("assignee", "text", "only cards assigned to this name", flag="--assignee", http="query"),
        p("unassigned", "bool", "only unassigned cards", flag="--unassigned", http="query"),
        p("label", "text", "only cards with this label", flag="--label", http="query"),
        p("parent", "ref", "only the children of this epic", flag="--parent", http="query"),
        p("run", "int", "only cards of this run", flag="--run", http="query",
          schema={"minimum": 1}),
        p("search", "text", "only cards whose title, description or a comment contains this "
          "text (any case)", flag="--search", http="query"),
        p("limit", "int", "at most this many", flag="--limit", http="query", default=500,
          schema={"minimum": 1, "maximum": 10_000}),
    ),
    Caller.CARD_READER,
    "board",
    list_cards,
    lambda d, _a, _n: cards_table(d),
    R.array(R.CARD),
    read_only=True,
    routes=(Route("GET", "/cards", "listCards"),),
    tool="list_cards",
    tool_key="cards",
)  # fmt: skip


# -- edit ---------------------------------------------------------------------------------
EDIT_FIELDS = (
    "title",
    "description",
    "kind",
    "assignee",
    "priority",
    "labels",
    "acceptance",
    "acceptance_mode",
    "checks",
    "allowed_paths",
    "parent",
    "meta",
)


def edit(c: Call, a: Params) -> Any:
    changes = {k: a[k] for k in EDIT_FIELDS if k in a}
    if "parent" in changes and not changes["parent"]:
        changes["parent"] = None
    return c.board.edit(c.actor, a["ref"], **changes).to_dict()


EDIT = Op(
    "card.edit",
    ("card", "edit"),
    "change fields of a card",
    "Change the given fields and nothing else. A list option replaces the whole list; "
    "--meta is merged into the card's meta. An agent edits only its own card, and never "
    "its acceptance, checks, scope, assignee or parent.",
    ('lb card edit WEB-12 --title "Fix the login form" -p 1', "lb card edit WEB-12 --assignee ''"),
    (
        REF,
        p("title", "text", "a new title", flag="--title"),
        p("description", "text", "a new description", flag="--description", short="-d",
          schema={"maxLength": 200_000}),
        p("kind", "text", "task or epic", flag="--kind", choices=("task", "epic")),
        p("assignee", "text", "a new assignee ('' to unassign)", flag="--assignee",
          schema={"maxLength": 200}),
        p("priority", "int", "0 highest … 3 lowest", flag="--priority", short="-p",
          schema=PRIORITY),
        p("labels", "texts", "the labels (repeatable; replaces them)", flag="--label"),
        p("acceptance", "criteria", "the acceptance criteria (repeatable; replaces them)",
          flag="--accept"),
        p("acceptance_mode", "text", "off, auto or human", flag="--acceptance-mode",
          choices=("off", "auto", "human")),
        p("checks", "texts", "the checks (repeatable; replaces them)", flag="--check",
          schema={"items": {"type": "string", "minLength": 1, "maxLength": 5000}}),
        p("allowed_paths", "texts", "the allowed paths (repeatable; replaces them)",
          flag="--allow-path",
          schema={"items": {"type": "string", "minLength": 1, "maxLength": 1000}, "maxItems": 200}),
        p("parent", "text", "the epic ('' to detach)", flag="--parent", schema={"maxLength": 40}),
        p("meta", "object", "a JSON object merged into meta", flag="--meta"),
    ),
    Caller.OWN_CARD,
    "own card",
    edit,
    lambda d, _a, _n: f"{d['ref']} updated",
    R.CARD,
    destructive=True,
    routes=(Route("PATCH", "/cards/{ref}", "editCard"),),
    tool="edit_card",
    what="edit cards",
)  # fmt: skip


# -- links --------------------------------------------------------------------------------
def link(c: Call, a: Params) -> Any:
    if a.get("remove"):
        return c.board.unlink(c.actor, a["ref"], a["depends_on"]).to_dict()
    return c.board.link(c.actor, a["ref"], a["depends_on"]).to_dict()


LINK = Op(
    "card.link",
    ("card", "link"),
    "make a card depend on another",
    "CARD waits for DEPENDS_ON: it is ready only once DEPENDS_ON is done. A link that "
    "would close a cycle is refused (DEPENDENCY_CYCLE). --remove deletes the link.",
    ("lb card link WEB-3 WEB-2", "lb card link WEB-3 WEB-2 --remove"),
    (
        REF,
        p("depends_on", "ref", "the card it waits for", required=True, metavar="DEPENDS_ON"),
        p("remove", "bool", "remove the dependency instead", flag="--remove"),
    ),
    Caller.PERSON,
    "board",
    link,
    lambda d, _a, _n: f"{d['ref']} depends on {len(d['depends_on'])} card(s)",
    R.CARD,
    destructive=True,
    routes=(
        Route("POST", "/cards/{ref}/links", "addLink", 201),
        Route("DELETE", "/cards/{ref}/links/{depends_on}", "removeLink", fixed={"remove": True}),
    ),
    tool="link_cards",
    what="link cards",
)


# -- candidates ---------------------------------------------------------------------------
def candidates(c: Call, a: Params) -> Any:
    from laneboard.board import access

    got = access.candidates(
        c.board,
        c.actor,
        assignees=a.get("assignees") or [],
        include_unassigned=bool(a.get("include_unassigned")),
        stale=bool(a.get("stale")),
        project=a.get("project"),
        limit=a["limit"],
    )
    return [x.to_dict() for x in got]


def candidates_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    rows = [
        [x["ref"], x["status"], f"p{x['priority']}", f"{x['weight']:.1f}", str(x["fanout"]),
         f"{x['sla_row']} +{x['sla_pressure']:.1f}" if x["sla_pressure"] else "",
         "stale" if x["stale"] else "", x["title"]]
        for x in d
    ]  # fmt: skip
    return table(rows, ["CARD", "STATUS", "PRI", "WEIGHT", "FANOUT", "SLA", "", "TITLE"])


CANDIDATES = Op(
    "card.candidates",
    ("card", "candidates"),
    "list claimable cards, heaviest first",
    "Ready cards (todo, every dependency done) of the claim set, ordered by weight: "
    "priority, time waiting, age, how many cards wait on them and SLA pressure (a review "
    "card nearing or past its review_aging limit, a stale claim). --stale adds "
    "in_progress cards whose heartbeat is older than 30 minutes.",
    ("lb card candidates --assignee worker --include-unassigned", "lb card candidates --stale"),
    (
        p("assignees", "texts", "a name of the claim set (repeatable)", flag="--assignee",
          http="query", wire="assignee"),
        p("include_unassigned", "bool", "also unassigned cards", flag="--include-unassigned",
          http="query"),
        p("stale", "bool", "add in_progress cards with stale heartbeats", flag="--stale",
          http="query"),
        p("project", "project", "only this project", flag="--project", http="query"),
        p("limit", "int", "at most this many", flag="--limit", http="query", default=50,
          schema={"minimum": 1, "maximum": 1000}),
    ),
    Caller.CARD_READER,
    "board",
    candidates,
    candidates_text,
    R.array(R.CANDIDATE),
    read_only=True,
    routes=(Route("GET", "/candidates", "candidates"),),
    tool="candidates",
    tool_key="candidates",
)  # fmt: skip

OPS = (ADD, GET, LIST, EDIT, LINK, CANDIDATES)
