"""``lb serve`` (HTTP API, dashboard, metrics, MCP) and ``lb mcp`` (MCP over stdio)."""

from __future__ import annotations

import socket
import sys
from typing import Any

from laneboard.cli.common import Context, user_name
from laneboard.cli.generated import command
from laneboard.errors import LaneboardError
from laneboard.server.guard import MAX_CONNECTIONS


def register(sub: Any) -> None:
    p = command(
        sub,
        "serve",
        "serve the HTTP API, dashboard, metrics and MCP",
        "Serve the board over HTTP: the REST API under /api/v1 (and the endpoint a remote lb "
        "calls), the dashboard, /metrics, /healthz and MCP at /mcp. Loopback callers act as "
        "the local person; any other caller needs a bearer token.",
        ("lb serve", "lb serve --port 9000 --no-mcp"),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="ADDR",
        help="source address trusted as the local human without a token "
        "(repeatable; default 127.0.0.1 and ::1)",
    )
    p.add_argument("--no-mcp", action="store_true", help="do not mount MCP at /mcp")
    p.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        metavar="N",
        help=f"connections served at once, event streams included (default {MAX_CONNECTIONS}); "
        "one beyond them is answered 503 at once",
    )
    p.set_defaults(func=cmd_serve)

    p = command(
        sub,
        "mcp",
        "serve the board's MCP tools over stdio",
        "Serve the board's MCP tools on standard input and output, for an MCP client that "
        "starts lb itself. The tools act as LANEBOARD_TOKEN's actor, else the local person. "
        "With LANEBOARD_URL set (and no --db), each call goes to that board, as for every "
        "remote lb command.",
        (
            "lb mcp",
            "LANEBOARD_TOKEN=lbt_... lb mcp",
            "LANEBOARD_URL=http://board:8765 LANEBOARD_TOKEN=lbt_... lb mcp --tool get_card",
        ),
    )
    p.add_argument(
        "--tool",
        action="append",
        default=None,
        metavar="NAME",
        help="serve only this tool (repeatable; default every tool)",
    )
    p.set_defaults(func=cmd_mcp)


def _need_server_extra() -> None:
    try:
        import jinja2  # noqa: F401
        import pygments  # noqa: F401
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

    from laneboard.server import guard
    from laneboard.server.app import create_app
    from laneboard.server.auth import DEFAULT_TRUSTED

    a = ctx.args
    if not 0 <= a.port < 65536:
        raise LaneboardError(
            "BAD_INPUT", f"port {a.port} is out of range", "use 1-65535, or 0 for a free one"
        )
    guard.check_max_connections(a.max_connections)
    guard.open_files(a.max_connections)
    ctx.store.require_known_schema()  # an older server never serves a newer board
    name = user_name()
    trusted = tuple(a.trust) if a.trust else DEFAULT_TRUSTED
    app = create_app(ctx.store, local_user=name, trusted=trusted, with_mcp=not a.no_mcp)
    sock = listen(a.host, a.port, guard.BACKLOG)
    port = sock.getsockname()[1]
    sys.stderr.write(f"laneboard serving {ctx.store.url} on http://{a.host}:{port}/\n")
    sys.stderr.flush()
    bounded = guard.protocol(a.max_connections, trusted=trusted)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", http=bounded, backlog=guard.BACKLOG
    )
    _server(uvicorn, app, config).run(sockets=[sock])
    return 0


def _server(uvicorn: Any, app: Any, config: Any) -> Any:
    """uvicorn's server, whose shutdown (SIGTERM, Ctrl-C) first ends the app's live
    streams: uvicorn waits for every open response to finish, and an SSE stream a
    dashboard keeps open would otherwise never finish."""
    from laneboard.server.app import end_streams

    class Server(uvicorn.Server):  # type: ignore[misc]
        async def shutdown(self, sockets: Any = None) -> None:
            end_streams(app)
            await super().shutdown(sockets)

    return Server(config)


def listen(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: one the system picks)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(backlog)
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        raise LaneboardError(
            "BAD_INPUT",
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            "pick another --host or --port (--port 0 picks a free one)",
        ) from None
    return sock


def cmd_mcp(ctx: Context) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise LaneboardError(
            "CONFIG_INVALID",
            "the MCP SDK is not installed",
            "install it with: pip install 'laneboard[server]'",
        ) from None
    from laneboard.cli.identity import remote_url
    from laneboard.server import mcp_tools

    only = list(getattr(ctx.args, "tool", None) or ())
    unknown = sorted(set(only) - set(mcp_tools.tools()))
    if unknown:
        raise LaneboardError(
            "BAD_INPUT",
            f"there is no tool {unknown[0]!r}",
            "name tools of the list in docs/mcp.md (e.g. --tool get_card)",
        )
    url = remote_url()
    if url is not None and getattr(ctx.args, "db", None) is None:
        from laneboard.cli.remote import RemoteRunner

        runner = RemoteRunner(url)

        def forward(op: Any, arguments: dict[str, Any]) -> Any:
            return runner.call(op, arguments)[0]

        server = mcp_tools.build_remote(forward, only)
    else:
        server = mcp_tools.build(ctx.board, mcp_tools.fixed_actor(ctx.actor), only)
    mcp_tools.run_stdio(server)
    return 0
