"""Landing on acceptance, refusals that keep the card in review, cleanup and the sweep."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.workspace.helpers import ME, claimed, commit_file, deliver, gated, git, project

from laneboard.board.service import Board
from laneboard.domain.model import Card
from laneboard.errors import LaneboardError
from laneboard.store import Store
from laneboard.workspace.land import cleanup_terminal, land, land_closed, sweep_lanes
from laneboard.workspace.lanes import lane_for, lanes_of


def delivered(
    board: Board, repo: Path, name: str = "feature.txt", text: str = "new\n"
) -> tuple[Card, str]:
    project(board, repo)
    card, lane = claimed(board, acceptance_mode="off")
    commit_file(lane, name, text, "the work")
    return deliver(board, card), lane


def test_acceptance_lands_the_lane_with_a_merge_commit(store: Store, repo: Path) -> None:
    board = gated(store)
    card, _ = delivered(board, repo)
    done = board.move(ME, card.ref, "done")
    head = git(repo, "rev-parse", "HEAD")
    assert done.status.value == "done" and done.meta["merge_commit"] == head
    assert git(repo, "rev-list", "--parents", "-n", "1", "HEAD").count(" ") == 2  # --no-ff
    assert (repo / "feature.txt").read_text() == "new\n"
    assert git(repo, "log", "-1", "--format=%s") == "Land P-1: do the thing (lane/P-1)"
    with store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and (rec.state, rec.merge_commit, rec.target_branch) == (
        "landed",
        head,
        "main",
    )
    moved = [e for e in board.events(0, limit=1000) if e.type == "card.moved"][-1]
    assert moved.payload["merge_commit"] == head
    # landing again is idempotent: the recorded merge is returned, nothing merges twice
    again = land(store, board.get(card.ref))
    assert again.landed and again.already and again.merge_commit == head
    assert git(repo, "rev-parse", "HEAD") == head


def assert_kept_in_review(board: Board, store: Store, repo: Path, card: Card, lane: str) -> str:
    before = git(repo, "rev-parse", "HEAD")
    with pytest.raises(LaneboardError) as err:
        board.move(ME, card.ref, "done")
    assert err.value.code == "LANDING_BLOCKED" and err.value.http_status == 409
    after = board.get(card.ref)
    assert after.status.value == "in_review" and after.version == card.version
    assert "merge_commit" not in after.meta
    assert git(repo, "rev-parse", "HEAD") == before
    assert Path(lane).is_dir() and git(lane, "rev-parse", "--abbrev-ref", "HEAD") == "lane/P-1"
    with store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.state == "active"
    notes = [c for c in board.comments(card.ref) if c.kind.value == "note"]
    assert len(notes) == 1 and notes[0].author == "Lanes"
    assert f"lb land {card.ref}" in notes[0].body
    return notes[0].body


def test_a_dirty_checkout_keeps_the_card_in_review(store: Store, repo: Path) -> None:
    board = gated(store)
    card, lane = delivered(board, repo)
    (repo / "README.md").write_text("local edit\n")
    body = assert_kept_in_review(board, store, repo, card, lane)
    assert "uncommitted changes to tracked files (README.md)" in body and "git stash" in body
    assert (repo / "README.md").read_text() == "local edit\n"
    # once the checkout is clean the same move lands
    git(repo, "checkout", "--", "README.md")
    assert board.move(ME, card.ref, "done").meta["merge_commit"] == git(repo, "rev-parse", "HEAD")


def test_a_conflict_keeps_the_card_in_review_and_aborts_the_merge(store: Store, repo: Path) -> None:
    board = gated(store)
    card, lane = delivered(board, repo, "README.md", "from the lane\n")
    commit_file(repo, "README.md", "from main\n", "main edits the same line")
    body = assert_kept_in_review(board, store, repo, card, lane)
    assert "conflicts in README.md" in body and "git merge --no-ff lane/P-1" in body
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    assert (repo / "README.md").read_text() == "from main\n"


def test_a_card_without_a_lane_closes_without_landing(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    c = board.create_card(ME, "P", "by hand", acceptance_mode="off")
    c = board.claim(ME, c.ref, holder="worker")
    before = git(repo, "rev-parse", "HEAD")
    done = board.move(ME, deliver(board, c).ref, "done")
    assert done.status.value == "done" and "merge_commit" not in done.meta
    assert git(repo, "rev-parse", "HEAD") == before
    assert land(store, done).skipped == "has no lane record"


def test_cleanup_removes_only_merged_lanes_of_terminal_cards(store: Store, repo: Path) -> None:
    board = gated(store)
    landed, landed_lane = delivered(board, repo)
    Path(landed_lane, ".laneboard", "P-1").mkdir(parents=True)
    Path(landed_lane, ".laneboard", "P-1", "card.md").write_text("brief\n")
    board.move(ME, landed.ref, "done")
    canceled, canceled_lane = claimed(board, title="abandoned")
    commit_file(canceled_lane, "wip.txt", "unmerged\n", "unmerged work")
    board.move(ME, canceled.ref, "canceled")
    open_card, open_lane = claimed(board, title="still going")
    got = {r["lane"]: r for r in cleanup_terminal(store)}
    assert got["lane/P-1"]["action"] == "cleaned"
    assert got["lane/P-2"]["action"] == "kept"
    assert "holds work not merged" in got["lane/P-2"]["reason"]
    assert "lane/P-3" not in got  # not terminal: never looked at
    branches = git(repo, "branch", "--list", "--format=%(refname:short)").split()
    assert "lane/P-1" not in branches and not Path(landed_lane).exists()
    # the unmerged work lives in the lane's own repository, which is kept
    assert "lane/P-2" not in branches and Path(canceled_lane, "wip.txt").is_file()
    assert git(canceled_lane, "log", "-1", "--format=%s") == "unmerged work"
    assert Path(open_lane).is_dir()
    kept = repo / ".laneboard" / "lanes" / "P-1" / "P-1" / "card.md"
    assert kept.read_text() == "brief\n"
    with store.read() as tx:
        assert [ln.state for ln in lanes_of(tx, landed.id)] == ["cleaned"]
        assert [ln.state for ln in lanes_of(tx, canceled.id)] == ["active"]
    # a second pass changes nothing and still never deletes the unmerged branch
    assert [r["action"] for r in cleanup_terminal(store)] == ["kept"]
    assert Path(canceled_lane, "wip.txt").is_file()
    assert open_card.status.value == "in_progress"


def test_sweep_drops_a_record_only_when_tree_and_branch_are_gone(
    store: Store, repo: Path, tmp_path: Path
) -> None:
    board = gated(store)
    project(board, repo)
    gone, gone_lane = claimed(board, title="gone")
    branch_left, left_lane = claimed(board, title="branch survives")
    git(repo, "branch", "lane/P-2")  # its branch was published into the user's repository
    shutil.rmtree(gone_lane)
    shutil.rmtree(left_lane)
    # a third lane whose repository cannot be probed at all
    other = tmp_path / "other"
    shutil.copytree(repo, other)
    board.add_project(ME, "Q", path=str(other))
    lost, _ = claimed(board, key="Q", title="repo vanishes")
    shutil.rmtree(other)
    dropped = sweep_lanes(store)
    assert [d["lane"] for d in dropped] == ["lane/P-1"]
    with store.read() as tx:
        assert lanes_of(tx, gone.id) == []
        assert len(lanes_of(tx, branch_left.id)) == 1
        assert len(lanes_of(tx, lost.id)) == 1
    assert [e.type for e in board.events(0, limit=1000)].count("lane.dropped") == 1


def test_a_card_closed_without_landing_is_landed_by_the_lanes_pass(
    store: Store, repo: Path
) -> None:
    board = gated(store)
    card, lane = delivered(board, repo)
    (repo / "README.md").write_text("local edit\n")
    # a tool without the landing gate closes the card: nothing is merged yet
    done = Board(store).move(ME, card.ref, "done")
    assert done.status.value == "done" and "merge_commit" not in done.meta
    [first] = land_closed(store)
    assert first["landed"] is False and "uncommitted changes" in first["blocked"]
    [again] = land_closed(store)  # the same refusal: no second note
    assert again["blocked"] == first["blocked"]
    notes = [c for c in board.comments(card.ref) if c.kind.value == "note"]
    assert len(notes) == 1 and f"lb land {card.ref}" in notes[0].body
    assert board.get(card.ref).status.value == "done" and Path(lane).is_dir()
    # once the checkout is clean the next pass merges it
    git(repo, "checkout", "--", "README.md")
    [merged] = land_closed(store)
    assert merged["landed"] is True and merged["merge_commit"] == git(repo, "rev-parse", "HEAD")
    assert board.get(card.ref).meta["merge_commit"] == merged["merge_commit"]
    assert (repo / "feature.txt").read_text() == "new\n"
    assert land_closed(store) == []  # landed lanes are not looked at again
    assert [r["action"] for r in cleanup_terminal(store)] == ["cleaned"]


def test_a_lane_merged_by_hand_records_the_merge_commit(store: Store, repo: Path) -> None:
    board = gated(store)
    card, _ = delivered(board, repo, "hand.txt", "merged by hand\n")
    tip = git(repo, "rev-parse", "refs/heads/lane/P-1")
    git(repo, "merge", "-q", "--no-ff", "-m", "manual merge", "lane/P-1")
    merge = git(repo, "rev-parse", "HEAD")
    commit_file(repo, "later.txt", "later\n", "a later commit on main")
    done = board.move(ME, card.ref, "done")
    assert done.meta["merge_commit"] == merge != tip  # the merge, not the lane's tip


def test_an_untracked_file_in_the_way_is_named(store: Store, repo: Path) -> None:
    board = gated(store)
    card, lane = delivered(board, repo, "fresh.txt", "from the lane\n")
    (repo / "fresh.txt").write_text("the person's own, untracked\n")
    body = assert_kept_in_review(board, store, repo, card, lane)
    assert "would overwrite untracked files in the checkout: fresh.txt" in body
    assert (repo / "fresh.txt").read_text() == "the person's own, untracked\n"
