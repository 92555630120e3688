"""The declaration of one operation, from which every surface is generated.

An ``Op`` names its service call, one parameter list (each ``Param`` carries its type,
help, CLI flag and HTTP location), who may call it (a ``Caller``), its read scope,
whether it is read-only or destructive, its summary, description and examples, the JSON
Schema of its result and how that result renders as text. The argparse sub-command
(``ops.cli``), the REST route and OpenAPI operation (``server.api``, ``server.openapi``)
and the MCP tool (``server.mcp_tools``) are all built from it.

This module imports nothing heavy (no dataclasses, no board, no store): the CLI loads it
on every call, and in remote mode it is nearly all the CLI loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from laneboard.board.authority import Caller

if TYPE_CHECKING:
    from laneboard.ops.invoke import Call

__all__ = ["Caller", "Op", "Param", "Route"]

# parameter kinds: how a value is typed on the wire and parsed from a command line
KINDS = frozenset(
    {
        "text",  # a string
        "ref",  # a card reference (WEB-12 or an id)
        "project",  # a project key, name or id
        "int",
        "float",
        "bool",
        "texts",  # a list of strings (a repeatable CLI option)
        "object",  # a JSON object (CLI: JSON text)
        "evidence",  # a list of evidence objects (CLI: EXIT:COMMAND, repeatable)
        "criteria",  # a list of acceptance criteria (CLI: text, repeatable)
    }
)
LISTS = frozenset({"texts", "evidence", "criteria"})

Params = dict[str, Any]
CallFn = Callable[["Call", Params], Any]
TextFn = Callable[[Any, Params, Mapping[str, Any]], str]


class Param(NamedTuple):
    """One parameter of an operation, the same on every surface."""

    name: str  # its key in JSON bodies, MCP arguments and the call
    kind: str  # one of KINDS
    help: str
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    flag: str | None = None  # the CLI option ("--title"); None: a positional argument
    short: str | None = None  # a one-letter CLI alias ("-d")
    metavar: str | None = None
    http: str = "body"  # where REST carries it: path | query | body | header
    wire: str | None = None  # its REST name when that differs (e.g. "status", a header)
    schema: Mapping[str, Any] | None = None  # JSON Schema keywords beyond the kind's own
    stdin: bool = False  # CLI: the value '-' reads standard input
    local_path: bool = False  # CLI: a filesystem path made absolute where lb runs
    cli_type: str | None = None  # CLI: a named converter of the argument (ops.cli.CONVERTERS)
    cli: bool = True  # False: not a command-line argument (a flag of another surface)
    cli_only: bool = False  # True: only the command line has it (the CLI driver reads it)

    @property
    def on_wire(self) -> str:
        return self.wire or self.name

    @property
    def is_list(self) -> bool:
        return self.kind in LISTS


class Route(NamedTuple):
    """One REST route of an operation (most have one)."""

    method: str
    path: str  # under /api/v1; {name} segments are path parameters
    op_id: str  # the OpenAPI operationId
    status: int = 200
    fixed: Mapping[str, Any] = {}  # parameters this route implies (not sent by the caller)
    tag: str = "board"


class Op(NamedTuple):
    """One operation: the single declaration every surface is generated from."""

    name: str  # stable id, e.g. "card.get" (the remote-mode endpoint name)
    words: tuple[str, ...]  # the CLI command words, e.g. ("card", "get")
    summary: str  # one line, a verb phrase ("show one card")
    description: str  # a paragraph for --help, OpenAPI and the MCP tool
    examples: tuple[str, ...]  # command lines shown in --help and the docs
    params: tuple[Param, ...]
    caller: Caller  # who may call it (checked by laneboard.board.authority.require)
    scope: str  # what it reads or writes: "board", "card", "own card", "caller"
    call: CallFn  # the service call; returns JSON-able data
    text: TextFn  # renders that data for a terminal (a function of the data only)
    result: Mapping[str, Any]  # JSON Schema of the data
    read_only: bool = False
    destructive: bool = False
    routes: tuple[Route, ...] = ()
    tool: str | None = None  # the MCP tool name
    tool_key: str | None = None  # MCP wraps a list result as {tool_key: [...]}
    exit_code: Callable[[Any], int] | None = None  # non-zero exits for some results
    cli_run: Callable[..., int] | None = None  # a CLI driver around the call (follow, …)
    what: str = ""  # the phrase a refusal uses ("create cards"); default: the summary

    @property
    def refusal(self) -> str:
        return self.what or self.summary

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


PLACEHOLDERS = {
    "text": "TEXT",
    "ref": "CARD",
    "project": "PROJECT",
    "int": "N",
    "float": "SECONDS",
    "texts": "TEXT",
    "object": "JSON",
    "evidence": "EXIT:COMMAND",
    "criteria": "TEXT",
}


def placeholder(param: Param) -> str:
    """How a command line shows an option's value (``--priority N``)."""
    return param.metavar or PLACEHOLDERS.get(param.kind, "VALUE")


def p(
    name: str,
    kind: str,
    help: str,
    **kw: Any,
) -> Param:
    """A ``Param`` with the kind checked (declarations read better with this)."""
    if kind not in KINDS:
        raise ValueError(f"unknown parameter kind {kind!r}")
    return Param(name, kind, help, **kw)
