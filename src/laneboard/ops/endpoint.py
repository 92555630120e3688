"""The remote-mode endpoint, ``POST /api/v1/ops/<operation>``: what a remote ``lb`` calls.

``answer`` is shared by ``lb serve`` (over HTTP) and the supervisor's unix socket: it
parses ``{"params": {...}}``, applies a caller's pinned time (only on a pinned board, see
``ops.clock``), invokes the operation and returns the HTTP status and the document —
``{"result", "notes", "token"}`` or ``{"error": {code, message, fix}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from laneboard.errors import LaneboardError
from laneboard.ops.clock import HEADER, PinnedClock, call_time
from laneboard.ops.invoke import Call, envelope, invoke
from laneboard.ops.validate import loads

if TYPE_CHECKING:
    from laneboard.board.service import Board
    from laneboard.domain.model import Actor

PREFIX = "/api/v1/ops/"
RENEW = "X-Laneboard-Renew"


def answer(
    board: Board, actor: Actor, name: str, body: bytes, headers: Mapping[str, str]
) -> tuple[int, dict[str, Any]]:
    """Run one remote call; never raises a ``LaneboardError`` (it is the answer)."""
    from laneboard.ops.table import by_name

    try:
        op = by_name().get(name)
        if op is None:
            raise LaneboardError(
                "NOT_FOUND", f"there is no operation {name[:80]!r}", "update lb on this machine"
            )
        doc = loads(body) if body.strip() else {}
        if not isinstance(doc, dict) or not isinstance(doc.get("params", {}), dict):
            raise LaneboardError("BAD_INPUT", 'the call must be {"params": {...}}', "send it so")
        lower = {k.lower(): v for k, v in headers.items()}
        clock = board.store.clock
        at = call_time(clock, lower.get(HEADER.lower()))
        call = Call(board, actor, renew=lower.get(RENEW.lower()) == "1")
        if isinstance(clock, PinnedClock):
            with clock.at(at):
                data = invoke(op, call, doc.get("params", {}))
        else:
            data = invoke(op, call, doc.get("params", {}))
        return 200, envelope(call, json.loads(json.dumps(data)))
    except LaneboardError as err:
        return err.http_status, {"error": err.to_dict()}
    except Exception as exc:
        known = store_error(exc)
        if known is None:
            raise
        return known.http_status, {"error": known.to_dict()}


def store_error(exc: Exception) -> LaneboardError | None:
    """The refusal a store exception stands for, or ``None`` for a real bug."""
    from laneboard.store import IntegrityError

    if isinstance(exc, IntegrityError):
        return LaneboardError("CONFLICT", "the write conflicts with existing data", "retry")
    name = type(exc).__name__
    kinds = ("OperationalError", "InterfaceError", "ConnectionError", "PoolTimeout")
    # by class, not by name: psycopg's AdminShutdown (a restart) is an OperationalError
    if any(k in c.__name__ for c in type(exc).__mro__ for k in kinds):
        from laneboard.store.base import nothing_written

        # a caller may make the call again at once when nothing of it reached the database
        again = {"nothing_written": True} if nothing_written(exc) else {}
        return LaneboardError(
            "STORE_UNAVAILABLE",
            f"the store did not answer: {name}",
            "check the database and retry",
            **again,
        )
    return None


def closing_answer(status: str, err: LaneboardError) -> bytes:
    """A whole HTTP answer carrying ``err``, written straight to a connection that is then
    closed (one a server turns away before any request of it is served)."""
    body = json.dumps({"error": err.to_dict()}).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
