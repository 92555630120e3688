"""Shared pieces for the lane tests: a real git repository and a board with the gates."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from laneboard.board.service import Board
from laneboard.domain.model import Card, agent, human
from laneboard.store import Store
from laneboard.workspace.hooks import install
from laneboard.workspace.lane_admit import LaneAdmitter

ME = human("alice")


def git(cwd: Path | str, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def commit_file(cwd: Path | str, name: str, text: str, message: str = "change") -> str:
    path = Path(cwd) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    git(cwd, "add", name)
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


def gated(store: Store) -> Board:
    return install(Board(store))


def project(
    board: Board, repo: Path, key: str = "P", base_ref: str | None = None, **config: Any
) -> int:
    return board.add_project(ME, key, path=str(repo), base_ref=base_ref, config=config or None).id


def claimed(board: Board, key: str = "P", **card: Any) -> tuple[Card, str]:
    """A card claimed by a worker; returns it and its lane directory."""
    c = board.create_card(ME, key, card.pop("title", "do the thing"), **card)
    target = LaneAdmitter(board).admit(c, board.project(key))
    c = board.claim(ME, c.ref, holder="worker")
    return c, target


def deliver(board: Board, c: Card) -> Card:
    worker = agent("worker", c.id, c.claim_epoch)
    board.report(worker, c.ref, "done, see the lane")
    return board.move(worker, c.ref, "in_review")
