"""On PostgreSQL a resident's tick takes the cluster's pass leases, and starts their
runs, in one statement, and ends the runs and gives the leases back in one more
(``store.pass_sql``); each step was a transaction of four round trips. The statement
must keep the rules of ``Tx.acquire_locks``: a lease that is free, expired or already
the caller's is taken; one another holds unexpired is left to it."""

from __future__ import annotations

import pytest

from laneboard.domain.clock import FakeClock
from laneboard.store import Store
from laneboard.store.pass_sql import end_and_give_back, take_and_start
from laneboard.store.q_ops import PASS_RUNS_PRUNE_EVERY

PASSES = {"pass:workflow": "workflow", "pass:lanes": "lanes", "pass:patrol": "patrol"}


@pytest.fixture
def pg(postgres_store: Store) -> Store:
    return postgres_store


def _leases(store: Store) -> dict[str, tuple[str, int]]:
    with store.read() as tx:
        got = tx.all("SELECT name, holder, expires_at FROM locks")
    return {str(r["name"]): (str(r["holder"]), int(r["expires_at"])) for r in got}


def test_free_expired_and_own_leases_are_taken_with_a_run_each(pg: Store, clock: FakeClock) -> None:
    now = clock.now_ms()
    with pg.write() as tx:
        assert tx.acquire_locks(["pass:lanes"], "other", 60_000) == {"pass:lanes"}
        assert tx.acquire_locks(["pass:patrol"], "gone", 1_000) == {"pass:patrol"}
    clock.advance(seconds=2)  # "gone"'s lease has expired, "other"'s has not
    runs = take_and_start(pg, PASSES, "me", "m1", 30_000)
    assert set(runs) == {"workflow", "patrol"}
    leases = _leases(pg)
    assert leases["pass:workflow"] == ("me", now + 2_000 + 30_000)
    assert leases["pass:patrol"] == ("me", now + 2_000 + 30_000)
    assert leases["pass:lanes"] == ("other", now + 60_000)
    with pg.read() as tx:
        rows = {str(r["name"]): r for r in tx.pass_runs()}
    assert set(rows) == {"workflow", "patrol"}
    assert {int(r["id"]) for r in rows.values()} == set(runs.values())
    assert all(r["machine"] == "m1" and r["finished_at"] is None for r in rows.values())
    clock.advance(seconds=1)
    again = take_and_start(pg, PASSES, "me", "m1", 30_000)  # its own: renewed, new runs
    assert set(again) == {"workflow", "patrol"} and not set(again.values()) & set(runs.values())
    assert _leases(pg)["pass:workflow"] == ("me", now + 3_000 + 30_000)


def test_runs_end_and_only_the_callers_leases_go(pg: Store, clock: FakeClock) -> None:
    runs = take_and_start(pg, {"pass:workflow": "workflow"}, "me", "m1", 30_000)
    with pg.write() as tx:
        tx.acquire_locks(["pass:lanes"], "other", 60_000)
    clock.advance(seconds=5)
    end_and_give_back(pg, "me", runs, ["pass:workflow", "pass:lanes"])
    assert set(_leases(pg)) == {"pass:lanes"}  # another's lease is not the caller's to give
    with pg.read() as tx:
        [row] = tx.pass_runs("workflow")
    assert int(row["finished_at"]) == clock.now_ms()
    end_and_give_back(pg, "me", {}, [])  # nothing: no statement


def test_a_run_whose_id_is_a_multiple_prunes_the_log_to_a_day(pg: Store, clock: FakeClock) -> None:
    old = take_and_start(pg, {"pass:workflow": "workflow"}, "me", "m1", 30_000)
    clock.advance(seconds=2 * 86_400)
    with pg.write() as tx:  # the next run's id is a multiple of PASS_RUNS_PRUNE_EVERY
        tx.run(
            "SELECT setval(pg_get_serial_sequence('pass_runs', 'id'), ?)",
            (PASS_RUNS_PRUNE_EVERY - 1,),
        )
    new = take_and_start(pg, {"pass:workflow": "workflow"}, "me", "m1", 30_000)
    assert new == {"workflow": PASS_RUNS_PRUNE_EVERY}
    with pg.read() as tx:
        assert [int(r["id"]) for r in tx.pass_runs()] == [PASS_RUNS_PRUNE_EVERY]
    assert old["workflow"] != PASS_RUNS_PRUNE_EVERY


def test_a_run_starts_when_its_lease_was_got_not_when_its_statement_began(
    named_pg_url: str,
) -> None:
    """A take that waits for the holder's give-back to commit records its run from the
    moment it got the lease (the server's clock then), so the log never shows two runs of
    one pass overlapping: the run given back ends before the next one starts."""
    import threading

    import psycopg
    from tests.supervisor.helpers import wait_for

    from laneboard.domain.clock import SystemClock
    from laneboard.store import open_store

    store = open_store(named_pg_url, SystemClock())
    name = named_pg_url.rsplit("application_name=", 1)[1]
    try:
        take_and_start(store, {"pass:workflow": "workflow"}, "a", "m1", 60_000)
        with psycopg.connect(named_pg_url) as giving_back:  # a's give-back, not yet committed
            giving_back.execute("DELETE FROM locks WHERE name = 'pass:workflow'")
            got: dict[str, int] = {}
            taker = threading.Thread(
                target=lambda: got.update(
                    take_and_start(store, {"pass:workflow": "workflow"}, "b", "m2", 60_000)
                )
            )
            taker.start()

            def waiting() -> bool:  # b's statement has begun and waits for a's row
                with store.read() as tx:
                    return bool(tx.scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = ? "
                        "AND wait_event_type = 'Lock'", (name,)
                    ))  # fmt: skip

            wait_for(waiting, timeout=30, what="the take to wait for the give-back")
            row = giving_back.execute(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
            ).fetchone()
            assert row is not None
            given_back_at = int(row[0])
            giving_back.commit()
        taker.join(30)
        assert got == {"workflow": got["workflow"]}
        with store.read() as tx:
            started = int(
                tx.scalar("SELECT started_at FROM pass_runs WHERE id = ?", (got["workflow"],))
            )
        assert started >= given_back_at
    finally:
        store.close()
