"""Operations after a card is accepted: the stage handoff (follow-up cards and the
handoff decision) and landing a lane.

Each call imports the board lazily; this module stays cheap to load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneboard.errors import LaneboardError
from laneboard.ops import schemas as R
from laneboard.ops.cards import REF
from laneboard.ops.invoke import Call
from laneboard.ops.spec import Caller, Op, Params, Route, p

ROUND = p("round", "int", "the producer's delivery round", flag="--round", required=True,
          schema={"minimum": 1})  # fmt: skip


# -- the stage handoff --------------------------------------------------------------------
def follow_up(c: Call, a: Params) -> Any:
    from laneboard.board.handoff import follow_up as follow_up_

    card = follow_up_(
        c.board,
        c.actor,
        a["ref"],
        a["title"],
        round_=a["round"],
        description=a.get("description") or "",
        assignee=a.get("assignee"),
        priority=a["priority"],
        labels=a.get("labels") or [],
    )
    return card.to_dict()


FOLLOW_UP = Op(
    "card.follow-up",
    ("card", "follow-up"),
    "create a card proposed by a done card's handoff",
    "Create one follow-up card from the ## Handoff section of a done producer card (one "
    "with meta.stage_handoff=required): it lands in the producer's project, depends on it "
    "and remembers where it came from. Repeating the same title returns the first card.",
    ('lb card follow-up WEB-12 "Document the new endpoint" --round 1 --assignee writer',),
    (
        REF._replace(help="the producer: a done card with meta.stage_handoff=required"),
        p("title", "text", "the follow-up's title", required=True, metavar="TITLE"),
        ROUND,
        p("description", "text", "its description", flag="--description", short="-d",
          default="", schema={"maxLength": 200_000}),
        p("assignee", "text", "the role that owns it", flag="--assignee",
          schema={"maxLength": 200}),
        p("priority", "int", "0 highest … 3 lowest", flag="--priority", short="-p", default=2),
        p("labels", "texts", "a label (repeatable)", flag="--label"),
    ),
    Caller.OWN_CARD,
    "own card",
    follow_up,
    lambda d, _a, _n: f"{d['ref']} created (follow-up of {d['meta'].get('handoff_from')})",
    R.CARD,
    routes=(Route("POST", "/cards/{ref}/follow-ups", "createFollowUp", 201),),
    tool="follow_up",
    what="create follow-up cards",
)  # fmt: skip


def handoff(c: Call, a: Params) -> Any:
    from laneboard.board.handoff import decide

    card = decide(
        c.board, c.actor, a["ref"], a["decision"], round_=a["round"], reason=a.get("reason")
    )
    return card.to_dict()


HANDOFF = Op(
    "card.handoff",
    ("card", "handoff"),
    "record the handoff decision of a done producer card",
    "Say what became of a done card's handoff for a round: consumed (its follow-ups are "
    "recorded) or declined (with a reason, kept on the card). One decision a round.",
    ("lb card handoff WEB-12 consumed --round 1",
     'lb card handoff WEB-12 declined --round 1 --reason "nothing left to do"'),
    (
        REF._replace(help="the producer: a done card with meta.stage_handoff=required"),
        p("decision", "text", "consumed or declined", required=True, metavar="DECISION",
          choices=("consumed", "declined")),
        ROUND,
        p("reason", "text", "why (required with declined)", flag="--reason",
          schema={"maxLength": 20_000}),
    ),
    Caller.OWN_CARD,
    "own card",
    handoff,
    lambda d, a, _n: f"{d['ref']}: handoff for round {a['round']} {a['decision']}",
    R.CARD,
    routes=(Route("POST", "/cards/{ref}/handoff", "decideHandoff"),),
    tool="handoff",
    what="decide handoffs",
)  # fmt: skip


# -- landing ---------------------------------------------------------------------------------
def land(c: Call, a: Params) -> Any:
    card = c.board.get(a["ref"])
    if card.status.value == "in_review":
        closed = c.board.move(c.actor, card.ref, "done")  # lands through the gate
        merge = closed.meta.get("merge_commit")
        return {"card": closed.ref, "status": closed.status.value, "landed": merge is not None,
                "merge_commit": merge}  # fmt: skip
    if card.status.value != "done":
        raise LaneboardError(
            "ILLEGAL_TRANSITION",
            f"{card.ref} is {card.status.value}; only an accepted card lands",
            f"deliver and review it first, then: lb land {card.ref}",
        )
    from laneboard.workspace.land import land as land_lane

    res = land_lane(c.store, card)
    if res.blocked is not None:
        raise LaneboardError(
            "LANDING_BLOCKED",
            f"{card.ref} was not landed: {res.blocked}",
            f"see the note on the card, then run: lb land {card.ref}",
            commands=res.commands,
        )
    return {"card": card.ref, "status": card.status.value, **res.to_dict()}


def land_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    if "target_branch" not in d:
        if d.get("merge_commit"):
            return f"{d['card']} landed at {d['merge_commit']} and is done"
        return f"{d['card']} is done (it has no lane to land)"
    if d.get("skipped"):
        return f"{d['card']} {d['skipped']}: nothing to land"
    return f"{d['card']} landed at {d['merge_commit']} on {d['target_branch']}"


LAND = Op(
    "card.land",
    ("land",),
    "land an accepted card's lane, or retry a landing",
    "An in_review card is closed (moved to done), which merges its lane into the "
    "project's branch; a done card whose landing was refused is landed again. A refusal "
    "is LANDING_BLOCKED with the git commands to resolve it.",
    ("lb land WEB-12",),
    (REF,),
    Caller.PERSON,
    "board",
    land,
    land_text,
    R.LANDED,
    destructive=True,
    routes=(Route("POST", "/cards/{ref}/land", "landCard"),),
    tool="land_card",
    what="land cards",
)

OPS = (FOLLOW_UP, HANDOFF, LAND)
