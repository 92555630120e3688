"""``lb token create|list|revoke``: credentials for the HTTP API and MCP."""

from __future__ import annotations

import re
from typing import Any

from laneboard.cli.common import Context, table
from laneboard.errors import bad_input

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(sub: Any) -> None:
    tok = sub.add_parser("token", help="API and MCP tokens").add_subparsers(
        dest="token_cmd", metavar="ACTION", required=True
    )
    p = tok.add_parser("create", help="create a token (the plaintext is shown once)")
    p.add_argument("--name", required=True, help="who or what uses it")
    p.add_argument("--kind", default="agent", choices=["agent", "human"])
    p.add_argument("--card", help="scope an agent token to this card (and its dependencies)")
    p.add_argument("--epoch", type=int, help="claim epoch the agent's writes must carry")
    p.add_argument("--expires", help="lifetime like 30m, 12h or 7d (default: never)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_create)

    p = tok.add_parser("list", help="list tokens (never their plaintext)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = tok.add_parser("revoke", help="revoke a token by id")
    p.add_argument("id", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_revoke)


def lifetime_s(raw: str) -> int:
    m = re.fullmatch(r"([1-9][0-9]{0,6})([smhd])", raw.strip())
    if not m:
        raise bad_input(f"--expires {raw!r} is not a lifetime", "use e.g. 30m, 12h or 7d")
    return int(m.group(1)) * UNITS[m.group(2)]


def cmd_create(ctx: Context) -> int:
    from laneboard.board.tokens import Tokens

    a = ctx.args
    if a.card and a.kind != "agent":
        raise bad_input("only agent tokens take a card scope", "drop --card or use --kind agent")
    card_id = ctx.board.get(a.card).id if a.card else None
    expires = ctx.clock.now_ms() + lifetime_s(a.expires) * 1000 if a.expires else None
    token, info = Tokens(ctx.store).create(
        ctx.actor, a.name, a.kind, card_id=card_id, epoch=a.epoch, expires_at=expires
    )
    ctx.out(
        {**info.to_dict(), "token": token},
        f"{token}\n(token {info.id} for {info.name}; shown once — store it now)",
    )
    return 0


def cmd_list(ctx: Context) -> int:
    from laneboard.board.tokens import Tokens

    infos = Tokens(ctx.store).list()
    rows = [
        [
            str(t.id),
            t.name,
            t.kind,
            str(t.card_id or "-"),
            t.to_dict()["expires_at"] or "-",
            "revoked" if t.revoked_at else "active",
        ]
        for t in infos
    ]
    ctx.out(
        [t.to_dict() for t in infos],
        table(rows, ["ID", "NAME", "KIND", "CARD", "EXPIRES", "STATE"]),
    )
    return 0


def cmd_revoke(ctx: Context) -> int:
    from laneboard.board.tokens import Tokens

    info = Tokens(ctx.store).revoke(ctx.actor, ctx.args.id)
    ctx.out(info.to_dict(), f"token {info.id} ({info.name}) revoked")
    return 0
