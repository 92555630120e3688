"""What every command shares: the store, the caller's identity, output and errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import cached_property
from typing import Any

from laneboard.cli.generated import fail
from laneboard.cli.identity import keep_token, remote_url, token_from_env, user_name
from laneboard.domain.clock import Clock, SystemClock
from laneboard.domain.model import Actor, ActorKind
from laneboard.errors import LaneboardError
from laneboard.ops.clock import PinnedClock, pinned_ms
from laneboard.ops.render import table

__all__ = [
    "Context",
    "clock_from_env",
    "fail",
    "keep_token",
    "table",
    "token_from_env",
    "user_name",
]


def clock_from_env() -> Clock:
    """``LANEBOARD_NOW`` (ISO-8601 or epoch ms) pins the clock for reproducible scripts."""
    raw = os.environ.get("LANEBOARD_NOW")
    if not raw:
        return SystemClock()
    return PinnedClock(pinned_ms(raw))


class Context:
    """Lazily opened resources for one command."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.json = bool(getattr(args, "json", False))

    @cached_property
    def clock(self) -> Clock:
        return clock_from_env()

    @cached_property
    def store(self) -> Any:
        db = getattr(self.args, "db", None)
        if db is None and remote_url() is not None:
            command = " ".join(getattr(self.args, "words", ()) or ("this command",))
            raise LaneboardError(
                "CONFIG_INVALID",
                f"lb {command} works on a local board, not through LANEBOARD_URL",
                "run it where the board's database is (unset LANEBOARD_URL, or pass --db)",
            )
        from laneboard.store import open_store

        # only the set-up commands (creates_board: init, project add, start, the service
        # enables) create a board; every other command refuses one that does not exist
        create = bool(getattr(self.args, "creates_board", False))
        return open_store(db, self.clock, create=create)

    @cached_property
    def board(self) -> Any:
        from laneboard.board.service import Board
        from laneboard.workspace.hooks import install

        return install(Board(self.store))  # delivery verification and landing gates

    @cached_property
    def actor(self) -> Actor:
        token = token_from_env()
        if token:
            from laneboard.board.tokens import Tokens

            return Tokens(self.store).resolve(token)
        return Actor(ActorKind.HUMAN, user_name())

    def out(self, data: Any, text: str | None = None) -> None:
        if self.json:
            sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        elif text is not None:
            sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
