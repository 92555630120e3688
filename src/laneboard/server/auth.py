"""Who is calling: a bearer token, or the local human on a trusted loopback address.

Rules (applied to every request except ``/healthz``, ``/static`` and the OpenAPI document):

* ``Authorization: Bearer <token>`` is honoured from any address; an unknown, revoked
  or expired token is ``UNAUTHORIZED`` (401).
* Without a token, a caller whose source address is trusted (``127.0.0.1`` and ``::1``
  by default) acts as the local human. Such a request must also name a loopback host
  in ``Host`` (a DNS-rebinding page cannot borrow the trust), and an unsafe method
  carrying an ``Origin`` must come from a loopback origin (no cross-site writes).
* Any other caller without a token is ``UNAUTHORIZED``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread

from laneboard.board.tokens import Tokens
from laneboard.domain.model import Actor, ActorKind
from laneboard.errors import LaneboardError

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]

DEFAULT_TRUSTED = ("127.0.0.1", "::1")
OPEN_PREFIXES = ("/healthz", "/static/", "/api/v1/openapi.json")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ACTOR_KEY = "laneboard_actor"


def _host_only(netloc: str) -> str:
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0]
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def _is_loopback_name(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _normal(addr: str) -> str:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


class Authenticator:
    def __init__(
        self,
        tokens: Tokens,
        local_name: str,
        trusted: tuple[str, ...] = DEFAULT_TRUSTED,
    ) -> None:
        self.tokens = tokens
        self.local = Actor(ActorKind.HUMAN, local_name)
        self.trusted = frozenset(_normal(a) for a in trusted)

    def trusted_address(self, client: tuple[str, int] | None) -> bool:
        return client is not None and _normal(client[0]) in self.trusted

    def resolve(
        self, client: tuple[str, int] | None, headers: dict[str, str], method: str
    ) -> Actor:
        auth = headers.get("authorization", "")
        if auth:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise LaneboardError(
                    "UNAUTHORIZED",
                    "the Authorization header is not a bearer token",
                    "send Authorization: Bearer <token> (create one with: lb token create)",
                )
            return self.tokens.resolve(token.strip())
        if not self.trusted_address(client):
            raise LaneboardError(
                "UNAUTHORIZED",
                "a bearer token is required from this address",
                "send Authorization: Bearer <token> (create one with: lb token create)",
            )
        host = _host_only(headers.get("host", ""))
        if not _is_loopback_name(host):
            raise LaneboardError(
                "FORBIDDEN",
                f"host {host[:80]!r} is not a loopback name",
                "open the dashboard at http://127.0.0.1:PORT/ or send a bearer token",
            )
        origin = headers.get("origin")
        cross = bool(origin) and origin != "null"
        if cross and method not in SAFE_METHODS:
            assert origin is not None
            if not _is_loopback_name(_host_only(urlsplit(origin).netloc)):
                raise LaneboardError(
                    "FORBIDDEN",
                    "cross-site writes are refused",
                    "write from the laneboard dashboard itself or send a bearer token",
                )
        return self.local


class AuthMiddleware:
    """Puts the caller's ``Actor`` in ``scope['state']`` or answers 401/403."""

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"].startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client")
        try:
            actor = await anyio.to_thread.run_sync(
                self.auth.resolve, tuple(client) if client else None, headers, scope["method"]
            )
        except LaneboardError as err:
            from starlette.responses import JSONResponse

            response = JSONResponse(err.to_dict(), status_code=err.http_status)
            if err.code == "UNAUTHORIZED":
                response.headers["WWW-Authenticate"] = 'Bearer realm="laneboard"'
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[ACTOR_KEY] = actor
        await self.app(scope, receive, send)


def actor_of(scope: Scope) -> Actor:
    actor = scope.get("state", {}).get(ACTOR_KEY)
    if not isinstance(actor, Actor):
        raise LaneboardError("UNAUTHORIZED", "no caller identity", "send a bearer token")
    return actor
