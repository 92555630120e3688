"""``lb serve``: the Starlette application. A thin skin over the board services."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from laneboard.board import access
from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.errors import LaneboardError
from laneboard.server import api, dashboard, metrics, openapi, sse
from laneboard.server import status as st
from laneboard.server.auth import DEFAULT_TRUSTED, Authenticator, AuthMiddleware, actor_of
from laneboard.server.http import clean_text, parse_json, query_int, query_text
from laneboard.store import IntegrityError, Store
from laneboard.workspace.hooks import install as install_gates


@dataclass
class Server:
    store: Store
    board: Board
    tokens: Tokens
    sse_poll_s: float = 0.5


def _error(err: LaneboardError) -> JSONResponse:
    return JSONResponse(err.to_dict(), status_code=err.http_status)


async def on_laneboard_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LaneboardError)
    return _error(exc)


async def on_http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _error(LaneboardError("NOT_FOUND", "no such route", "see /api/v1/openapi.json"))
    body = {
        "code": "METHOD_NOT_ALLOWED" if exc.status_code == 405 else "HTTP_ERROR",
        "message": str(exc.detail),
    }
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def on_integrity(_request: Request, _exc: Exception) -> Response:
    return _error(LaneboardError("CONFLICT", "the write conflicts with existing data", "retry"))


async def on_other(_request: Request, exc: Exception) -> Response:
    if "OperationalError" in type(exc).__name__ or "ConnectionError" in type(exc).__name__:
        return _error(
            LaneboardError(
                "STORE_UNAVAILABLE",
                f"the store did not answer: {type(exc).__name__}",
                "check the database and retry",
            )
        )
    body = {"code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"[:300]}
    return JSONResponse(body, status_code=500)


def _endpoint(srv: Server, op: api.Op) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        actor = actor_of(request.scope)
        body: dict[str, Any] = {}
        if op.method in ("POST", "PATCH", "PUT"):
            body = parse_json(await request.body(), op.body)
        key = request.headers.get("idempotency-key") or None
        if key is not None:
            clean_text(key, "Idempotency-Key")
        if op.op_id == "events" and "text/event-stream" in request.headers.get("accept", ""):
            return await _events_stream(srv, request)
        call = api.Call(
            srv.store,
            srv.board,
            srv.tokens,
            actor,
            dict(request.path_params),
            request.query_params,
            body,
            key,
        )
        code, data = await anyio.to_thread.run_sync(op.handler, call)
        return JSONResponse(data, status_code=code)

    return endpoint


async def _events_stream(srv: Server, request: Request) -> Response:
    actor = actor_of(request.scope)
    q = request.query_params
    filters = sse.Filters(
        card=query_text(q.get("card"), "card"),
        project=query_text(q.get("project"), "project"),
        run_id=query_int(q.get("run"), "run", 0, 0, api.MAX_ID) or None,
    )
    if filters.card is not None:
        await anyio.to_thread.run_sync(access.get, srv.board, actor, filters.card)
    if filters.project is not None:
        await anyio.to_thread.run_sync(srv.board.project, filters.project)
    last = request.headers.get("last-event-id")
    if last:
        cursor = query_int(last, "Last-Event-ID", 0, 0, api.MAX_ID)
    elif q.get("after"):
        cursor = query_int(q.get("after"), "after", 0, 0, api.MAX_ID)
    else:
        cursor = await anyio.to_thread.run_sync(_max_event, srv.store)
    limit = query_int(q.get("max_events"), "max_events", 0, 0, 1_000_000)
    return StreamingResponse(
        sse.stream(srv.board, actor, cursor, filters, poll_s=srv.sse_poll_s, max_events=limit),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _max_event(store: Store) -> int:
    with store.read() as tx:
        return tx.max_event_id()


def create_app(
    store: Store,
    *,
    local_user: str = "human",
    trusted: tuple[str, ...] = DEFAULT_TRUSTED,
    with_mcp: bool = True,
    sse_poll_s: float = 0.5,
) -> Any:
    """The ASGI application (wrapped in the authentication middleware)."""
    srv = Server(store, install_gates(Board(store)), Tokens(store), sse_poll_s)

    async def openapi_json(_request: Request) -> Response:
        return JSONResponse(openapi.document())

    async def healthz(_request: Request) -> Response:
        code, body = await anyio.to_thread.run_sync(st.health, store)
        return JSONResponse(body, status_code=code)

    async def metrics_text(_request: Request) -> Response:
        text = await anyio.to_thread.run_sync(metrics.render, store)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def api_not_found(_request: Request) -> Response:
        return _error(LaneboardError("NOT_FOUND", "no such route", "see /api/v1/openapi.json"))

    routes: list[BaseRoute] = [
        Route("/api/v1/openapi.json", openapi_json, methods=["GET"]),
        *(Route(op.path, _endpoint(srv, op), methods=[op.method]) for op in api.OPS),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        *dashboard.routes(srv),
        Mount("/static", StaticFiles(packages=[("laneboard.server", "static")]), name="static"),
    ]
    mcp_server = None
    if with_mcp:
        from laneboard.server import mcp_tools

        mcp_server = mcp_tools.build(store, mcp_tools.http_actor)
        sub = mcp_server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=mcp_tools.open_transport(),
        )
        routes.extend(sub.routes)
    routes.append(
        Route("/api/{rest:path}", api_not_found, methods=["GET", "POST", "PATCH", "DELETE"])
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if mcp_server is None:
            yield
            return
        async with mcp_server.session_manager.run():
            yield

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            LaneboardError: on_laneboard_error,
            HTTPException: on_http_error,
            IntegrityError: on_integrity,
            Exception: on_other,
        },
    )
    app.state.server = srv
    return AuthMiddleware(app, Authenticator(srv.tokens, local_user, trusted))
