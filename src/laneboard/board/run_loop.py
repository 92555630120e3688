"""The runtime's writes to a run: iterations, retries, failure, degradation, the end of a
stop, and resuming a run with ``lb run --resume``.

Each is one transaction. A write that changes the run's status, its convergence state or
reason appends its ``run.*`` event in that transaction; the iteration counter and the
time of the last tick are bookkeeping written with the tick (an event per tick would
wake every follower of the log once a second for nothing).
"""

from __future__ import annotations

from typing import Any

from laneboard.board.authority import Caller, require
from laneboard.board.runs import Run, load
from laneboard.domain.model import Actor, system
from laneboard.domain.runs import ENDED, Convergence, RunStatus
from laneboard.secrets import scrub
from laneboard.store import Store
from laneboard.store.tx import Tx

RUNNER = system("Orchestrator")
ERROR_LIMIT = 2000


def _event(tx: Tx, run: Run, type_: str, payload: dict[str, Any], actor: Actor = RUNNER) -> None:
    tx.append_event(type_, actor, project_id=run.project_id, run_id=run.id, payload=payload)


def record_iteration(store: Store, run_id: int, conv: Convergence, *, count: bool = True) -> Run:
    """A successful iteration: its convergence, the error streak reset; a converged run
    ends ``completed`` or ``blocked`` with its end time."""
    with store.write() as tx:
        run = load(tx, run_id, lock=True)
        fields: dict[str, Any] = {
            "convergence_state": conv.state,
            "convergence_reason": conv.reason,
            "consecutive_errors": 0,
            "last_tick_at": tx.now(),
        }
        if count:
            fields["iterations"] = run.iterations + 1
        ended = conv.converged and run.status in (RunStatus.ACTIVE, RunStatus.DEGRADED)
        if ended:
            fields.update(status=conv.state, ended_at=tx.now())
        elif run.status is RunStatus.DEGRADED:
            fields["status"] = RunStatus.ACTIVE.value
        got = tx.update_run(run.id, fields, version=run.version)
        if got is None:  # a person's transition won meanwhile; the next tick sees it
            return load(tx, run_id)
        new = Run.from_row(got)
        if (run.convergence_state, run.convergence_reason) != (conv.state, conv.reason):
            _event(tx, run, "run.converging", {**conv.to_dict(), "iteration": new.iterations})
        if ended:
            _event(tx, run, f"run.{conv.state}", {"reason": conv.reason, **conv.to_dict()})
        elif run.status is RunStatus.DEGRADED:
            _event(tx, run, "run.recovered", {"from": "degraded", "to": "active"})
        return new


def record_error(store: Store, run_id: int, error: str, *, count: bool = True) -> Run:
    """A failed iteration: a retry event below the threshold; at it, the run fails."""
    error = scrub(error)[:ERROR_LIMIT]
    with store.write() as tx:
        run = load(tx, run_id, lock=True)
        attempt = run.consecutive_errors + 1
        limit = run.options.max_consecutive_errors
        fields: dict[str, Any] = {
            "consecutive_errors": attempt,
            "errors_total": run.errors_total + 1,
            "last_error": error,
            "last_tick_at": tx.now(),
        }
        if count:
            fields["iterations"] = run.iterations + 1
        failed = attempt >= limit and run.status not in ENDED
        if failed:
            fields.update(status=RunStatus.FAILED.value, ended_at=tx.now())
        got = tx.update_run(run.id, fields, version=run.version)
        if got is None:
            return load(tx, run_id)
        new = Run.from_row(got)
        payload = {
            "iteration": new.iterations,
            "attempt": attempt,
            "max_attempts": limit,
            "error": error,
        }
        if failed:
            _event(tx, run, "run.failed", payload)
        else:
            _event(tx, run, "run.retry", {**payload, "next_delay_ms": run.options.retry_backoff_ms})
        return new


def mark_degraded(store: Store, run_id: int, error: str, failures: int, next_ms: int) -> Run:
    """``lb start``: a tick of this run failed; it is degraded until one succeeds."""
    error = scrub(error)[:ERROR_LIMIT]
    with store.write() as tx:
        run = load(tx, run_id, lock=True)
        fields: dict[str, Any] = {
            "last_error": error,
            "errors_total": run.errors_total + 1,
            "last_tick_at": tx.now(),
        }
        becomes = run.status is RunStatus.ACTIVE
        if becomes:
            fields["status"] = RunStatus.DEGRADED.value
        got = tx.update_run(run.id, fields, version=run.version)
        if got is None:
            return load(tx, run_id)
        _event(
            tx,
            run,
            "run.tick_failed",
            {"error": error, "failures": failures, "next_delay_ms": next_ms,
             "from": run.status.value, "to": got["status"]},
        )  # fmt: skip
        return Run.from_row(got)


def finish_stop(store: Store, run_id: int) -> Run | None:
    """A draining run whose turns have all finished is stopped (None: not yet)."""
    with store.write() as tx:
        run = load(tx, run_id, lock=True)
        if run.status is not RunStatus.DRAINING or tx.run_queue_rows(run.id):
            return None
        got = tx.update_run(
            run.id,
            {"status": RunStatus.STOPPED.value, "ended_at": tx.now()},
            version=run.version,
            statuses=[RunStatus.DRAINING.value],
        )
        if got is None:
            return None
        _event(tx, run, "run.stopped", {"from": "draining", "to": "stopped",
                                        "stop_mode": run.stop_mode})  # fmt: skip
        return Run.from_row(got)


def reopen(store: Store, actor: Actor, run_id: int, options: dict[str, Any]) -> Run:
    """``lb run --resume``: a run that ended (or never started) becomes active again with
    the options given; an active, paused or draining run keeps its status."""
    require(actor, Caller.PERSON, "resume runs")
    with store.write() as tx:
        run = load(tx, run_id, lock=True)
        fields: dict[str, Any] = {"options": options}
        reopened = run.status in ENDED or run.status is RunStatus.STARTING
        if reopened:
            fields.update(
                status=RunStatus.ACTIVE.value, ended_at=None, consecutive_errors=0, stop_mode=None
            )
        got = tx.update_run(run.id, fields, version=run.version)
        assert got is not None  # the row is locked (PostgreSQL) or the writer is alone
        if reopened:
            _event(tx, run, "run.resumed", {"from": run.status.value, "to": "active",
                                            "options": options}, actor)  # fmt: skip
        return Run.from_row(got)
