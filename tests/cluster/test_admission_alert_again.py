"""A card's admission alert is sent again when its admission fails again after it
recovered: the alert's ledger entry ends with the failures that raised it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cluster.test_passes_failover import Hosts
from tests.workspace.helpers import ME, commit_file, git

from laneboard.supervisor import poll
from laneboard.workspace.lanes import lane_for


def _alerts(board_events: list[object]) -> int:
    return sum(
        1
        for e in board_events
        if getattr(e, "type", "") == "alert"
        and getattr(e, "payload", {}).get("alert") == "admission_failing"
    )


def test_a_cards_admission_alert_is_sent_again_after_it_recovered(
    pg_url: str, tmp_path: Path
) -> None:
    hosts = Hosts(pg_url, tmp_path)
    try:
        a = hosts.runtime("a")
        repo = tmp_path / "proj"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        commit_file(repo, "README.md", "hello\n", "initial")
        a.board.add_project(ME, "D", path=str(repo))
        card = a.board.create_card(ME, "D", "in a lane", assignee="worker")
        slot = repo / ".worktrees" / "D-1"

        def fail_three_times() -> None:
            # the card's lane slot holds a checkout of another branch: the card's own failure
            slot.mkdir(parents=True)
            git(slot, "init", "-q", "-b", "other")
            commit_file(slot, "x.txt", "x\n", "not the lane")
            for _ in range(poll.BACKOFF_FROM):
                assert poll.poll(a).claimed == []
                hosts.clock.advance(minutes=5)  # past any backoff
            shutil.rmtree(slot)

        fail_three_times()
        assert _alerts(a.board.events(0, limit=10_000)) == 1
        assert poll.poll(a).claimed == [card.ref]  # admitted: the condition is over
        a.board.move(ME, card.ref, "todo")  # back, for a second attempt
        with a.store.write() as tx:
            tx.run("UPDATE queue SET state = 'done' WHERE card_id = ?", (card.id,))
        with a.store.read() as tx:
            lane = lane_for(tx, card.id, 1)
        assert lane is not None
        shutil.rmtree(lane.path)  # its first lane went (as the cleanup would take it)
        fail_three_times()
        assert _alerts(a.board.events(0, limit=10_000)) == 2, "the second outage went unsaid"
    finally:
        hosts.close()
