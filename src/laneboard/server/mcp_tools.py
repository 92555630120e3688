"""MCP tools over the board services, built with the official MCP SDK (2.x ``MCPServer``).

The same server object serves stdio (``lb mcp``) and streamable HTTP (``/mcp`` in
``lb serve``). Identity: over HTTP the caller's bearer token (or the local human on a
trusted loopback address, as for the REST API); over stdio ``LANEBOARD_TOKEN`` (or
``LANEBOARD_TOKEN_FILE``), else the local human.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from laneboard import __version__
from laneboard.board import access
from laneboard.board.service import Board
from laneboard.domain.model import Actor, ActorKind, CommentKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, bad_input
from laneboard.server.auth import ACTOR_KEY
from laneboard.server.http import validate
from laneboard.server.schemas import EVIDENCE
from laneboard.store import Store
from laneboard.workspace.hooks import install as install_gates

ActorFn = Callable[[Any], Actor]

WAIT_DEFAULT_S = 110.0
WAIT_MAX_S = 540.0

INSTRUCTIONS = (
    "laneboard board tools. Agents: read your card (get_card), heartbeat while working, "
    "ask questions with ask then wait, and deliver with a report. Humans may also create "
    "and move cards."
)


def http_actor(ctx: Any) -> Actor:
    request = ctx.request_context.request
    actor = getattr(request, "scope", {}).get("state", {}).get(ACTOR_KEY)
    if not isinstance(actor, Actor):
        raise ToolError("error UNAUTHORIZED: no caller identity — send a bearer token")
    return actor


def fixed_actor(actor: Actor) -> ActorFn:
    return lambda _ctx: actor


def open_transport() -> TransportSecuritySettings:
    """Host and origin checks are done by laneboard's own middleware for every route."""
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except LaneboardError as err:
        raise ToolError(err.line()) from None


def _human(actor: Actor, what: str) -> None:
    if actor.kind is not ActorKind.HUMAN:
        raise ToolError(f"error FORBIDDEN: only a human may {what} — ask a human to do it")


def build(store: Store, actor_of: ActorFn, *, wait_poll_s: float = 2.0) -> MCPServer:
    board = install_gates(Board(store))
    server: MCPServer = MCPServer(
        "laneboard", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @server.tool()
    def whoami(ctx: Context) -> dict[str, Any]:
        """The identity this session acts as."""
        return actor_of(ctx).to_dict()

    @server.tool()
    def get_card(ref: str, ctx: Context) -> dict[str, Any]:
        """One card with its description, acceptance, comments, reports and dependencies."""
        actor = actor_of(ctx)
        detail: dict[str, Any] = _call(lambda: access.detail(board, actor, ref))
        return detail

    @server.tool()
    def list_cards(
        ctx: Context,
        project: str | None = None,
        status: str | None = None,
        assignee: str | None = None,
        label: str | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        """Cards on the board, filtered; a card-scoped agent sees its card and dependencies."""
        actor = actor_of(ctx)
        cards = _call(
            lambda: board.list_cards(
                project=project,
                statuses=[status] if status else [],
                assignee=assignee,
                label=label,
                limit=limit,
            )
        )
        return {"cards": [c.to_dict() for c in access.filter_cards(board, actor, cards)]}

    @server.tool()
    def candidates(
        ctx: Context,
        assignee: str | None = None,
        include_unassigned: bool = False,
        stale: bool = False,
        project: str | None = None,
        limit: int = 20,
    ) -> dict[str, Any]:
        """Claimable cards, heaviest first."""
        actor = actor_of(ctx)
        got = _call(
            lambda: board.candidates(
                assignees=[assignee] if assignee else [],
                include_unassigned=include_unassigned,
                stale=stale,
                project=project,
                limit=limit,
            )
        )
        allowed = access.readable_ids(board, actor)
        return {"candidates": [c.to_dict() for c in got if allowed is None or c.card.id in allowed]}

    @server.tool()
    def comment(ref: str, body: str, ctx: Context, kind: str = "note") -> dict[str, Any]:
        """Comment on a card. A human comment on an awaiting card releases it to todo."""
        actor = actor_of(ctx)
        return dict(_call(lambda: board.comment(actor, ref, body, kind).to_dict()))

    @server.tool()
    def ask(ref: str, question: str, ctx: Context) -> dict[str, Any]:
        """Ask a question on your card (a question comment); then call wait with its id."""
        actor = actor_of(ctx)
        c = _call(lambda: board.comment(actor, ref, question, CommentKind.QUESTION.value))
        return {"question_id": c.id, "comment": c.to_dict()}

    @server.tool()
    def wait(
        ref: str, question_id: int, ctx: Context, timeout_s: float = WAIT_DEFAULT_S
    ) -> dict[str, Any]:
        """Wait (bounded) for an answer to a question: answered | moved | timeout."""
        actor = actor_of(ctx)
        if not 0 <= timeout_s <= WAIT_MAX_S:
            raise ToolError(f"error BAD_INPUT: timeout_s must be 0 to {WAIT_MAX_S:.0f}")
        start = _call(lambda: access.get(board, actor, ref))
        question = _call(lambda: _question(board, ref, question_id))
        deadline = time.monotonic() + timeout_s
        while True:
            later = _call(lambda: board.comments(ref, after=question_id))
            answers = [c for c in later if c.author != question.author]
            if answers:
                return {"state": "answered", "answer": answers[0].to_dict()}
            card = _call(lambda: board.get(ref))
            if card.status is not start.status and card.status is not Status.IN_PROGRESS:
                return {"state": "moved", "status": card.status.value}
            if time.monotonic() >= deadline:
                return {"state": "timeout", "status": card.status.value}
            time.sleep(min(wait_poll_s, max(deadline - time.monotonic(), 0.01)))

    @server.tool()
    def heartbeat(ref: str, ctx: Context) -> dict[str, Any]:
        """Refresh your claim on a card (every few minutes while working)."""
        actor = actor_of(ctx)
        return dict(_call(lambda: board.heartbeat(actor, ref).to_dict()))

    @server.tool()
    def report(
        ref: str,
        body: str,
        ctx: Context,
        commit: str | None = None,
        evidence: list[dict[str, Any]] | None = None,
        verdict: str | None = None,
    ) -> dict[str, Any]:
        """Write the current round's report (evidence: command, exit_code, digest, summary)."""
        actor = actor_of(ctx)
        ev = _evidence(evidence)
        return dict(
            _call(
                lambda: board.report(
                    actor, ref, body, commit=commit, evidence=ev, verdict=verdict
                ).to_dict()
            )
        )

    @server.tool()
    def deliver(
        ref: str,
        body: str,
        ctx: Context,
        commit: str | None = None,
        evidence: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Report and move the card to in_review in one step."""
        actor = actor_of(ctx)
        ev = _evidence(evidence)
        rep = _call(lambda: board.report(actor, ref, body, commit=commit, evidence=ev))
        card = _call(lambda: board.move(actor, ref, Status.IN_REVIEW.value))
        return {"report": rep.to_dict(), "card": card.to_dict()}

    @server.tool()
    def create_card(
        project: str,
        title: str,
        ctx: Context,
        description: str = "",
        assignee: str | None = None,
        priority: int = 2,
        labels: list[str] | None = None,
        acceptance: list[str] | None = None,
        acceptance_mode: str = "auto",
        status: str = "todo",
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Create a card (humans)."""
        actor = actor_of(ctx)
        _human(actor, "create cards over MCP")
        card = _call(
            lambda: board.create_card(
                actor,
                project,
                title,
                description=description,
                assignee=assignee,
                priority=priority,
                labels=labels or [],
                acceptance=acceptance or [],
                acceptance_mode=acceptance_mode,
                status=status,
                idempotency_key=idempotency_key,
            )
        )
        return dict(card.to_dict())

    @server.tool()
    def move_card(
        ref: str,
        to: str,
        ctx: Context,
        reason: str | None = None,
        question: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        """Move a card to another status (humans)."""
        actor = actor_of(ctx)
        _human(actor, "move cards over MCP")
        card = _call(
            lambda: board.move(actor, ref, to, reason=reason, question=question, note=note)
        )
        return dict(card.to_dict())

    return server


def _question(board: Board, ref: str, question_id: int) -> Any:
    for c in board.comments(ref):
        if c.id == question_id and c.kind is CommentKind.QUESTION:
            return c
    raise bad_input(f"comment {question_id} is not a question on {ref}", "pass the id ask returned")


def _evidence(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for i, item in enumerate(items or []):
        try:
            out.append(validate(EVIDENCE, dict(item), f"evidence[{i}]"))
        except LaneboardError as err:
            raise ToolError(err.line()) from None
    return out
