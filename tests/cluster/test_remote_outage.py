"""A project's remote that cannot be fetched is the project's problem, not each card's.

Before, every ready card of the project counted the failure toward its own bound: within
a minute of an outage (two machines retrying at once) each was held ``blocked`` for a
person, and each poll pass ran one failing fetch per card.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cluster.test_passes_failover import Hosts
from tests.cluster.test_remote_lanes import bare_remote, counting_fetches
from tests.workspace.helpers import ME

from laneboard.domain.clock import FakeClock
from laneboard.domain.status import Status
from laneboard.supervisor import alerts, poll
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.status import status_report
from laneboard.workspace.lane_admit import LaneAdmitter

KEY = "project_admission|P|a"


@pytest.fixture
def host(pg_url: str, tmp_path: Path) -> Iterator[tuple[Runtime, Path]]:
    hosts = Hosts(pg_url, tmp_path)
    try:
        a = hosts.runtime("a")
        assert isinstance(a.admitter, LaneAdmitter)
        bare, _ = bare_remote(tmp_path)
        a.board.add_project(ME, "P", remote=str(bare))
        yield a, bare
    finally:
        hosts.close()


def test_an_unreachable_remote_defers_the_projects_cards_uncounted_and_says_so_once(
    host: tuple[Runtime, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, bare = host
    first = a.board.create_card(ME, "P", "before", assignee="worker")
    assert poll.poll(a).claimed == [first.ref]  # this machine's clone exists
    away = bare.with_name("moved.git")
    bare.rename(away)
    refs = [a.board.create_card(ME, "P", f"card {i}", assignee="worker").ref for i in range(3)]
    fetches = counting_fetches(monkeypatch)

    for _ in range(6):  # more than the bound a card's own failures are held at
        res = poll.poll(a)
        assert res.claimed == []
        assert {d["card"] for d in res.deferred} == set(refs)
        assert not any(d["counted"] for d in res.deferred), res.deferred
        assert res.retry_at is not None and res.retry_at - a.now() <= poll.PROJECT_RETRY_MS
        advance(a, poll.PROJECT_RETRY_MS)
    assert len(fetches) == 6, "one fetch per retry, not one per card"
    for ref in refs:
        card = a.board.get(ref)
        assert card.status is Status.TODO and not card.meta.get("hold_reason"), ref
    with a.store.read() as tx:
        assert tx.scalar("SELECT count(*) FROM deferrals") == 0
        raised = alerts.alert(tx, KEY)
    assert raised is not None and "moved" not in str(raised.payload)
    assert str(bare) in str(raised.payload["detail"])
    assert "does not appear to be a git repository" in str(raised.payload["detail"])
    health = status_report(a.store, machine="a")["health"]
    assert health["state"] == "degraded"
    assert any("machine a cannot prepare cards of P" in r for r in health["reasons"]), health

    away.rename(bare)  # the remote is back (its next try is due)
    assert sorted(poll.poll(a).claimed) == sorted(refs)
    with a.store.read() as tx:
        assert alerts.alert(tx, KEY) is None, "the alert outlived the outage"
    assert status_report(a.store, machine="a")["projects_failing"] == []


def advance(rt: Runtime, ms: int) -> None:
    clock = rt.store.clock
    assert isinstance(clock, FakeClock)
    clock.advance(ms)


def test_a_remote_that_failed_is_not_tried_again_before_its_retry_whatever_wakes_the_poll(
    host: tuple[Runtime, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote that does not answer holds a fetch for its whole timeout: each wake-up of
    the poll (every event on the board) tried it again, and every other project's cards
    waited behind it. Within ``PROJECT_RETRY_MS`` of a failure its cards wait without a
    try; the other projects' cards are claimed at once."""
    a, bare = host
    (tmp_path / "here").mkdir()
    a.board.add_project(ME, "H", path=str(tmp_path / "here"))
    first = a.board.create_card(ME, "P", "before", assignee="worker")
    assert poll.poll(a).claimed == [first.ref]  # this machine's clone exists
    waiting = a.board.create_card(ME, "P", "on the remote", assignee="worker")
    bare.rename(bare.with_name("moved.git"))
    fetches = counting_fetches(monkeypatch)
    assert poll.poll(a).claimed == []
    tried = len(fetches)
    assert tried == 1
    for i in range(3):  # news wakes the poll again and again within the retry's wait
        other = a.board.create_card(ME, "H", f"elsewhere {i}", assignee="worker")
        res = poll.poll(a)
        assert res.claimed == [other.ref], res.to_dict()
        assert [d["card"] for d in res.deferred] == [waiting.ref]
        assert "moved.git" not in res.deferred[0]["reason"] and not res.deferred[0]["counted"]
        assert res.retry_at is not None and res.retry_at <= a.now() + poll.PROJECT_RETRY_MS
        advance(a, poll.PROJECT_RETRY_MS // 4)
    assert len(fetches) == tried, "the failing remote was fetched again before its retry"
    advance(a, poll.PROJECT_RETRY_MS)
    assert poll.poll(a).claimed == []
    assert len(fetches) == tried + 1, "tried again once its retry is due"


def test_a_machine_without_a_projects_directory_never_counts_against_its_cards(
    pg_url: str, tmp_path: Path
) -> None:
    """Only a machine that has a path project's checkout admits its cards: another machine's
    failing admissions neither back a card off nor hold it. Alone, the machine says the
    directory is missing as a health reason; beside another machine's supervisor (which may
    hold the checkout), it only lists it."""
    hosts = Hosts(pg_url, tmp_path)
    try:
        a = hosts.runtime("a")
        where = tmp_path / "elsewhere"
        a.board.add_project(ME, "D", path=str(where))  # not on this machine
        card = a.board.create_card(ME, "D", "in a plain directory", assignee="worker")
        for _ in range(6):  # more than the bound a card's own failures are held at
            res = poll.poll(a)
            assert res.claimed == [] and not any(d["counted"] for d in res.deferred)
        assert a.board.get(card.ref).status is Status.TODO
        with a.store.read() as tx:
            assert tx.scalar("SELECT count(*) FROM deferrals") == 0
        alone = status_report(a.store, machine="a")
        assert [p["code"] for p in alone["projects_failing"]] == ["PROJECT_DIR_MISSING"]
        assert alone["health"]["state"] == "degraded", alone["health"]
        hosts.runtime("b")  # another machine's supervisor runs: D may live there
        beside = status_report(a.store, machine="a")
        assert beside["projects_failing"] and beside["health"]["state"] == "ok", beside["health"]
        where.mkdir()  # the checkout is here now
        assert poll.poll(a).claimed == [card.ref]
        assert status_report(a.store, machine="a")["projects_failing"] == []
    finally:
        hosts.close()
