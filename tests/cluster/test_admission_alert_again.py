"""A card's admission alert is sent again when its admission fails again after it
recovered: the alert's ledger entry ends with the failures that raised it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cluster.test_passes_failover import Hosts
from tests.workspace.helpers import ME

from laneboard.supervisor import poll


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
        where = tmp_path / "proj"
        where.mkdir()
        a.board.add_project(ME, "D", path=str(where))
        card = a.board.create_card(ME, "D", "in a plain directory", assignee="worker")

        def fail_three_times() -> None:
            shutil.rmtree(where)
            for _ in range(poll.BACKOFF_FROM):
                assert poll.poll(a).claimed == []
                hosts.clock.advance(minutes=5)  # past any backoff
            where.mkdir()

        fail_three_times()
        assert _alerts(a.board.events(0, limit=10_000)) == 1
        assert poll.poll(a).claimed == [card.ref]  # admitted: the condition is over
        a.board.move(ME, card.ref, "todo")  # back, for a second attempt
        with a.store.write() as tx:
            tx.run("UPDATE queue SET state = 'done' WHERE card_id = ?", (card.id,))
        fail_three_times()
        assert _alerts(a.board.events(0, limit=10_000)) == 2, "the second outage went unsaid"
    finally:
        hosts.close()
