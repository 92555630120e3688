"""A machine that made a card's lane and then lost its claim to another machine leaves
nothing behind: no checkout in its clone, no lane record naming it.

Every machine's poll admits a ready card (makes its lane in its own clone of the remote)
before it claims it, and racing machines all see the card at once. Two simulated machines
(``a`` and ``b``, each its own state directory) poll one board; ``a`` is made to lose the
race at the worst moment: its lane is made, and ``b`` claims before ``a`` does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.test_passes_failover import Hosts
from tests.cluster.test_remote_lanes import bare_remote
from tests.workspace.helpers import ME, commit_file, deliver, git

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import Card
from laneboard.supervisor import instances, poll, records
from laneboard.supervisor import ticker as ticks
from laneboard.supervisor.runtime import Runtime
from laneboard.workspace.lanes import lane_for


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[tuple[Runtime, Runtime, Board]]:
    hosts = Hosts(pg_url, tmp_path)
    try:
        a, b = hosts.runtime("a"), hosts.runtime("b")
        bare, _ = bare_remote(tmp_path)
        a.board.add_project(ME, "P", remote=str(bare))
        yield a, b, a.board
    finally:
        hosts.close()


def _b_claims_first(
    monkeypatch: pytest.MonkeyPatch, a: Runtime, b: Runtime, card: Card, *, held: str = ""
) -> dict[str, Any]:
    """When ``a`` has made the card's lane and is about to claim it, ``b`` polls and claims.
    ``held``: a file found in ``a``'s lane then (work of an earlier attempt there)."""
    seen: dict[str, Any] = {}
    real = poll.write_brief

    def brief_then_race(target: str, c: Card) -> None:
        if c.id == card.id and target.startswith(a.clones) and "b" not in seen:
            seen["a_target"] = target
            if held:
                Path(target, held).write_text("work\n")
            seen["b"] = poll.poll(b)
        real(target, c)

    monkeypatch.setattr(poll, "write_brief", brief_then_race)
    return seen


def _slots(rt: Runtime) -> list[str]:
    root = os.path.join(rt.clones, "P", ".worktrees")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def test_a_lane_made_for_a_claim_lost_to_another_machine_is_removed(
    cluster: tuple[Runtime, Runtime, Board], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, board = cluster
    card = board.create_card(ME, "P", "do the thing", assignee="worker")
    race = _b_claims_first(monkeypatch, a, b, card)

    lost = poll.poll(a)

    assert race["b"].claimed == [card.ref] and lost.claimed == [] and lost.lost == 1
    assert not os.path.exists(race["a_target"]), "a's lane of a card b claimed is left on a"
    assert _slots(a) == []
    with a.store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.machine == "b" and rec.path.startswith(b.clones)
    assert os.path.isdir(rec.path) and _slots(b) == ["P-1"]
    said = Path(a.log.path).read_text()
    assert 'msg="claim lost: claimed meanwhile, most often by another supervisor"' in said


def test_a_lost_claims_lane_holding_anything_else_is_left_as_it_is(
    cluster: tuple[Runtime, Runtime, Board], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, board = cluster
    card = board.create_card(ME, "P", "do the thing", assignee="worker")
    race = _b_claims_first(monkeypatch, a, b, card, held="notes.txt")

    assert poll.poll(a).lost == 1
    assert Path(race["a_target"], "notes.txt").read_text() == "work\n"
    with a.store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.machine == "b"


def test_a_review_lane_made_for_a_claim_lost_to_the_reviewed_lanes_machine_is_removed(
    cluster: tuple[Runtime, Runtime, Board], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``b`` ran the reviewed round, so it reviews in that lane and records no review lane:
    the record ``a`` made when it admitted the review must not outlive ``a``'s lost claim
    (the winner would take it for the review's lane, and nobody would ever clean it)."""
    a, b, board = cluster
    work = board.create_card(ME, "P", "the work", assignee="worker", acceptance_mode="off")
    assert poll.poll(b).claimed == [work.ref]
    with b.store.read() as tx:
        worked = lane_for(tx, work.id, 1)
    assert worked is not None
    commit_file(Path(worked.path), "feature.txt", "new\n", "the work")
    deliver(b.board, board.get(work.ref))
    review = board.create_card(
        ME, "P", "review it", assignee="reviewer", meta={"review_of": work.id, "review_round": 1}
    )
    race = _b_claims_first(monkeypatch, a, b, review)

    lost = poll.poll(a)

    assert race["b"].claimed == [review.ref] and lost.lost == 1
    assert not os.path.exists(race["a_target"])
    assert _slots(a) == []
    with a.store.read() as tx:
        assert lane_for(tx, review.id, 1) is None, "a's review lane record outlived its claim"


def _take_over(a: Runtime, b: Runtime, board: Board, card: Card) -> str:
    """``a`` claims the card and makes its lane; the card goes back to todo (``a`` was
    fenced: its handoff closed, its instance no longer live) and ``b`` claims it with a lane
    of its own; then ``a`` comes back. Returns ``a``'s lane."""
    assert poll.poll(a).claimed == [card.ref]
    with a.store.read() as tx:
        mine = lane_for(tx, card.id, 1)
    assert mine is not None and mine.machine == "a"
    with a.store.write() as tx:
        a_rows = records.queue_rows(tx, machine="a")
        for row in a_rows:
            records.set_row(tx, row.id, state="done")
        assert a.instance is not None
        instances.stop(tx, a.instance)
    board.move(ME, card.ref, "todo")
    assert poll.poll(b).claimed == [card.ref]
    clock = a.store.clock
    assert isinstance(clock, FakeClock)
    clock.advance(ms=1)  # a new instance of a, started a moment later
    with a.store.write() as tx:
        a.instance = instances.register(tx, "a", a.config.time, {"pid": 1})
    return mine.path


def test_a_fenced_hosts_clean_lane_of_a_card_taken_over_is_removed_by_its_cleanup(
    cluster: tuple[Runtime, Runtime, Board],
) -> None:
    """A host that comes back after its card was taken over finds the lane it made for it
    named by no record: its cleanup pass removes it when it holds nothing of its own, and
    leaves one that holds work where it is."""
    a, b, board = cluster
    first = board.create_card(ME, "P", "first", assignee="worker")
    clean = _take_over(a, b, board, first)
    second = board.create_card(ME, "P", "second", assignee="worker")
    held = _take_over(a, b, board, second)
    Path(held, "half.txt").write_text("half done\n")  # the killed agent's work in progress

    result = ticks.PASSES["cleanup"](a, False)

    assert not os.path.exists(clean)
    assert Path(held, "half.txt").read_text() == "half done\n"
    got = sorted((o["path"], o["action"]) for o in result["orphans"])
    assert got == sorted([(clean, "removed"), (held, "kept")])
    assert _slots(b) == ["P-1", "P-2"], "b's lanes are b's"


def test_the_sweep_leaves_a_lane_a_live_handoff_runs_in_and_a_worktree_added_by_hand(
    cluster: tuple[Runtime, Runtime, Board],
) -> None:
    a, b, board = cluster
    card = board.create_card(ME, "P", "first", assignee="worker")
    running = _take_over(a, b, board, card)
    with a.store.write() as tx:  # a handoff of a's still runs there (whatever its card says)
        (theirs,) = records.queue_rows(tx, machine="b")
        records.set_row(tx, theirs.id, state="done")
        (row,) = records.queue_rows(tx, machine="a", states=("done",))
        records.set_row(tx, row.id, state="processing")
    clone = Path(a.clones, "P")
    git(clone, "worktree", "add", "-q", "-b", "mine", str(clone / ".worktrees" / "mine"))

    result = ticks.PASSES["cleanup"](a, False)

    assert result["orphans"] == []
    assert os.path.isdir(running) and _slots(a) == ["P-1", "mine"]
