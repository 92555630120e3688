"""One machine name, one supervisor: a second host that starts under a name another host
already runs under is refused, whatever its process ids say, and a host whose beats
stopped can be replaced under its name."""

from __future__ import annotations

import json

import pytest

from laneboard.domain.clock import FakeClock
from laneboard.domain.timecontract import TimeContract
from laneboard.errors import LaneboardError
from laneboard.store import open_store
from laneboard.supervisor import instances

TIME = TimeContract()


def _elsewhere(store_url: str, clock: FakeClock) -> str:
    """Another host's supervisor, registered under ``box``: its pid means nothing here
    (the lowest pid that is surely not alive on this host), and it has its own place."""
    store = open_store(store_url, clock)
    with store.write() as tx:
        iid = "box:4194302:1"
        where = "other-host|00000000-0000-0000-0000-000000000000|pid:[1]"
        tx.insert_supervisor(iid, "box", 4_194_302, tx.now(), {"pid": 4_194_302, "where": where})
    store.close()
    return iid


def test_a_second_host_under_a_name_in_use_is_refused(store_url: str) -> None:
    clock = FakeClock(1_700_000_000_000)
    other = _elsewhere(store_url, clock)
    store = open_store(store_url, clock)
    with pytest.raises(LaneboardError) as err, store.write() as tx:
        instances.register(tx, "box", TIME, {"pid": 1})
    assert err.value.code == "SUPERVISOR_RUNNING"
    assert "other-host" in err.value.message and "LANEBOARD_MACHINE" in err.value.fix
    with store.read() as tx:  # the other host's row is left as it was
        row = instances.current(tx, "box")
        assert row is not None and row["id"] == other and row["state"] == "running"
        v = instances.verdict(row, tx.now(), TIME)
    assert v.state == "running", v  # its pid is not looked up on this host
    store.close()


def test_a_host_whose_beats_stopped_is_replaced_under_its_name(store_url: str) -> None:
    clock = FakeClock(1_700_000_000_000)
    other = _elsewhere(store_url, clock)
    clock.advance(seconds=TIME.pool_stale + 1)  # its beats stopped: it is unresponsive
    store = open_store(store_url, clock)
    with store.write() as tx:
        iid = instances.register(tx, "box", TIME, {"pid": 1})
    with store.read() as tx:
        row = instances.current(tx, "box")
        assert row is not None and row["id"] == iid
        assert json.loads(row["info"])["where"] == instances.here()
        old = tx.one("SELECT state FROM supervisors WHERE id = ?", (other,))
    assert old is not None and old["state"] != "running"
    store.close()
