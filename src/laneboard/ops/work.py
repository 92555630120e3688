"""Operations on the work of a card: move, claim, heartbeat, release, comment, report,
deliver, ask and wait.

Each call imports the board lazily; this module stays cheap to load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneboard.errors import bad_input
from laneboard.ops import schemas as R
from laneboard.ops.cards import KEY, REF
from laneboard.ops.invoke import Call
from laneboard.ops.render import comment_line
from laneboard.ops.spec import Caller, Op, Params, Route, p

NOTE = p("note", "text", "a note comment written with the move", flag="--note",
         schema={"maxLength": 20_000})  # fmt: skip
BODY_LIMIT = {"maxLength": 200_000, "minLength": 1}
EVIDENCE = p(
    "evidence",
    "evidence",
    "a check you ran, as EXIT:COMMAND, e.g. '0:pytest -q' (repeatable)",
    flag="--evidence",
)


def _card(d: Any, verb: str) -> str:
    return f"{d['ref']} {verb}"


# -- move ---------------------------------------------------------------------------------
def move(c: Call, a: Params) -> Any:
    card = c.board.move(
        c.actor,
        a["ref"],
        a["to"],
        reason=a.get("reason"),
        question=a.get("question"),
        note=a.get("note"),
        idempotency_key=a.get("idempotency_key"),
    )
    return card.to_dict()


MOVE = Op(
    "card.move",
    ("card", "move"),
    "move a card to another status",
    "Move a card along the status machine (illegal moves are ILLEGAL_TRANSITION). "
    "awaiting needs --reason E1..E5 and --question; in_review needs a report for the "
    "current round; done follows the card's acceptance mode. An agent moves only its own "
    "card, as those rules allow.",
    (
        "lb card move WEB-12 in_review",
        'lb card move WEB-12 awaiting --reason E2 --question "Which port?"',
        'lb card move WEB-12 blocked --reason "waiting on the API team"',
    ),
    (
        REF,
        p("to", "text", "the new status", required=True, metavar="STATUS", choices=tuple(R.STATUSES)),
        p("reason", "text", "E1-E5 for awaiting; free text for blocked", flag="--reason",
          schema={"maxLength": 200}),
        p("question", "text", "the question, for awaiting", flag="--question",
          schema={"maxLength": 20_000}),
        NOTE,
        KEY,
    ),
    Caller.OWN_CARD,
    "own card",
    move,
    lambda d, _a, _n: f"{d['ref']} is {d['status']}",
    R.CARD,
    destructive=True,
    routes=(Route("POST", "/cards/{ref}/move", "moveCard"),),
    tool="move_card",
    what="move cards",
)  # fmt: skip


# -- claim, heartbeat, release --------------------------------------------------------------
def claim(c: Call, a: Params) -> Any:
    ref = a.get("ref")
    if a.get("next"):
        if ref is not None or a.get("idempotency_key") is not None:
            raise bad_input(
                "--next picks the card itself; it takes no CARD and no --key",
                "drop the card reference, or drop --next",
            )
        card = c.board.claim_next(
            c.actor,
            assignees=a.get("assignees") or [],
            include_unassigned=bool(a.get("include_unassigned")),
            project=a.get("project"),
            holder=a.get("holder"),
            session_id=a.get("session_id"),
        )
    else:
        if ref is None:
            raise bad_input("which card? none was given", "pass CARD, or --next to pick one")
        if a.get("assignees") or a.get("include_unassigned") or a.get("project"):
            raise bad_input(
                "--assignee, --include-unassigned and --project only go with --next",
                "add --next, or drop them",
            )
        card = c.board.claim(
            c.actor,
            ref,
            holder=a.get("holder"),
            session_id=a.get("session_id"),
            idempotency_key=a.get("idempotency_key"),
        )
    if c.renew:  # a re-claim: the caller's credential file follows the new epoch
        from laneboard.board.questions import renewed_token

        c.token = renewed_token(c.store, c.actor, card)
    return card.to_dict()


CLAIM = Op(
    "card.claim",
    ("card", "claim"),
    "claim a card",
    "Take a card atomically: exactly one of any number of racing claimants wins, the "
    "others get CLAIM_CONFLICT. --next claims the heaviest ready card of the claim set "
    "instead. Each claim bumps the card's claim epoch.",
    ("lb card claim WEB-12", "lb card claim --next --assignee worker --include-unassigned"),
    (
        REF._replace(required=False, help="the card (or use --next)"),
        p("next", "bool", "claim the heaviest ready card of the claim set", flag="--next"),
        p("assignees", "texts", "with --next: the claim set (repeatable; default: your name)",
          flag="--assignee"),
        p("include_unassigned", "bool", "with --next: also unassigned cards",
          flag="--include-unassigned"),
        p("project", "project", "with --next: only this project", flag="--project"),
        p("holder", "text", "claim under this name (people only; default: you)", flag="--holder",
          schema={"maxLength": 200, "minLength": 1}),
        p("session_id", "text", "the agent session id", flag="--session",
          schema={"maxLength": 200, "minLength": 1}),
        KEY,
    ),
    Caller.OWN_CARD,
    "own card",
    claim,
    lambda d, _a, _n: f"{d['ref']} claimed by {d['claim']['holder']} (epoch {d['claim']['epoch']})",
    R.CARD,
    routes=(
        Route("POST", "/cards/{ref}/claim", "claimCard"),
        Route("POST", "/claims", "claimNext", fixed={"next": True}),
    ),
    tool="claim_card",
    what="claim cards",
)  # fmt: skip


def heartbeat(c: Call, a: Params) -> Any:
    return c.board.heartbeat(c.actor, a["ref"]).to_dict()


HEARTBEAT = Op(
    "card.heartbeat",
    ("card", "heartbeat"),
    "refresh your claim",
    "Record that the claimant is still working: a card whose heartbeat is older than 10 "
    "minutes may be re-claimed by its holder, older than 6 hours by anyone.",
    ("lb card heartbeat WEB-12",),
    (REF,),
    Caller.OWN_CARD,
    "own card",
    heartbeat,
    lambda d, _a, _n: _card(d, "heartbeat recorded"),
    R.CARD,
    routes=(Route("POST", "/cards/{ref}/heartbeat", "heartbeat"),),
    tool="heartbeat",
    what="heartbeat cards",
)


def release(c: Call, a: Params) -> Any:
    return c.board.release(c.actor, a["ref"], note=a.get("note")).to_dict()


RELEASE = Op(
    "card.release",
    ("card", "release"),
    "give a claimed card back",
    "Move an in_progress card back to todo, with an optional note, so another claimant "
    "can take it.",
    ('lb card release WEB-12 --note "blocked on the schema change"',),
    (REF, p("note", "text", "why it is given back", flag="--note", schema={"maxLength": 20_000})),
    Caller.OWN_CARD,
    "own card",
    release,
    lambda d, _a, _n: f"{d['ref']} released to {d['status']}",
    R.CARD,
    routes=(Route("POST", "/cards/{ref}/release", "releaseCard"),),
    tool="release_card",
    what="release cards",
)


# -- comments and reports -----------------------------------------------------------------
def comment(c: Call, a: Params) -> Any:
    return c.board.comment(c.actor, a["ref"], a["body"], a["kind"]).to_dict()


COMMENT = Op(
    "card.comment",
    ("card", "comment"),
    "comment on a card",
    "Add a comment of a kind (note, question, answer, decision, confirm, change, "
    "finding). A person's comment on an awaiting card releases it to todo.",
    ('lb card comment WEB-12 "looks good to me"', 'lb card comment WEB-12 "port 8080" --kind answer'),
    (
        REF,
        p("body", "text", "the comment", required=True, metavar="BODY",
          schema={"maxLength": 100_000, "minLength": 1}),
        p("kind", "text", "the comment's kind", flag="--kind", default="note",
          choices=tuple(R.COMMENT_KINDS)),
    ),
    Caller.OWN_CARD,
    "own card",
    comment,
    lambda d, _a, _n: f"comment {d['id']} added",
    R.COMMENT,
    routes=(Route("POST", "/cards/{ref}/comments", "addComment", 201),),
    tool="comment",
    what="comment on cards",
)  # fmt: skip


def comments(c: Call, a: Params) -> Any:
    from laneboard.board import access

    return [x.to_dict() for x in access.comments(c.board, c.actor, a["ref"], after=a["after"])]


COMMENTS = Op(
    "card.comments",
    ("card", "comments"),
    "list a card's comments",
    "The comments of a card, oldest first; --after skips those up to a comment id.",
    ("lb card comments WEB-12", "lb card comments WEB-12 --after 40 --json"),
    (REF, p("after", "int", "only comments after this id", flag="--after", http="query",
            default=0, schema={"minimum": 0})),
    Caller.CARD_READER,
    "card",
    comments,
    lambda d, _a, _n: "\n".join(comment_line(x) for x in d) or "(none)",
    R.array(R.COMMENT),
    read_only=True,
    routes=(Route("GET", "/cards/{ref}/comments", "listComments"),),
    tool="list_comments",
    tool_key="comments",
)  # fmt: skip


def report(c: Call, a: Params) -> Any:
    rep = c.board.report(
        c.actor,
        a["ref"],
        a["body"],
        commit=a.get("commit"),
        evidence=a.get("evidence") or [],
        verdict=a.get("verdict"),
    )
    return rep.to_dict()


REPORT_BODY = p("body", "text", "the report text ('-' reads standard input)", flag="--body",
                required=True, stdin=True, schema=BODY_LIMIT)  # fmt: skip
COMMIT = p("commit", "text", "the commit the report is anchored to", flag="--commit",
           schema={"maxLength": 200})  # fmt: skip

REPORT = Op(
    "card.report",
    ("card", "report"),
    "write the delivery report for the current round",
    "Record what was delivered in this round: a body, the commit it is anchored to and "
    "the checks run (evidence). A review card's report carries the verdict. One report "
    "per round; a second one replaces the first.",
    (
        "lb card report WEB-12 --body 'done: the form validates' --evidence '0:pytest -q'",
        "lb card report WEB-12 --body - < report.md",
    ),
    (
        REF,
        REPORT_BODY,
        COMMIT,
        EVIDENCE,
        p("verdict", "text", "a reviewer's verdict", flag="--verdict",
          choices=("APPROVE", "REJECT")),
    ),
    Caller.OWN_CARD,
    "own card",
    report,
    lambda d, _a, _n: f"report for round {d['round']} recorded",
    R.REPORT,
    routes=(Route("POST", "/cards/{ref}/reports", "addReport", 201),),
    tool="report",
    what="report on cards",
)  # fmt: skip


def reports(c: Call, a: Params) -> Any:
    from laneboard.board import access

    return [r.to_dict() for r in access.reports(c.board, c.actor, a["ref"])]


def reports_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    lines = []
    for r in d:
        lines.append(f"round {r['round']} by {r['author']} ({r['author_kind']}) {r['created_at']}"
                     + (f" at {r['commit']}" if r["commit"] else ""))  # fmt: skip
        lines += [f"  {e['exit_code']:>3}  {e['command']}" for e in r["evidence"]]
    return "\n".join(lines) or "(none)"


REPORTS = Op(
    "card.reports",
    ("card", "reports"),
    "list a card's delivery reports",
    "The delivery reports of a card, one per round, with their evidence.",
    ("lb card reports WEB-12",),
    (REF,),
    Caller.CARD_READER,
    "card",
    reports,
    reports_text,
    R.array(R.REPORT),
    read_only=True,
    routes=(Route("GET", "/cards/{ref}/reports", "listReports"),),
    tool="list_reports",
    tool_key="reports",
)


def deliver(c: Call, a: Params) -> Any:
    rep, card = c.board.deliver(
        c.actor, a["ref"], a["body"], commit=a.get("commit"), evidence=a.get("evidence") or []
    )
    return {"report": rep.to_dict(), "card": card.to_dict()}


DELIVER = Op(
    "card.deliver",
    ("card", "deliver"),
    "report and move the card to in_review",
    "A worker's delivery in one write: the report for the current round and the move to "
    "in_review (which verifies the lane first: scope and checks). A refused delivery "
    "writes nothing.",
    ("lb card deliver WEB-12 --body 'the form validates' --commit HEAD --evidence '0:pytest -q'",),
    (REF, REPORT_BODY, COMMIT, EVIDENCE),
    Caller.OWN_CARD,
    "own card",
    deliver,
    lambda d, _a, _n: (
        f"{d['card']['ref']} delivered round {d['report']['round']}: {d['card']['status']}"
    ),
    R.DELIVERED,
    routes=(Route("POST", "/cards/{ref}/deliver", "deliverCard"),),
    tool="deliver",
    what="deliver cards",
)


# -- questions ------------------------------------------------------------------------------
def ask(c: Call, a: Params) -> Any:
    from laneboard.board.questions import ask as ask_

    q = ask_(c.board, c.actor, a["ref"], a["text"])
    return {
        **q.to_dict(),
        "question_id": q.id,
        "wait": f"lb card wait {a['ref']} --question {q.id}",
    }


ASK = Op(
    "card.ask",
    ("card", "ask"),
    "ask a blocking question on your in_progress card",
    "Write a question comment on the card you hold; the card stays in_progress. Then hold "
    "the turn with lb card wait until a person or the director answers.",
    ('lb card ask WEB-12 "Q1: keep the old endpoint? Q2: which port?"',),
    (
        REF,
        p("text", "text", "the question (one decision round: Q1..Qn)", required=True,
          metavar="QUESTION", schema={"maxLength": 100_000, "minLength": 1}),
    ),
    Caller.OWN_CARD,
    "own card",
    ask,
    lambda d, _a, _n: f"question {d['id']} asked; hold with: {d['wait']}",
    R.ASKED,
    routes=(Route("POST", "/cards/{ref}/questions", "askQuestion", 201),),
    tool="ask",
    what="ask questions",
)  # fmt: skip


def wait(c: Call, a: Params) -> Any:
    from laneboard.board import access
    from laneboard.board.questions import wait as wait_

    access.get(c.board, c.actor, a["ref"])
    res = wait_(c.board, c.actor, a["ref"], a["question_id"], a["timeout_s"])
    return res.to_dict()


def wait_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    head = f"{d['outcome']}: {d['card']} is {d['status'] or '?'}"
    if d["reason"]:
        head += f" ({d['reason']})"
    if d["error"]:
        head += f" — {d['error']}"
    return head + (f"\n{d['answer']}" if d["answer"] else "")


WAIT = Op(
    "card.wait",
    ("card", "wait"),
    "hold until a question is answered, escalated or the card moves",
    "Wait, bounded, for the question to settle: answered (the card was released to todo; "
    "re-claim it and go on), escalated (it went to awaiting), moved, or timeout (re-invoke "
    "once). The claim's heartbeat is kept while waiting.",
    ("lb card wait WEB-12 --question 41", "lb card wait WEB-12 --question 41 --timeout 300 --json"),
    (
        REF,
        p("question_id", "int", "the id printed by lb card ask", flag="--question", required=True,
          http="path", schema={"minimum": 1}),
        p("timeout_s", "float", "seconds to wait, at most 540", flag="--timeout", default=110.0,
          http="query"),
    ),
    Caller.OWN_CARD,
    "own card",
    wait,
    wait_text,
    R.WAITED,
    read_only=True,
    routes=(Route("GET", "/cards/{ref}/questions/{question_id}/wait", "waitQuestion"),),
    tool="wait",
    exit_code=lambda d: 1 if d["outcome"] == "error" else 0,
    what="wait on questions",
)  # fmt: skip


# -- holds --------------------------------------------------------------------------------
HOLD_REASONS = ("configuration", "resource", "decision", "boundary_violation",
                "outside_allowed_paths", "rework", "rollup")  # fmt: skip
RELEASED = R.obj({"ref": R.S, "cycle": R.S, "fix": R.opt(R.S), "released": R.B,
                  "skipped": R.opt(R.S)})  # fmt: skip


def release_holds(c: Call, a: Params) -> Any:
    return c.board.release_holds(c.actor, a["reason"], project=a.get("project"))


def released_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    if not d:
        return "no card is held for that reason: nothing released"
    lines = []
    for item in d:
        what = "released" if item["released"] else f"skipped: {item['skipped']}"
        fix = f" (fix: {item['fix']})" if item["fix"] else ""
        lines.append(f"{item['ref']} {what} — held at {item['cycle']}{fix}")
    return "\n".join(lines)


RELEASE_HOLDS = Op(
    "holds.release",
    ("holds", "release"),
    "release every card held for one reason",
    "Once the cause is fixed (a configuration hold names its fix), move every card held "
    "for that reason back to todo: each card in its own transaction with its event. A card "
    "that moved meanwhile is skipped. People only.",
    ("lb holds release", "lb holds release --reason resource --project WEB"),
    (
        p("reason", "text", "the hold reason to release", flag="--reason",
          default="configuration", choices=HOLD_REASONS),
        p("project", "project", "only this project", flag="--project"),
    ),
    Caller.PERSON,
    "board",
    release_holds,
    released_text,
    R.array(RELEASED),
    destructive=True,
    routes=(Route("POST", "/holds/release", "releaseHolds"),),
    tool="release_holds",
    tool_key="cards",
    what="release holds",
)  # fmt: skip


OPS = (
    MOVE,
    CLAIM,
    HEARTBEAT,
    RELEASE,
    COMMENT,
    COMMENTS,
    REPORT,
    REPORTS,
    DELIVER,
    ASK,
    WAIT,
    RELEASE_HOLDS,
)
