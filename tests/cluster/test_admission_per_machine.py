"""A card's admission failures are counted by each machine on its own.

Before, one deferral row per card held every machine's failures: in a cluster, a machine
that could not make lanes (its disk full, its clone broken) backed the card off on every
other machine too, and held it for a person at its own fifth failure, though another
machine could run it at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from tests.cluster.test_passes_failover import Hosts
from tests.cluster.test_remote_lanes import bare_remote
from tests.workspace.helpers import ME

from laneboard.domain.clock import HOUR_MS
from laneboard.domain.model import Card, Project
from laneboard.domain.status import Status
from laneboard.supervisor import instances, poll
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.status import status_report
from laneboard.workspace.admit import AdmissionError
from laneboard.workspace.lane_admit import LaneAdmitter

FULL = "cannot prepare the lane: [Errno 28] No space left on device"


class Cluster(NamedTuple):
    hosts: Hosts
    a: Runtime
    b: Runtime
    card: Card


def failing(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every admission on ``rt``'s machine fails for the card, as on a full disk."""
    assert isinstance(rt.admitter, LaneAdmitter)

    def admit(card: Card, project: Project) -> Any:
        raise AdmissionError(FULL, code="WORKSPACE_ERROR")

    monkeypatch.setattr(rt.admitter, "admit", admit)


@pytest.fixture
def cluster(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """Machines ``a`` (whose admissions fail) and ``b`` on project P with a remote."""
    hosts = Hosts(store_url, tmp_path)
    try:
        a, b = hosts.runtime("a"), hosts.runtime("b")
        bare, _ = bare_remote(tmp_path)
        a.board.add_project(ME, "P", remote=str(bare))
        failing(a, monkeypatch)
        card = a.board.create_card(ME, "P", "the card", assignee="worker")
        yield Cluster(hosts, a, b, card)
    finally:
        hosts.close()


def fail_on(rt: Runtime, hosts: Hosts, times: int) -> list[dict[str, Any]]:
    """``times`` polls of ``rt`` that fail to admit the card, each once the backoff of the
    one before ended (the last failure is the latest thing that happened)."""
    out: list[dict[str, Any]] = []
    for _ in range(times):
        hosts.clock.advance(HOUR_MS)
        res = poll.poll(rt)
        assert res.claimed == [], res.to_dict()
        out += [d for d in res.deferred if d.get("counted")]
    return out


def test_one_machines_failures_neither_hold_the_card_nor_back_it_off_elsewhere(
    cluster: Cluster,
) -> None:
    hosts, a, b, card = cluster
    counted = fail_on(a, hosts, poll.HOLD_AT + 1)
    assert [d["failures"] for d in counted] == list(range(1, poll.HOLD_AT + 2))
    assert counted[-1]["left_to"] == ["b"]
    got = a.board.get(card.ref)
    assert got.status is Status.TODO and not got.meta.get("hold_reason"), got.meta
    rows = status_report(a.store, machine="a")["deferrals"]
    assert [(d["card"], d["machine"], d["failures"]) for d in rows] == [
        (card.ref, "a", poll.HOLD_AT + 1)
    ]
    res = poll.poll(a)  # a backs off: its last failure was just now
    assert [d["reason"] for d in res.deferred] == ["backoff"]
    assert poll.poll(b).claimed == [card.ref]  # b is not held back by a's backoff
    assert status_report(a.store, machine="a")["deferrals"] == []


def test_the_card_is_held_once_every_live_machine_failed(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts, a, b, card = cluster
    failing(b, monkeypatch)
    fail_on(a, hosts, poll.HOLD_AT)
    assert a.board.get(card.ref).status is Status.TODO  # left to b
    fail_on(b, hosts, poll.HOLD_AT)
    held = a.board.get(card.ref)
    assert held.status is Status.BLOCKED and held.meta["hold_cycle"] == "admission", held.meta
    assert status_report(a.store, machine="a")["deferrals"] == []


def test_a_machine_that_stopped_is_not_waited_for(cluster: Cluster) -> None:
    hosts, a, b, card = cluster
    with b.store.write() as tx:
        assert b.instance is not None
        instances.stop(tx, b.instance)
    fail_on(a, hosts, poll.HOLD_AT)
    held = a.board.get(card.ref)
    assert held.status is Status.BLOCKED and held.meta["hold_cycle"] == "admission", held.meta


def test_a_card_left_to_machines_that_never_take_it_is_held_in_the_end(
    cluster: Cluster,
) -> None:
    """A live machine that never tries the card (its roles do not take it) keeps it from a
    person for ``LEAVE_UNTIL`` failures of the machine that tries, no longer."""
    hosts, a, _, card = cluster
    fail_on(a, hosts, poll.LEAVE_UNTIL - 1)
    assert a.board.get(card.ref).status is Status.TODO
    fail_on(a, hosts, 1)
    assert a.board.get(card.ref).status is Status.BLOCKED
