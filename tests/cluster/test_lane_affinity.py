"""A card back in todo in the middle of a round stays with the machine holding its lane.

An escalated card's turn ends; once a person answers, the card is ready again in the same
round — and so is a card a person moves back to todo. Its lane, with the round's work so
far, and its agent session are on the machine that ran it: another machine's poll leaves
the card to it while that machine is live, for ``LANE_AFFINITY_MS``, then claims it (the
round starts again there). Two simulated machines (``a`` and ``b``) on one board and one
bare remote; the board's clock moves only when a test advances it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cluster.test_passes_failover import Hosts
from tests.cluster.test_remote_lanes import bare_remote
from tests.workspace.helpers import ME

from laneboard.board.service import Board
from laneboard.domain.model import Card
from laneboard.supervisor import instances, poll, records
from laneboard.supervisor.runtime import Runtime
from laneboard.workspace.lanes import lane_for


@pytest.fixture
def cluster(store_url: str, tmp_path: Path) -> Iterator[tuple[Hosts, Runtime, Runtime, Board]]:
    hosts = Hosts(store_url, tmp_path)
    try:
        a, b = hosts.runtime("a"), hosts.runtime("b")
        bare, _ = bare_remote(tmp_path)
        a.board.add_project(ME, "P", remote=str(bare))
        yield hosts, a, b, a.board
    finally:
        hosts.close()


def _back_in_todo_mid_round(a: Runtime, board: Board) -> tuple[Card, Path]:
    """``a`` claims a card and its agent leaves work in the lane; the turn ends (its
    handoff done) and the card is back in todo in the same round. Returns it and the lane."""
    card = board.create_card(ME, "P", "do the thing", assignee="worker")
    assert poll.poll(a).claimed == [card.ref]
    with a.store.read() as tx:
        lane = lane_for(tx, card.id, 1)
    assert lane is not None and lane.machine == "a"
    Path(lane.path, "half.txt").write_text("half done\n")
    with a.store.write() as tx:
        for row in records.queue_rows(tx, machine="a"):
            records.set_row(tx, row.id, state="done")
    board.move(ME, card.ref, "todo")
    return board.get(card.ref), Path(lane.path)


def test_another_machine_leaves_the_card_to_the_live_machine_holding_its_lane(
    cluster: tuple[Hosts, Runtime, Runtime, Board],
) -> None:
    _, a, b, board = cluster
    card, lane = _back_in_todo_mid_round(a, board)

    passed = poll.poll(b)

    assert passed.claimed == []
    (why,) = [d for d in passed.deferred if d["card"] == card.ref]
    assert why["reason"] == "its round 1 lane, with the work so far, is on machine a"
    assert why["counted"] is False
    assert poll.poll(a).claimed == [card.ref]
    with a.store.read() as tx:
        again = lane_for(tx, card.id, 1)
    assert again is not None and Path(again.path) == lane
    assert (lane / "half.txt").read_text() == "half done\n"


def test_the_card_is_claimed_elsewhere_once_its_machine_stops_or_the_wait_ends(
    cluster: tuple[Hosts, Runtime, Runtime, Board],
) -> None:
    hosts, a, b, board = cluster
    first, _ = _back_in_todo_mid_round(a, board)
    hosts.clock.advance(ms=poll.LANE_AFFINITY_MS - 1)
    assert poll.poll(b).claimed == []
    hosts.clock.advance(ms=1)  # a is live but did not take it back in time
    assert poll.poll(b).claimed == [first.ref]
    assert "was not resumed within 15 min" in Path(b.log.path).read_text()

    second, _ = _back_in_todo_mid_round(a, board)
    with a.store.write() as tx:
        assert a.instance is not None
        instances.stop(tx, a.instance)  # a stopped: nothing waits for it
    assert poll.poll(b).claimed == [second.ref]
