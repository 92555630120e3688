"""Landing conflicts go back to the worker; after the bound they wait for a person."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.supervisor import workflow_apply
from laneboard.workspace.brief import render

from .helpers import RealNowClock, Running, config, settled, wait_for


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args], cwd=repo, check=True,
        capture_output=True, text=True,
    ).stdout  # fmt: skip


def _two_sides(board: Board, resolve: list[dict[str, Any]]) -> tuple[str, str]:
    first = board.create_card(
        human(), "C", "side a", acceptance_mode="off",
        meta={"script": [{"write": "shared.txt", "content": "a\n"}, {"deliver": "a"}]},
    ).ref  # fmt: skip
    second = board.create_card(
        human(), "C", "side b", acceptance_mode="off",
        meta={"script": {
            "r1": [{"sleep": 2}, {"write": "shared.txt", "content": "b\n"}, {"deliver": "b"}],
            "r2": resolve,
        }},
    ).ref  # fmt: skip
    return first, second


def test_a_conflict_goes_back_to_its_worker_and_lands(
    sqlite_store_url: str, repo: Path, tmp_path: Path
) -> None:
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "C", path=str(repo))
    resolve = [
        {"run": "grep -q '<<<<<<<' shared.txt"},  # the lane holds both sides, in conflict
        {"run": "grep -q 'Landing conflict' .laneboard/{card}/card.md"},  # told in its brief
        {"run": "printf 'a\\nb\\n' > shared.txt"},
        {"deliver": "both sides kept"},
    ]
    first, second = _two_sides(board, resolve)
    with Running(sqlite_store_url, config(tmp_path, max_concurrency=2), clock):
        wait_for(
            lambda: all(board.get(r).status.value == "done" for r in (first, second)),
            timeout=120, what="both sides landed",
        )  # fmt: skip
        wait_for(lambda: settled(store), what="turns recorded")
    card = board.get(second)
    assert card.delivery_round == 2 and card.meta["conflict_attempts"] == 1
    assert card.meta["landing_conflict"]["files"] == ["shared.txt"]
    assert _git(repo, "show", "main:shared.txt") == "a\nb\n"  # the worker's resolution
    brief = render(card)  # the round-2 brief, as written into its lane
    assert "## Landing conflict" in brief and "`shared.txt`" in brief
    assert "git show main:shared.txt" in brief
    store.close()


def test_at_the_bound_a_conflict_waits_for_a_person(
    sqlite_store_url: str, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workflow_apply, "CONFLICT_ATTEMPTS", 0)
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "C", path=str(repo))
    first, second = _two_sides(board, [{"deliver": "never reached"}])
    with Running(sqlite_store_url, config(tmp_path, max_concurrency=2), clock):
        wait_for(lambda: board.get(first).status.value == "done", timeout=120, what="a landed")
        wait_for(
            lambda: bool(board.get(second).meta.get("acceptance_blocked")),
            timeout=120, what="b waits for a person",
        )  # fmt: skip
    card = board.get(second)
    assert card.status.value == "in_review" and card.delivery_round == 1
    assert card.meta["acceptance_blocked"]["code"] == "LANDING_BLOCKED"
    assert "conflict_attempts" not in card.meta
    store.close()


def test_a_delivery_that_leaves_the_conflict_markers_is_refused_and_never_lands(
    sqlite_store_url: str, repo: Path, tmp_path: Path
) -> None:
    """The round that resolves a landing conflict starts from the merge with its markers.
    A worker that delivers without resolving them (its checks may still pass) is refused:
    the markers never reach the branch the project lands on."""
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "C", path=str(repo))
    careless = [
        {"run": "printf 'b again\\n' >> shared.txt"},  # both sides' markers left in place
        {"deliver": "done"},
    ]
    first, second = _two_sides(board, careless)
    with Running(sqlite_store_url, config(tmp_path, max_concurrency=2), clock):
        wait_for(lambda: board.get(first).status.value == "done", timeout=120, what="a landed")
        wait_for(
            lambda: board.get(second).status.value in ("done", "blocked"),
            timeout=180, what="b landed or held",
        )  # fmt: skip
        wait_for(lambda: settled(store), what="turns recorded")
    card = board.get(second)
    assert card.delivery_round == 2 and card.status.value == "blocked"
    assert "<<<<<<<" not in _git(repo, "show", "main:shared.txt")
    assert _git(repo, "show", "main:shared.txt") == "a\n"
    store.close()


@pytest.mark.timeout(30)
def test_the_marker_check_reads_only_regular_files_of_the_lane(tmp_path: Path) -> None:
    """The runtime reads the conflicting files of a conflict round for markers: a file an
    agent turned into a pipe (whose open would wait forever for a writer) or a link out of
    its lane is not read, and counts as holding no marker."""
    import os
    from dataclasses import replace

    from laneboard.workspace.verify import unresolved_conflicts

    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    board.add_project(human(), "P")
    info = {"round": 2, "files": ["pipe.txt", "link.txt", "kept.txt"]}
    card = replace(board.create_card(human(), "P", "t"), delivery_round=2,
                   meta={"conflict_resolve": info})  # fmt: skip
    tmp_path = tmp_path / "lane"
    tmp_path.mkdir()
    os.mkfifo(tmp_path / "pipe.txt")
    outside = tmp_path.parent / "outside.txt"
    outside.write_text("<<<<<<< HEAD\n")
    (tmp_path / "link.txt").symlink_to(outside)
    (tmp_path / "kept.txt").write_text("a\n=======\nb\n")
    assert unresolved_conflicts(card, str(tmp_path)) == ["kept.txt"]
