"""MCP tools generated from the operation table, on the official MCP SDK's low-level server.

Every operation with a ``tool`` name is one tool: its description is the operation's
summary and description, its input schema the operation's one parameter schema (each
argument described), its output schema the operation's result (a list result is wrapped
as ``{tool_key: [...]}``), and ``readOnlyHint``/``destructiveHint`` come from the
declaration. A call runs through ``ops.invoke`` like on every other surface; a refusal
is a tool error whose text is the same one line the CLI prints.

The same server serves stdio (``lb mcp``) and streamable HTTP (``/mcp`` in ``lb serve``).
Identity: over HTTP the caller's bearer token (or the local human on a trusted loopback
address, as for the REST API); over stdio ``LANEBOARD_TOKEN`` (or
``LANEBOARD_TOKEN_FILE``), else the local human.

``build_remote`` is the stdio server in remote mode (``LANEBOARD_URL`` set, as inside an
agent session): each call is sent to that board like a remote ``lb`` command, under the
caller's own credential, and a refusal is the line the board answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server as LowServer
from mcp.server.transport_security import TransportSecuritySettings

from laneboard import __version__
from laneboard.board.service import Board
from laneboard.domain.model import Actor
from laneboard.errors import LaneboardError
from laneboard.ops.endpoint import store_error
from laneboard.ops.invoke import Call, invoke
from laneboard.ops.spec import Op
from laneboard.ops.table import all_ops
from laneboard.ops.validate import params_schema
from laneboard.server.auth import ACTOR_KEY

ActorFn = Callable[[Any], Actor]
Execute = Callable[[Any, Op, dict[str, Any]], Any]  # (request context, op, arguments) -> data
Forward = Callable[[Op, dict[str, Any]], Any]  # a remote board's answer to one call

INSTRUCTIONS = (
    "laneboard board tools. Agents: read your card (get_card), heartbeat while working, "
    "ask questions with ask then wait, and deliver with deliver (or report, then "
    "move_card to in_review). People may also create, edit, link, move and land cards."
)


class Unidentified(Exception):
    """The MCP caller presented no credential the board can resolve to an actor."""


def http_actor(ctx: Any) -> Actor:
    request = ctx.request
    actor = getattr(request, "scope", {}).get("state", {}).get(ACTOR_KEY)
    if not isinstance(actor, Actor):
        raise Unidentified("error UNAUTHORIZED: no caller identity — send a bearer token")
    return actor


def fixed_actor(actor: Actor) -> ActorFn:
    return lambda _ctx: actor


def open_transport() -> TransportSecuritySettings:
    """Host and origin checks are done by laneboard's own middleware for every route."""
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def tools() -> dict[str, Op]:
    return {op.tool: op for op in all_ops() if op.tool}


def output_schema(op: Op) -> dict[str, Any]:
    """An MCP tool's output is an object: a list result is wrapped under ``tool_key``."""
    if op.tool_key:
        return {
            "type": "object",
            "properties": {op.tool_key: dict(op.result)},
            "required": [op.tool_key],
        }
    return dict(op.result)


def tool(op: Op) -> types.Tool:
    assert op.tool is not None
    return types.Tool(
        name=op.tool,
        title=op.summary,
        description=f"{op.summary[0].upper()}{op.summary[1:]}. {op.description}",
        input_schema=params_schema(op),
        output_schema=output_schema(op),
        annotations=types.ToolAnnotations(
            title=op.summary,
            read_only_hint=op.read_only,
            destructive_hint=op.destructive,
            idempotent_hint=op.read_only,
            open_world_hint=False,
        ),
    )


def build(board: Board, actor_of: ActorFn, only: Collection[str] = ()) -> LowServer[Any]:
    """The MCP server over ``board`` (the caller's identity from ``actor_of(ctx)``);
    ``only``: serve just these tools."""

    def execute(ctx: Any, op: Op, arguments: dict[str, Any]) -> Any:
        return invoke(op, Call(board, actor_of(ctx)), arguments)

    return _server(execute, only)


def build_remote(forward: Forward, only: Collection[str] = ()) -> LowServer[Any]:
    """The MCP server of a remote board: ``forward(op, arguments)`` sends each call there
    (``cli.remote.RemoteRunner``), which checks the arguments and the caller itself."""
    return _server(lambda _ctx, op, arguments: forward(op, arguments), only)


def _server(execute: Execute, only: Collection[str] = ()) -> LowServer[Any]:
    ops = {name: op for name, op in tools().items() if not only or name in only}
    listing = types.ListToolsResult(tools=[tool(op) for op in ops.values()])

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return listing

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        op = ops.get(params.name)
        if op is None:
            return _failed(f"error NOT_FOUND: there is no tool {params.name!r} — list the tools")
        arguments = dict(params.arguments or {})
        try:
            data = await anyio.to_thread.run_sync(execute, ctx, op, arguments)
        except Unidentified as exc:
            return _failed(str(exc))
        except LaneboardError as err:
            return _failed(err.line())
        except Exception as exc:
            known = store_error(exc)
            if known is None:
                raise
            return _failed(known.line())
        data = json.loads(json.dumps(data))
        structured = {op.tool_key: data} if op.tool_key else data
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(structured, sort_keys=True))],
            structured_content=structured,
        )

    return LowServer(
        "laneboard",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _failed(line: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=line)], is_error=True)


def run_stdio(server: LowServer[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
