"""The one path every surface calls an operation through.

The CLI in local mode, the REST endpoints, the remote-mode endpoint (over HTTP and the
supervisor's unix socket) and MCP all build a ``Call`` (the board and the caller's
resolved identity) and pass it to ``invoke``: the parameters are checked against the
operation's one schema, the caller against its declared ``Caller`` (``authority.require``),
and only then does the service call run. A ``LaneboardError`` raised anywhere in that
path is the same code, line and JSON document on every surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from laneboard.board.authority import require
from laneboard.ops.spec import Op
from laneboard.ops.validate import check

if TYPE_CHECKING:
    from laneboard.board.service import Board
    from laneboard.domain.clock import Clock
    from laneboard.domain.model import Actor
    from laneboard.store import Store


class Call:
    """One call of an operation: who calls, on which board, and what it hands back
    beside its result (notes for the text rendering, a renewed credential)."""

    def __init__(self, board: Board, actor: Actor, *, renew: bool = False) -> None:
        self.board = board
        self.actor = actor
        self.renew = renew  # the caller keeps a credential file that follows its claim
        self.notes: dict[str, Any] = {}
        self.token: str | None = None

    @property
    def store(self) -> Store:
        return self.board.store

    @property
    def clock(self) -> Clock:
        return self.board.store.clock


def invoke(op: Op, call: Call, raw: Mapping[str, Any]) -> Any:
    """Check the parameters and the caller, then run the service call."""
    params = check(op, raw)
    require(call.actor, op.caller, op.refusal)
    return op.call(call, params)


def envelope(call: Call, data: Any) -> dict[str, Any]:
    """What the remote-mode endpoint answers: the result, its notes, a renewed token."""
    out: dict[str, Any] = {"result": data}
    if call.notes:
        out["notes"] = call.notes
    if call.token:
        out["token"] = call.token
    return out
