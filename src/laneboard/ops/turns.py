"""Operations on a card's agent turns and a person's decisions: the transcript (and
following it), stopping the running turn, a follow-up for the worker, answering a
question, rejecting with must-fix items, and the "needs you" inbox.

Each call imports the board lazily; this module stays cheap to load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneboard.errors import bad_input
from laneboard.ops import schemas as R
from laneboard.ops.cards import REF
from laneboard.ops.invoke import Call
from laneboard.ops.render import table
from laneboard.ops.spec import Caller, Op, Params, Route, p

S, INT, B = R.S, R.INT, R.B
ENTRY = R.obj({
    "id": INT, "turn": INT, "seq": INT, "at": S,
    "type": {"type": "string", "enum": ["prompt", "message", "tool_call", "tool_result",
                                        "command", "lb", "file_edit", "check", "error",
                                        "interrupt", "result", "info"]},
    "text": S, "tool": R.opt(S), "call_id": R.opt(S), "args": R.opt(S), "output": R.opt(S),
    "exit_code": R.opt(INT), "is_error": B, "paths": R.array(S),
})  # fmt: skip
TURN = R.obj({
    "id": INT, "round": INT, "agent_kind": S, "role": R.opt(S), "session": R.opt(S),
    "outcome": S, "error": R.opt(S), "input_tokens": INT, "output_tokens": INT,
    "cost_usd": R.opt(R.N), "duration_ms": INT, "started_at": R.TIME, "finished_at": R.TIME,
    "stop_requested_by": R.opt(S),
})  # fmt: skip
FOLLOWUP_PROPS = {"id": INT, "body": S, "author": S, "author_kind": S, "created_at": R.TIME,
                  "turn": R.opt(INT), "steered_at": R.opt(R.TIME)}  # fmt: skip
TRANSCRIPT = R.obj({
    "card": S, "turns": R.array(TURN), "running": R.opt(INT), "entries": R.array(ENTRY),
    "cursor": INT, "followups": R.array(R.obj(FOLLOWUP_PROPS)),
})  # fmt: skip
ACTION = R.obj({"label": S, "method": S, "path": S, "body": R.ANY_OBJECT, "input": R.opt(S)})
INBOX_ITEM = R.obj({
    "kind": {"type": "string", "enum": ["question", "acceptance", "landing", "hold", "schedule"]},
    "card": R.opt(S), "card_title": R.opt(S), "title": S, "detail": S, "since": R.TIME,
    "actions": R.array(ACTION),
})  # fmt: skip


# -- the transcript ------------------------------------------------------------------------
def transcript(c: Call, a: Params) -> Any:
    from laneboard.board import access

    access.get(c.board, c.actor, a["ref"])
    data = c.board.transcript(a["ref"], after=a["after"], turn=a.get("turn"), limit=a["limit"])
    c.notes["cursor"] = data["cursor"]
    return data


def entry_line(e: Mapping[str, Any]) -> str:
    head = f"[turn {e['turn']}] {e['type']}"
    if e.get("tool") and e["type"] in ("tool_call", "tool_result", "file_edit"):
        head += f" {e['tool']}"
    text = " ".join(str(e.get("text") or "").split())
    line = f"{head}: {text}" if text else head
    if e.get("exit_code") is not None:
        line += f" (exit {e['exit_code']})"
    if e["type"] == "tool_call" and e.get("args"):
        line += f" {e['args'][:300]}"
    return line


def transcript_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    lines = [entry_line(e) for e in d["entries"]]
    if d.get("running"):
        lines.append(f"(turn {d['running']} is running)")
    return "\n".join(lines) if lines else f"no transcript for {d['card']} yet"


def follow_transcript(runner: Any, op: Op, params: Params, cli: Params, as_json: bool) -> int:
    """``lb card transcript``: print the entries; with --follow, keep printing new ones
    (with --json, one JSON object per line) until no turn runs on the card."""
    import json
    import sys
    import time

    interval = float(cli.get("interval") or 0.5)
    if interval <= 0:
        raise bad_input("--interval must be positive", "e.g. --interval 0.5")
    data, notes = runner.call(op, params)
    if not cli.get("follow"):
        if as_json:
            sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(transcript_text(data, params, notes) + "\n")
        return 0
    from laneboard.errors import LaneboardError
    from laneboard.ops.board import Away

    away = Away(interval)
    while True:
        for e in data["entries"]:
            sys.stdout.write((json.dumps(e, sort_keys=True) if as_json else entry_line(e)) + "\n")
        sys.stdout.flush()
        # the entries are read with the turn's state: once none runs, they are all here
        if data["running"] is None and len(data["entries"]) < int(params.get("limit") or 500):
            return 0
        time.sleep(away.wait())
        try:
            got, notes = runner.call(op, {**params, "after": data["cursor"]})
        except LaneboardError as err:
            if err.code != "STORE_UNAVAILABLE":
                raise
            away.failed(err)  # the board is out of reach: the same cursor, tried again
            data = {**data, "entries": []}
            continue
        away.back()
        data = got


TRANSCRIPT_OP = Op(
    "card.transcript",
    ("card", "transcript"),
    "show a card's agent transcript, and follow it",
    "What the agents did on the card, turn by turn: the prompt laneboard sent, the "
    "agent's messages, each tool call with its arguments and a bounded view of its "
    "result, commands and lb calls, file edits, checks, errors and each turn's end with "
    "its usage, in one shape for every agent kind. --after skips the entries up to an "
    "entry id; --follow keeps printing new entries while a turn runs and stops when none "
    "does (with --json, one JSON object per line).",
    ("lb card transcript WEB-12", "lb card transcript WEB-12 --follow",
     "lb card transcript WEB-12 --after 340 --json"),
    (
        REF,
        p("after", "int", "only entries after this entry id", flag="--after", http="query",
          default=0, schema={"minimum": 0}),
        p("turn", "int", "only this turn", flag="--turn", http="query", schema={"minimum": 1}),
        p("limit", "int", "at most this many entries", flag="--limit", http="query",
          default=500, schema={"minimum": 1, "maximum": 1000}),
        p("follow", "bool", "keep printing new entries while a turn runs", flag="--follow",
          short="-f", cli_only=True),
        p("interval", "float", "seconds between polls with --follow", flag="--interval",
          default=0.5, cli_only=True),
    ),
    Caller.CARD_READER,
    "card",
    transcript,
    transcript_text,
    TRANSCRIPT,
    read_only=True,
    routes=(Route("GET", "/cards/{ref}/transcript", "cardTranscript", tag="agents"),),
    tool="card_transcript",
    cli_run=follow_transcript,
)  # fmt: skip


# -- acting on a running worker ---------------------------------------------------------------
STOP = Op(
    "card.stop",
    ("card", "stop"),
    "stop the agent turn running on a card",
    "Ask the supervisor running the card's turn to interrupt it. The turn ends as "
    "'stopped' and the card is held (blocked) for you; release the hold (lb card move "
    "CARD todo) to let the agent continue in the same session, or cancel the card.",
    ("lb card stop WEB-12",),
    (REF,),
    Caller.PERSON,
    "card",
    lambda c, a: c.board.stop_turn(c.actor, a["ref"]),
    lambda d, _a, _n: f"asked to stop turn {d['turn']} on {d['card']}",
    R.obj({"card": S, "turn": INT, "requested_by": S}),
    destructive=True,
    routes=(Route("POST", "/cards/{ref}/stop", "stopTurn", tag="agents"),),
    tool="stop_turn",
    what="stop turns",
)  # fmt: skip

TELL = Op(
    "card.tell",
    ("card", "tell"),
    "send the card's worker a follow-up (its running turn, or its next)",
    "Queue a message for the agent working the card. While a turn runs on an agent kind "
    "that can be steered (Codex), the runtime adds it to that running turn (the model "
    "reads it in its next request; `steered_at` is set); otherwise the next turn on the "
    "card (in the same session when it is still open) starts with it. The transcript "
    "lists each follow-up and the turn that carried it.",
    ('lb card tell WEB-12 "also update the changelog"',),
    (REF, p("body", "text", "the message", required=True, metavar="TEXT",
            schema={"maxLength": 20_000, "minLength": 1})),
    Caller.PERSON,
    "card",
    lambda c, a: c.board.tell(c.actor, a["ref"], a["body"]),
    lambda d, _a, _n: f"follow-up {d['id']} queued for {d['card']}'s worker",
    R.obj({"card": S, **FOLLOWUP_PROPS}),
    routes=(Route("POST", "/cards/{ref}/followups", "sendFollowup", 201, tag="agents"),),
    tool="send_followup",
    what="send follow-ups",
)  # fmt: skip


# -- a person's decisions ---------------------------------------------------------------------
ANSWER = Op(
    "card.answer",
    ("card", "answer"),
    "answer a card's open question",
    "Record your answer as an 'answer' comment and release the card to todo: an "
    "awaiting card, or an in_progress card whose agent waits on its question (lb card "
    "wait sees the answer and the agent continues in the same session).",
    ('lb card answer WEB-12 "use port 8080"',),
    (REF, p("body", "text", "your answer", required=True, metavar="TEXT",
            schema={"maxLength": 100_000, "minLength": 1})),
    Caller.PERSON,
    "card",
    lambda c, a: c.board.answer(c.actor, a["ref"], a["body"]).to_dict(),
    lambda d, _a, _n: f"answered {d['ref']}; it is {d['status']}",
    R.CARD,
    routes=(Route("POST", "/cards/{ref}/answer", "answerQuestion"),),
    tool="answer_question",
    what="answer questions",
)  # fmt: skip

REJECT = Op(
    "card.reject",
    ("card", "reject"),
    "reject a delivery waiting for your acceptance, naming what must be fixed",
    "For an in_review card whose acceptance mode is human: each --must-fix item joins "
    "the acceptance list as R<round>.<n>, a 'change' comment lists them, and the card "
    "returns to todo for its next delivery round. Approve with lb card move CARD done.",
    ('lb card reject WEB-12 --must-fix "the login form loses its input on error"',),
    (
        REF,
        p("must_fix", "texts", "an item that must be fixed (repeatable)", flag="--must-fix",
          required=True, schema={"minItems": 1, "maxItems": 30,
                                 "items": {"type": "string", "minLength": 1, "maxLength": 500}}),
        p("note", "text", "a note beside the items", flag="--note",
          schema={"maxLength": 20_000}),
    ),
    Caller.PERSON,
    "card",
    lambda c, a: c.board.reject(c.actor, a["ref"], a["must_fix"], a.get("note")).to_dict(),
    lambda d, _a, _n: f"rejected; {d['ref']} is {d['status']} for round {d['delivery_round']}",
    R.CARD,
    routes=(Route("POST", "/cards/{ref}/reject", "rejectDelivery"),),
    tool="reject_delivery",
    what="reject deliveries",
)  # fmt: skip


def inbox(c: Call, a: Params) -> Any:
    from laneboard.board.inbox import KINDS, inbox

    kinds = tuple(a.get("kind") or KINDS)
    return inbox(c.board, kinds)


def inbox_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    if not d:
        return "nothing needs you"
    rows = []
    for it in d:
        act = it["actions"][0]
        verb = " / ".join(x["label"] for x in it["actions"])
        detail = " ".join(it["detail"].split())[:80]
        rows.append([it["kind"], it["card"] or "-", it["title"], detail,
                     f"{verb}: {act['method']} {act['path']}"])  # fmt: skip
    return table(rows, ["KIND", "CARD", "WHAT", "DETAIL", "ACTION"])


INBOX = Op(
    "inbox",
    ("inbox",),
    "list what needs you, each with its action",
    "Open questions, cards waiting for human acceptance, landings that were refused, "
    "held cards and schedules whose last firing failed, each with the action that "
    "settles it (a REST call: method, path, body, and the field you fill in).",
    ("lb inbox", "lb inbox --kind question --json"),
    (p("kind", "texts", "only these kinds (repeatable)", flag="--kind", http="query",
       schema={"items": {"type": "string",
                         "enum": ["question", "acceptance", "landing", "hold", "schedule"]}}),),
    Caller.PERSON,
    "board",
    inbox,
    inbox_text,
    R.array(INBOX_ITEM),
    read_only=True,
    routes=(Route("GET", "/inbox", "inbox", tag="agents"),),
    tool="inbox",
    tool_key="items",
    what="read the inbox",
)  # fmt: skip

OPS = (TRANSCRIPT_OP, STOP, TELL, ANSWER, REJECT, INBOX)
