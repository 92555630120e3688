"""What every command shares: the store, the caller's identity, output and errors."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from datetime import datetime
from functools import cached_property
from typing import Any

from laneboard.domain.clock import Clock, SystemClock
from laneboard.domain.model import Actor, ActorKind
from laneboard.errors import LaneboardError


class FixedClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms


def clock_from_env() -> Clock:
    """``LANEBOARD_NOW`` (ISO-8601 or epoch ms) pins the clock for reproducible scripts."""
    raw = os.environ.get("LANEBOARD_NOW")
    if not raw:
        return SystemClock()
    if raw.isdigit():
        return FixedClock(int(raw))
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"LANEBOARD_NOW={raw!r} is not a time",
            "use ISO-8601 like 2026-01-01T00:00:00Z or epoch ms",
        ) from None
    return FixedClock(int(dt.timestamp() * 1000))


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
        from laneboard.store import open_store

        return open_store(getattr(self.args, "db", None), self.clock)

    @cached_property
    def board(self) -> Any:
        from laneboard.board.service import Board
        from laneboard.workspace.hooks import install

        return install(Board(self.store))  # delivery verification and landing gates

    @cached_property
    def actor(self) -> Actor:
        token = _token_from_env()
        if token:
            from laneboard.board.tokens import Tokens

            return Tokens(self.store).resolve(token)
        name = os.environ.get("LANEBOARD_USER") or _user()
        return Actor(ActorKind.HUMAN, name)

    def out(self, data: Any, text: str | None = None) -> None:
        if self.json:
            sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        elif text is not None:
            sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def _token_from_env() -> str | None:
    """``LANEBOARD_TOKEN_FILE`` (kept current by the pool across claims) wins over
    ``LANEBOARD_TOKEN``."""
    path = os.environ.get("LANEBOARD_TOKEN_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read().strip()
        except OSError:
            text = ""
        if text:
            return text
    return os.environ.get("LANEBOARD_TOKEN") or None


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "human"


def fail(err: LaneboardError, as_json: bool) -> int:
    sys.stderr.write(err.line() + "\n")
    if as_json:
        sys.stdout.write(json.dumps({"error": err.to_dict()}, indent=2, sort_keys=True) + "\n")
    return err.exit_code


def table(rows: list[list[str]], headers: list[str]) -> str:
    if not rows:
        return "(none)"
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)
