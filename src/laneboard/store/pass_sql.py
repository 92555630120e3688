"""Once-per-cluster pass leases and their runs, each step one statement (PostgreSQL).

A resident supervisor's tick takes the leases of the cluster's passes that have work and
records a run for each it got, then, after the passes, ends the runs and gives the leases
back. In a transaction of its own each step took four round trips (``BEGIN``, two
statements, ``COMMIT``); as one data-modifying statement it takes one. SQLite, whose
statements cost no round trip, keeps the transaction (``q_ops``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from laneboard.store.q_ops import (
    LEASE_CONFLICT,
    PASS_RUNS_KEPT_MS,
    PRUNE_PASS_RUNS,
    SERVER_NOW,
    prune_pass_runs,
)

# the server's clock when the expression is reached, not when the statement began
CLOCK_NOW = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

if TYPE_CHECKING:
    from laneboard.store.base import Store


def _now(store: Store) -> tuple[str, list[Any]]:
    """The statement's now, as ``Queries._stamp``: the server's wall clock, or the store's."""
    from laneboard.domain.clock import SystemClock

    if isinstance(store.clock, SystemClock):
        return SERVER_NOW, []
    return "?::bigint", [store.clock.now_ms()]


def take_and_start(
    store: Store, passes: dict[str, str], holder: str, machine: str, ttl_ms: int
) -> dict[str, int]:
    """Take (or renew) the leases of ``passes`` (lease name -> pass name) that are free,
    expired or already this holder's, and start a ``pass_runs`` row for each: pass name ->
    its run id. Leases held by others are left as they are (the caller looks at them)."""
    if not passes:
        return {}
    now, at = _now(store)
    values: list[Any] = []
    rows = []
    for lease, name in passes.items():
        rows.append(f"(?::text, ?::text, ?::text, {now}, {now} + ?::bigint)")
        values += [lease, name, holder, *at, *at, ttl_ms]
    # a run starts when its lease was got: a take that waited for a holder's give-back to
    # commit began before that give-back ended, so the statement's own time would show
    # two runs of one pass overlapping (on the server's clock; a store's own clock stands)
    started, started_at = (CLOCK_NOW, []) if now == SERVER_NOW else ("?::bigint", at)
    sql = (
        "WITH v (lease, pass, holder, at, until) AS (VALUES " + ", ".join(rows) + "), "
        "l AS (INSERT INTO locks (name, holder, acquired_at, expires_at) "
        f"SELECT lease, holder, at, until FROM v {LEASE_CONFLICT} RETURNING name) "
        "INSERT INTO pass_runs (name, holder, machine, started_at) "
        f"SELECT v.pass, v.holder, ?, {started} FROM v JOIN l ON l.name = v.lease "
        "RETURNING id, name, started_at"
    )
    got = store.write_statement(sql, [*values, machine, *started_at], announce=False)
    ids = {str(r["name"]): int(r["id"]) for r in got}
    if prune_pass_runs(ids):
        since = int(got[0]["started_at"]) - PASS_RUNS_KEPT_MS
        store.write_statement(PRUNE_PASS_RUNS, [since], announce=False)
    return ids


def end_and_give_back(store: Store, holder: str, runs: dict[str, int], leases: list[str]) -> None:
    """End these runs and give back these leases of ``holder``, in one statement."""
    if not runs and not leases:
        return
    now, at = _now(store)
    ids = list(runs.values())
    run_marks = ", ".join("?" for _ in ids) or "NULL"
    lease_marks = ", ".join("?" for _ in leases) or "NULL"
    sql = (
        f"WITH f AS (UPDATE pass_runs SET finished_at = {now} WHERE id IN ({run_marks}) "
        f"RETURNING id) DELETE FROM locks WHERE holder = ? AND name IN ({lease_marks})"
    )
    store.write_statement(sql, [*at, *ids, holder, *leases], announce=False)
