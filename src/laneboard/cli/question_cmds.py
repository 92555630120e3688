"""``lb card ask`` and ``lb card wait`` (attached to the ``card`` group), and through
``handoff_cmds`` the director's ``lb card follow-up`` and ``lb card handoff``."""

from __future__ import annotations

import argparse
from typing import Any

from laneboard.cli.common import Context


def register_card(card: Any) -> None:
    """Add ``ask``, ``wait``, ``follow-up`` and ``handoff`` to the ``lb card`` group."""
    p = card.add_parser("ask", help="ask a blocking question on your in_progress card")
    p.add_argument("ref")
    p.add_argument("text", help="the question (one decision round: Q1..Qn)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_card_ask)

    p = card.add_parser(
        "wait", help="hold until the question is answered (released), escalated or moved"
    )
    p.add_argument("ref")
    p.add_argument("--question", required=True, type=int, help="the id printed by lb card ask")
    p.add_argument("--timeout", type=float, default=110, help="seconds, at most 540 (default 110)")
    p.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_card_wait)

    from laneboard.cli.handoff_cmds import register_card as register_handoff

    register_handoff(card)


def cmd_card_ask(ctx: Context) -> int:
    from laneboard.board.questions import ask

    c = ask(ctx.board, ctx.actor, ctx.args.ref, ctx.args.text)
    ctx.out(
        {**c.to_dict(), "wait": f"lb card wait {ctx.args.ref} --question {c.id}"},
        f"question {c.id} asked; hold with: lb card wait {ctx.args.ref} --question {c.id}",
    )
    return 0


def cmd_card_wait(ctx: Context) -> int:
    from laneboard.board.questions import check_timeout, wait

    a = ctx.args
    check_timeout(a.timeout)
    poll = min(max(a.poll, 0.05), 2.0)
    res = wait(ctx.board, ctx.actor, a.ref, a.question, a.timeout, poll_s=poll)
    ctx.out(res.to_dict(), res.text())
    return 1 if res.outcome == "error" else 0
