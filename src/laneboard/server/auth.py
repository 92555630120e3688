"""Who is calling (a bearer token, or the local human on a trusted loopback address), and
the browser-safety rules every write obeys. Both are applied by ``AuthMiddleware``.

Web safety, for every unsafe method (POST, PUT, PATCH, DELETE) on every route, whatever
the credential — so that no web page the user opens can write to the board:

* ``Content-Type`` must be ``application/json`` (a missing or other type is
  ``UNSUPPORTED_MEDIA_TYPE``, 415): an HTML form or a ``no-cors`` fetch cannot send it
  without a CORS preflight, and laneboard answers no preflight;
* an ``Origin`` header must name this very server (scheme-less ``host:port`` equal to
  ``Host``); ``Origin: null`` (sandboxed frames, ``data:`` pages) and foreign origins are
  ``FORBIDDEN``, and so is ``Sec-Fetch-Site: cross-site``/``same-site``;
* a request body is at most ``MAX_BODY`` bytes (``BAD_INPUT``, 422).

Identity (applied to every request except ``/healthz``, ``/static`` and the OpenAPI
document):

* ``Authorization: Bearer <token>`` is honoured from any address; an unknown, revoked
  or expired token is ``UNAUTHORIZED`` (401).
* Without a token, a caller whose source address is trusted (``127.0.0.1`` and ``::1``
  by default) acts as the local human. Such a request must also name a loopback host
  in ``Host`` (a DNS-rebinding page cannot borrow the trust).
* Any other caller without a token is ``UNAUTHORIZED``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread

from laneboard.board.tokens import Tokens
from laneboard.domain.model import Actor, ActorKind
from laneboard.errors import LaneboardError

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]

DEFAULT_TRUSTED = ("127.0.0.1", "::1")
MAX_BODY = 2_000_000  # bytes of one request body (inputs.JSON_CHARS)
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


@lru_cache(maxsize=1024)  # a pure function of the address, asked on every request
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
        return self.local


class AuthMiddleware:
    """Applies the web-safety rules, then puts the caller's ``Actor`` in
    ``scope['state']``, or answers with the refusal (401/403/415/422)."""

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            method = scope.get("method", "GET")
            # a read passes the write rules: the route scan is only for a write, so that an
            # undeclared method or path gets the router's answer
            if method.upper() not in SAFE_METHODS and self._declared(scope):
                check_write(method, headers)
            if scope["path"].startswith(OPEN_PREFIXES):
                await self.app(scope, _bounded(receive), send)
                return
            client = tuple(scope["client"]) if scope.get("client") else None
            if headers.get("authorization"):  # a token is looked up in the store
                actor = await anyio.to_thread.run_sync(
                    self.auth.resolve, client, headers, scope["method"]
                )
            else:  # the address and Host rules alone: no thread, no store
                actor = self.auth.resolve(client, headers, scope["method"])
        except LaneboardError as err:
            await _refusal(err)(scope, receive, send)
            return
        except Exception as exc:  # a token looked up while the database is out of reach
            from laneboard.ops.endpoint import store_error

            known = store_error(exc)
            if known is None:
                raise
            await _refusal(known)(scope, receive, send)
            return
        scope.setdefault("state", {})[ACTOR_KEY] = actor
        await self.app(scope, _bounded(receive), send)

    def _declared(self, scope: Scope) -> bool:
        """Whether a route of the wrapped app takes this method on this path."""
        from starlette.routing import Match

        routes = getattr(self.app, "routes", None)
        if routes is None:
            return True
        return any(route.matches(scope)[0] is Match.FULL for route in routes)


def _refusal(err: LaneboardError) -> Any:
    from starlette.responses import JSONResponse

    response = JSONResponse(err.to_dict(), status_code=err.http_status)
    if err.code == "UNAUTHORIZED":
        response.headers["WWW-Authenticate"] = 'Bearer realm="laneboard"'
    return response


def _default_port(scheme: str, netloc: str) -> str:
    netloc = netloc.lower()
    for sch, port in (("http", ":80"), ("https", ":443")):
        if scheme == sch and netloc.endswith(port):
            return netloc[: -len(port)]
    return netloc


def same_origin(origin: str, host: str) -> bool:
    """``Origin`` names this server: its ``host:port`` is the request's ``Host``."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    mine = _default_port(parts.scheme, host.strip())
    return bool(mine) and _default_port(parts.scheme, parts.netloc) == mine


def check_write(method: str, headers: dict[str, str]) -> None:
    """The web-safety rules of a write (see the module docstring); reads pass."""
    if method.upper() in SAFE_METHODS:
        return
    origin = headers.get("origin")
    if origin is not None and origin.strip().lower() == "null":
        raise LaneboardError(
            "FORBIDDEN",
            "a write from an opaque origin (Origin: null) is refused",
            "write from the laneboard dashboard itself, or from a program with a bearer token",
        )
    if origin is not None and not same_origin(origin, headers.get("host", "")):
        raise LaneboardError(
            "FORBIDDEN",
            f"cross-site writes are refused (Origin {origin[:80]!r} is not this server)",
            "write from the laneboard dashboard itself, or from a program with a bearer token",
        )
    if headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
        raise LaneboardError(
            "FORBIDDEN",
            "cross-site writes are refused (Sec-Fetch-Site says another site sent it)",
            "write from the laneboard dashboard itself, or from a program with a bearer token",
        )
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        shown = f"Content-Type {media[:60]!r}" if media else "no Content-Type"
        raise LaneboardError(
            "UNSUPPORTED_MEDIA_TYPE",
            f"a write needs Content-Type: application/json, not {shown}",
            "send the body as JSON with Content-Type: application/json (also when it is empty)",
        )
    length = headers.get("content-length", "").strip()
    if length.isdigit() and int(length) > MAX_BODY:
        raise _too_big()


def _too_big() -> LaneboardError:
    return LaneboardError(
        "BAD_INPUT",
        f"the request body is larger than {MAX_BODY} bytes",
        "send less: split the write, or keep long text in files the card points to",
    )


def _bounded(receive: Any) -> Any:
    """``receive`` that refuses a body growing past ``MAX_BODY`` (chunked uploads)."""
    seen = 0

    async def wrapped() -> Any:
        nonlocal seen
        message = await receive()
        if message.get("type") == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY:
                raise _too_big()
        return message

    return wrapped


def actor_of(scope: Scope) -> Actor:
    actor = scope.get("state", {}).get(ACTOR_KEY)
    if not isinstance(actor, Actor):
        raise LaneboardError("UNAUTHORIZED", "no caller identity", "send a bearer token")
    return actor
