"""``lb serve``: the Starlette application. A thin skin over the board services."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

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
from laneboard.ops.endpoint import PREFIX, answer
from laneboard.server import (
    api,
    dashboard,
    dashboard_agent,
    dashboard_runs,
    metrics,
    openapi,
    sse,
)
from laneboard.server import status as st
from laneboard.server.auth import DEFAULT_TRUSTED, Authenticator, AuthMiddleware, actor_of
from laneboard.server.feed import Feed
from laneboard.server.http import query_int, query_text
from laneboard.store import IntegrityError, Store
from laneboard.workspace.hooks import install as install_gates

MAX_ID = 2**53


@dataclass
class Server:
    store: Store
    board: Board
    tokens: Tokens
    feed: Feed


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
    from laneboard.ops.endpoint import store_error

    known = store_error(exc)
    if known is not None:
        return _error(known)
    body = {"code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"[:300]}
    return JSONResponse(body, status_code=500)


async def events_stream(srv: Server, request: Request) -> Response:
    """``GET /api/v1/events`` with ``Accept: text/event-stream``: the log as SSE."""
    actor = actor_of(request.scope)
    q = request.query_params
    card, project = query_text(q.get("card"), "card"), query_text(q.get("project"), "project")
    filters = sse.Filters(run_id=query_int(q.get("run"), "run", 0, 0, MAX_ID) or None)
    if card is not None:
        filters.card_id = (await anyio.to_thread.run_sync(access.get, srv.board, actor, card)).id
    if project is not None:
        filters.project_id = (await anyio.to_thread.run_sync(srv.board.project, project)).id
    start = request.headers.get("last-event-id") or q.get("after")
    if start:
        cursor = await anyio.to_thread.run_sync(srv.feed.resolve, start.strip())
    else:
        cursor = await anyio.to_thread.run_sync(srv.feed.head_now)
    limit = query_int(q.get("max_events"), "max_events", 0, 0, 1_000_000)
    return StreamingResponse(
        sse.stream(srv.feed, srv.board, actor, cursor, filters, max_events=limit),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def remote_call(srv: Server) -> Callable[[Request], Awaitable[Response]]:
    """``POST /api/v1/ops/<operation>``: the endpoint a remote ``lb`` calls."""

    async def handle(request: Request) -> Response:
        actor = actor_of(request.scope)
        body = await request.body()
        status, doc = await anyio.to_thread.run_sync(
            answer, srv.board, actor, request.path_params["name"], body, dict(request.headers)
        )
        return JSONResponse(doc, status_code=status)

    return handle


def create_app(
    store: Store,
    *,
    local_user: str = "human",
    trusted: tuple[str, ...] = DEFAULT_TRUSTED,
    with_mcp: bool = True,
    sse_poll_s: float = 0.5,
) -> AuthMiddleware:
    """The ASGI application (wrapped in the authentication middleware)."""
    srv = Server(store, install_gates(Board(store)), Tokens(store), Feed(store, poll_s=sse_poll_s))

    async def openapi_json(_request: Request) -> Response:
        return JSONResponse(openapi.document())

    async def healthz(_request: Request) -> Response:
        code, body = await anyio.to_thread.run_sync(st.health, store)
        return JSONResponse(body, status_code=code)

    async def metrics_text(request: Request) -> Response:
        actor = actor_of(request.scope)
        text = await anyio.to_thread.run_sync(metrics.render, store, actor)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    routes: list[BaseRoute] = [
        Route("/api/v1/openapi.json", openapi_json, methods=["GET"]),
        *api.routes(srv),
        Route(PREFIX + "{name}", remote_call(srv), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        *dashboard.routes(srv),
        *dashboard_runs.routes(srv),
        *dashboard_agent.routes(srv),
        Mount("/static", StaticFiles(packages=[("laneboard.server", "static")]), name="static"),
    ]
    mcp_server = None
    if with_mcp:
        from laneboard.server import mcp_tools

        mcp_server = mcp_tools.build(srv.board, mcp_tools.http_actor)
        sub = mcp_server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=mcp_tools.open_transport(),
        )
        routes.extend(sub.routes)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            if mcp_server is None:
                yield
                return
            async with mcp_server.session_manager.run():
                yield
        finally:
            await anyio.to_thread.run_sync(srv.feed.close)

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


def end_streams(app: AuthMiddleware) -> None:
    """End the live streams (SSE) of an app made by ``create_app``: the server is
    stopping, and a client that never leaves (a dashboard left open) must not hold it."""
    assert isinstance(app.app, Starlette)
    server: Server = app.app.state.server
    server.feed.end()
