"""``lb serve`` (HTTP API, dashboard, metrics, MCP) and ``lb mcp`` (MCP over stdio)."""

from __future__ import annotations

import os
import sys
from typing import Any

from laneboard.cli.common import Context, _user
from laneboard.errors import LaneboardError


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API, dashboard, metrics and MCP")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="ADDR",
        help="source address trusted as the local human without a token "
        "(repeatable; default 127.0.0.1 and ::1)",
    )
    p.add_argument("--no-mcp", action="store_true", help="do not mount MCP at /mcp")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", help="serve the board's MCP tools over stdio")
    p.set_defaults(func=cmd_mcp)


def _need_server_extra() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"the server extra is not installed ({exc.name} is missing)",
            "install it with: pip install 'laneboard[server]'",
        ) from None


def cmd_serve(ctx: Context) -> int:
    _need_server_extra()
    import uvicorn

    from laneboard.server.app import create_app
    from laneboard.server.auth import DEFAULT_TRUSTED

    a = ctx.args
    if not 0 < a.port < 65536:
        raise LaneboardError("BAD_INPUT", f"port {a.port} is out of range", "use 1-65535")
    name = os.environ.get("LANEBOARD_USER") or _user()
    trusted = tuple(a.trust) if a.trust else DEFAULT_TRUSTED
    app = create_app(ctx.store, local_user=name, trusted=trusted, with_mcp=not a.no_mcp)
    sys.stderr.write(f"laneboard serving {ctx.store.url} on http://{a.host}:{a.port}/\n")
    sys.stderr.flush()
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning", lifespan="on")
    return 0


def cmd_mcp(ctx: Context) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise LaneboardError(
            "CONFIG_INVALID",
            "the MCP SDK is not installed",
            "install it with: pip install 'laneboard[server]'",
        ) from None
    from laneboard.server import mcp_tools

    server = mcp_tools.build(ctx.store, mcp_tools.fixed_actor(ctx.actor))
    server.run("stdio")
    return 0
