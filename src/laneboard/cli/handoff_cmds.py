"""``lb card follow-up`` and ``lb card handoff`` (attached to the ``card`` group): the
stage-handoff decision on an accepted producer card."""

from __future__ import annotations

from typing import Any

from laneboard.cli.common import Context


def register_card(card: Any) -> None:
    p = card.add_parser(
        "follow-up", help="create a card proposed by a done card's ## Handoff section"
    )
    p.add_argument("ref", help="the producer (a done card with meta.stage_handoff=required)")
    p.add_argument("title")
    p.add_argument("--round", type=int, required=True, help="the producer's delivery round")
    p.add_argument("--description", "-d", default="")
    p.add_argument("--assignee", help="the role that owns the follow-up")
    p.add_argument("--priority", "-p", type=int, default=2, help="0 (highest) to 3")
    p.add_argument("--label", action="append", dest="labels", default=[])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_card_follow_up)

    p = card.add_parser("handoff", help="record the handoff decision of a done producer card")
    p.add_argument("ref", help="the producer (a done card with meta.stage_handoff=required)")
    p.add_argument("decision", choices=["consumed", "declined"])
    p.add_argument("--round", type=int, required=True, help="the producer's delivery round")
    p.add_argument("--reason", help="why (required with declined)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_card_handoff)


def cmd_card_follow_up(ctx: Context) -> int:
    from laneboard.board.handoff import follow_up

    a = ctx.args
    c = follow_up(
        ctx.board,
        ctx.actor,
        a.ref,
        a.title,
        round_=a.round,
        description=a.description,
        assignee=a.assignee,
        priority=a.priority,
        labels=a.labels,
    )
    ctx.out(c.to_dict(), f"{c.ref} created (follow-up of {c.meta.get('handoff_from')})")
    return 0


def cmd_card_handoff(ctx: Context) -> int:
    from laneboard.board.handoff import decide

    a = ctx.args
    c = decide(ctx.board, ctx.actor, a.ref, a.decision, round_=a.round, reason=a.reason)
    ctx.out(c.to_dict(), f"{c.ref}: handoff for round {a.round} {a.decision}")
    return 0
