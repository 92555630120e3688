"""What the lanes' passes looked at and left is looked at again only after a while, not
at every tick: a lane the clean-up keeps (its card ended with work not merged), a record
the sweep keeps (its tree is gone but not its branch), a done card whose landing was
refused. Those passes run at nearly every move on the board and each look is a few git
commands (for a clone of a remote, a fetch), so a board's history of kept lanes made every
tick slower (seen: six git commands per kept lane per tick; 357 ms per clean-up pass with
30 kept lanes, 0.5 ms after)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.supervisor.helpers import config
from tests.workspace.helpers import ME, claimed, commit_file, deliver, gated, git, project

from laneboard.board.service import Board
from laneboard.domain.clock import MINUTE_MS, FakeClock
from laneboard.domain.model import Card
from laneboard.store import Store
from laneboard.supervisor import ticker as ticks
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime
from laneboard.workspace import git as g
from laneboard.workspace.land import LAND_RETRY_MS, LANE_RECHECK_MS
from laneboard.workspace.lanes import lanes_of


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, ...]]]:
    """Every git command the runtime runs, as it runs them."""
    calls: list[tuple[str, ...]] = []
    run = g.git

    def counted(cwd: str, *args: str, **kw: Any) -> Any:
        calls.append(args)
        return run(cwd, *args, **kw)

    monkeypatch.setattr(g, "git", counted)
    yield calls


def runtime(store: Store, tmp: Path) -> Runtime:
    return Runtime(store, config(tmp), "m", LogFile(str(tmp / "log")), pool_alive=lambda: True)


def one_lane(store: Store, repo: Path, title: str) -> tuple[Board, Card, str]:
    """A board on ``repo`` with one claimed card and its lane."""
    board = gated(store)
    project(board, repo)
    card, lane = claimed(board, title=title)
    return board, card, lane


def clean(rt: Runtime, calls: list[tuple[str, ...]]) -> int:
    """One clean-up pass; the git commands it ran."""
    calls.clear()
    ticks.PASSES["cleanup"](rt, False)
    return len(calls)


def test_a_lane_kept_for_unmerged_work_is_judged_again_only_after_a_while(
    store: Store, repo: Path, clock: FakeClock, tmp_path: Path, git_calls: list[tuple[str, ...]]
) -> None:
    board, canceled, lane = one_lane(store, repo, "abandoned")
    commit_file(lane, "wip.txt", "unmerged\n", "unmerged work")
    board.move(ME, canceled.ref, "canceled")
    rt = runtime(store, tmp_path)
    assert clean(rt, git_calls) > 0  # judged when first seen ended: kept
    assert clean(rt, git_calls) == 0  # nothing to ask git again so soon
    clock.advance(LANE_RECHECK_MS - MINUTE_MS)
    assert clean(rt, git_calls) == 0
    # a card that ends now is judged at once, whatever waits
    other, _ = claimed(board, title="second")
    board.move(ME, other.ref, "canceled")
    assert clean(rt, git_calls) > 0
    with store.read() as tx:  # cleaned (nothing to keep), then its record swept
        assert lanes_of(tx, other.id) == []
    # the work is merged by hand meanwhile: once due, the lane is cleaned after all
    git(repo, "pull", "-q", "--no-rebase", "--no-edit", lane, "lane/P-1")
    clock.advance(2 * MINUTE_MS)
    assert clean(rt, git_calls) > 0
    with store.read() as tx:
        assert lanes_of(tx, canceled.id) == []
    assert clean(rt, git_calls) == 0


def test_a_record_kept_for_its_branch_is_swept_again_only_after_a_while(
    store: Store, repo: Path, clock: FakeClock, tmp_path: Path, git_calls: list[tuple[str, ...]]
) -> None:
    _, card, lane = one_lane(store, repo, "tree removed by hand")
    git(repo, "branch", "lane/P-1")  # its branch was published into the user's repository
    shutil.rmtree(lane)
    rt = runtime(store, tmp_path)
    assert clean(rt, git_calls) > 0  # probed: the branch resolves, the record is kept
    assert clean(rt, git_calls) == 0
    git(repo, "branch", "-D", "lane/P-1")
    clock.advance(LANE_RECHECK_MS)
    clean(rt, git_calls)
    with store.read() as tx:
        assert lanes_of(tx, card.id) == []  # tree and branch gone: the record is dropped


def test_a_refused_landing_is_tried_again_after_a_minute_not_at_every_tick(
    store: Store, repo: Path, clock: FakeClock, tmp_path: Path, git_calls: list[tuple[str, ...]]
) -> None:
    """A done card whose lane was never merged (closed without the landing gate) is landed
    by the lanes pass; while its landing is refused (here: the checkout has uncommitted
    changes) it used to be tried, a handful of git commands, at every tick."""
    board, card, lane = one_lane(store, repo, "closed without landing")
    commit_file(lane, "feature.txt", "new\n", "the work")
    deliver(board, card)
    (repo / "README.md").write_text("local edit\n")
    Board(store).move(ME, card.ref, "done")  # a tool without the landing gate
    rt = runtime(store, tmp_path)
    land = ticks.PASSES["lanes"]
    git_calls.clear()
    assert land(rt, False)["landed"] == [] and git_calls  # refused: uncommitted changes
    git_calls.clear()
    land(rt, False)
    assert git_calls == []  # not tried again at once
    git(repo, "checkout", "--", "README.md")
    clock.advance(LAND_RETRY_MS)
    assert [r["card"] for r in land(rt, False)["landed"]] == [card.ref]
    assert (repo / "feature.txt").read_text() == "new\n"
