"""REST under ``/api/v1``, generated from the operation table.

Each ``Route`` of each ``Op`` becomes one Starlette route (one per path, with every
declared method, so an undeclared method is 405 with an ``Allow`` header). A request's
path, query, header and body values are gathered into the operation's parameters by
their declared location and kind, then the operation runs through ``ops.invoke`` like on
every other surface. The OpenAPI document (``server.openapi``) is built from the same
declarations.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from laneboard.errors import LaneboardError, bad_input
from laneboard.ops.clock import HEADER, PinnedClock, call_time
from laneboard.ops.endpoint import store_error
from laneboard.ops.invoke import Call, invoke
from laneboard.ops.spec import Op, Param, Params, Route
from laneboard.ops.table import all_ops
from laneboard.ops.validate import loads
from laneboard.server.auth import actor_of

if TYPE_CHECKING:
    from laneboard.server.app import Server

BASE = "/api/v1"
BODY_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
INT_RE = re.compile(r"-?[0-9]{1,18}")
Bound = tuple[Op, Route]


def bindings() -> dict[str, dict[str, Bound]]:
    """Every REST path with its methods, each bound to an operation and its route."""
    out: dict[str, dict[str, Bound]] = {}
    for op in all_ops():
        for r in op.routes:
            out.setdefault(BASE + r.path, {})[r.method] = (op, r)
    return out


def on_route(p: Param, route: Route) -> bool:
    """Whether a parameter is part of this route (a path parameter only where its path has it)."""
    if p.cli_only or p.name in route.fixed:
        return False
    if p.http == "path":
        return "{" + p.name + "}" in route.path
    return True


def location(p: Param, route: Route) -> str:
    """Where this route carries the parameter: its path when the path names it, else where
    the parameter is declared."""
    return "path" if "{" + p.name + "}" in route.path else p.http


def _scalar(p: Param, raw: str, where: str) -> Any:
    if p.kind == "int":
        if not INT_RE.fullmatch(raw):
            raise bad_input(f"{where}={raw[:40]!r} is not a whole number", f"pass {p.on_wire}=N")
        return int(raw)
    if p.kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise bad_input(
                f"{where}={raw[:40]!r} is not a number", f"pass {p.on_wire}=N"
            ) from None
        if value != value or value in (float("inf"), float("-inf")):
            raise bad_input(f"{where} is not a finite number", f"pass {p.on_wire}=N")
        return value
    if p.kind == "bool":
        low = raw.lower()
        if low in ("1", "true", "yes"):
            return True
        if low in ("0", "false", "no"):
            return False
        raise bad_input(f"{where}={raw[:40]!r} is not a boolean", f"pass {p.on_wire}=true or false")
    return raw


def plan(op: Op, route: Route) -> tuple[tuple[Param, str], ...]:
    """The route's parameters, each with where the request carries it (made once a route)."""
    return tuple((p, location(p, route)) for p in op.params if on_route(p, route))


async def gather(request: Request, route: Route, where_of: tuple[tuple[Param, str], ...]) -> Params:
    """The operation's parameters from this request (``where_of``: its route's ``plan``)."""
    params: Params = dict(route.fixed)
    body_names = []
    for p, where in where_of:
        if where == "path":
            params[p.name] = _scalar(p, request.path_params[p.name], f"path {p.name}")
        elif where == "query":
            if p.is_list:
                values = [v for v in request.query_params.getlist(p.on_wire) if v != ""]
                if values:
                    params[p.name] = values
            else:
                raw = request.query_params.get(p.on_wire)
                if raw not in (None, ""):
                    params[p.name] = _scalar(p, raw, f"query {p.on_wire}")
        elif where == "header":
            value = request.headers.get(p.on_wire)
            if value:
                params[p.name] = value
        else:
            body_names.append(p.name)
    if request.method in BODY_METHODS and body_names:
        params.update(_body(await request.body(), body_names))
    return params


def _body(raw: bytes, names: list[str]) -> Params:
    doc = loads(raw) if raw.strip() else {}
    if not isinstance(doc, dict):
        raise bad_input("the request body must be a JSON object", "send {name: value, ...}")
    for key in doc:
        if key not in names:
            raise bad_input(
                f"body field {str(key)[:60]!r} is not known here",
                f"known fields: {', '.join(sorted(names))}",
            )
    return doc


def run(srv: Server, op: Op, call: Call, params: Params, now: str | None) -> Any:
    """``invoke`` under a caller's pinned time, where this board's clock is pinned; a
    database out of reach is the ``STORE_UNAVAILABLE`` refusal (503), like any other."""
    clock = srv.store.clock
    at = call_time(clock, now)
    try:
        if isinstance(clock, PinnedClock):
            with clock.at(at):
                return invoke(op, call, params)
        return invoke(op, call, params)
    except LaneboardError:
        raise
    except Exception as exc:
        known = store_error(exc)
        if known is None:
            raise
        raise known from exc


def endpoint(srv: Server, methods: dict[str, Bound]) -> Callable[[Request], Awaitable[Response]]:
    plans = {m: plan(op, route) for m, (op, route) in methods.items()}

    async def handle(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        op, route = methods[method]
        actor = actor_of(request.scope)
        if op.name == "events.tail" and "text/event-stream" in request.headers.get("accept", ""):
            from laneboard.server.app import events_stream

            return await events_stream(srv, request)
        if op.name == "card.transcript" and "text/event-stream" in request.headers.get(
            "accept", ""
        ):
            from laneboard.server.transcript_sse import transcript_stream

            return await transcript_stream(srv, request)
        params = await gather(request, route, plans[method])
        call = Call(srv.board, actor)
        now = request.headers.get(HEADER)
        data = await anyio.to_thread.run_sync(run, srv, op, call, params, now)
        return JSONResponse(data, status_code=route.status)

    return handle


def routes(srv: Server) -> list[StarletteRoute]:
    return [
        StarletteRoute(path, endpoint(srv, methods), methods=sorted(methods))
        for path, methods in bindings().items()
    ]
