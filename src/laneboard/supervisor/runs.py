"""Driving runs: one run's step (enforcement and convergence), ``lb run``'s finite loop
(``RunDriver``) and ``lb start``'s per-run clock with backoff and health (``RunsClock``).

A run's step reads only the run's own cards and turns. It enforces a stop — a draining
run's queued turns are withdrawn (their claims released), a force-stop interrupts its
running turns — and ends the stop once nothing of the run is left running; otherwise it
classifies the run (``domain.runs.converge``) and records the iteration
(``board.run_loop``). The passes themselves (claims and dispatch, workflow, lanes) are
the supervisor's own, reused: ``lb run`` scopes the claims of its ticks to its run, and
every tick leaves the cards of a run that is not active or degraded unclaimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laneboard.board import run_loop
from laneboard.board.runs import Run, load
from laneboard.domain.runs import TICKED, Convergence, RunStatus, converge, tick_backoff_ms
from laneboard.domain.status import Status
from laneboard.supervisor import records
from laneboard.supervisor.runtime import Runtime

if TYPE_CHECKING:
    from laneboard.supervisor.loop import Supervisor
    from laneboard.supervisor.pool import Pool


def convergence_of(rt: Runtime, run_id: int) -> Convergence:
    with rt.store.read() as tx:
        statuses = tx.run_card_statuses(run_id)
        turns = len(tx.run_queue_rows(run_id))
    return converge(statuses, turns)


def withdraw_queued(rt: Runtime, run: Run) -> list[int]:
    """A stopping run starts no new turn: its queued dispatches are withdrawn and their
    cards' claims released (back to todo), each in one transaction."""
    withdrawn: list[int] = []
    with rt.store.write() as tx:
        for row in tx.run_queue_rows(run.id, ("pending",)):
            records.set_row(tx, int(row["id"]), state="failed", last_error="the run is stopping")
            card = tx.card(int(row["card_id"]))
            if card is not None and card.status is Status.IN_PROGRESS:
                rt.board.move_in(tx, rt.actor, card, Status.TODO, reason="run stopping")
            withdrawn.append(int(row["id"]))
    return withdrawn


def step(rt: Runtime, pool: Pool | None, run_id: int, *, count: bool = True) -> Run:
    """One step of a run (see the module's docstring); returns the run as it is now.
    ``count``: an iteration of ``lb run`` (counted and recorded); without it (``lb start``)
    a run whose convergence did not change is left unwritten."""
    with rt.store.read() as tx:
        run = load(tx, run_id)
    if run.status is RunStatus.DRAINING:
        withdraw_queued(rt, run)
        if run.stop_mode == "force" and pool is not None:
            with rt.store.read() as tx:
                ids = {int(r["card_id"]) for r in tx.run_queue_rows(run.id, ("processing",))}
            pool.force_stop(ids)
        done = run_loop.finish_stop(rt.store, run.id)
        return done or run
    if run.status not in TICKED and run.status is not RunStatus.PAUSED:
        return run
    conv = convergence_of(rt, run.id)
    same = (run.convergence_state, run.convergence_reason) == (conv.state, conv.reason)
    if not count and same and run.status is RunStatus.ACTIVE and not conv.converged:
        return run  # lb start's idle tick of an unchanged run reads and writes nothing
    return run_loop.record_iteration(rt.store, run.id, conv, count=count)


# -- lb run: the finite loop --------------------------------------------------------------------
@dataclass
class LoopResult:
    run_id: int
    status: str
    reason: str  # converged, failed, iteration_limit, canceled, stopped
    iterations: int
    convergence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "exit": self.reason,
            "iterations": self.iterations,
            "convergence": self.convergence,
        }


IterationFn = Callable[[], None]


class RunDriver:
    """``lb run``'s loop over one run, called from the supervisor's loop on every turn.

    The first iteration runs at once; later ones are due on a ticker started with the
    loop (a slow iteration eats into the wait, missed slots are skipped); after a failed
    one the retry waits the retry backoff. Both successful and failed iterations count
    toward a positive iteration limit. Reaching the error threshold fails the run
    (``board.run_loop.record_error``); the iteration limit and cancellation end the loop
    without ending the run.
    """

    def __init__(
        self,
        sup: Supervisor,
        run_id: int,
        passes: IterationFn,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sup = sup
        self.rt = sup.rt
        self.run_id = run_id
        self.passes = passes
        self.monotonic = monotonic
        run = self.rt.board.run_record(run_id)
        self.options = run.options
        self.started = monotonic()
        self.due = self.started
        self.done = 0
        self.result: LoopResult | None = None

    def __call__(self) -> None:
        if self.result is not None or self.monotonic() < self.due:
            return
        opts = self.options
        try:
            self.passes()
            run = step(self.rt, self.sup.pool, self.run_id)
            ok = True
        except Exception as exc:  # an iteration's error: retried below the threshold
            self.rt.log.error("run", f"iteration failed: {type(exc).__name__}: {exc}")
            run = run_loop.record_error(self.rt.store, self.run_id, f"{type(exc).__name__}: {exc}")
            ok = False
        self.done += 1
        if ok:
            interval = opts.interval_ms / 1000
            slots = int((self.monotonic() - self.started) // interval) + 1
            self.due = self.started + slots * interval
        else:
            self.due = self.monotonic() + opts.retry_backoff_ms / 1000
        finished = self._finished(run)
        if finished is not None:
            self.result = LoopResult(
                run.id,
                run.status.value,
                finished,
                self.done,
                {"state": run.convergence_state, "reason": run.convergence_reason},
            )
            self.sup.stop_event.set()

    def _finished(self, run: Run) -> str | None:
        if run.status is RunStatus.FAILED:
            return "failed"
        if run.status in (RunStatus.COMPLETED, RunStatus.BLOCKED):
            return "converged"
        if run.status is RunStatus.STOPPED:
            return "stopped"
        limit = self.options.limit
        if limit is not None and self.done >= limit:
            return "iteration_limit"
        return None

    def canceled(self) -> LoopResult:
        run = self.rt.board.run_record(self.run_id)
        return LoopResult(
            run.id,
            run.status.value,
            "canceled",
            self.done,
            {"state": run.convergence_state, "reason": run.convergence_reason},
        )


# -- lb start: every run on its own clock -------------------------------------------------------
@dataclass
class RunHealth:
    failures: int = 0
    next_at: float = 0.0
    last_error: str | None = None
    ticks: int = 0


StepFn = Callable[[Runtime, "Pool | None", int], Any]


class RunsClock:
    """Ticks every run the supervisor drives (active, degraded, draining; not an
    orchestrated run, which ``lb orchestrate`` drives) on its own interval; a run whose tick fails waits 250 ms doubling to 30 s (reset by a success)
    and is marked degraded, and the other runs keep their own clocks. It never creates
    a run."""

    def __init__(self, rt: Runtime, pool: Pool | None, step_fn: StepFn | None = None) -> None:
        self.rt = rt
        self.pool = pool
        self.step_fn: StepFn = step_fn or (lambda r, p, rid: step(r, p, rid, count=False))
        self.health: dict[int, RunHealth] = {}

    def __call__(self) -> None:
        try:
            with self.rt.store.autocommit() as tx:  # one statement
                rows = tx.ticked_run_rows([s.value for s in TICKED])
        except Exception as exc:  # the store is failing: the next turn of the loop retries
            self.rt.log.error("runs", f"runs not read: {type(exc).__name__}: {exc}")
            return
        runs = [Run.from_row(r) for r in rows]
        now = time.monotonic()
        seen = set()
        for run in runs:
            seen.add(run.id)
            h = self.health.setdefault(run.id, RunHealth())
            if now < h.next_at:
                continue
            try:
                self.step_fn(self.rt, self.pool, run.id)
            except Exception as exc:
                h.failures += 1
                h.last_error = f"{type(exc).__name__}: {exc}"
                wait = tick_backoff_ms(h.failures)
                h.next_at = time.monotonic() + wait / 1000
                self.rt.log.error("runs", f"run {run.id} tick failed: {h.last_error}")
                try:
                    run_loop.mark_degraded(self.rt.store, run.id, h.last_error, h.failures, wait)
                except Exception as exc2:  # the store itself is failing: health shows it
                    self.rt.log.error("runs", f"run {run.id} not marked degraded: {exc2}")
                continue
            h.failures, h.last_error, h.ticks = 0, None, h.ticks + 1
            h.next_at = time.monotonic() + run.options.interval_ms / 1000
        for gone in set(self.health) - seen:
            del self.health[gone]

    def report(self) -> dict[str, Any]:
        """The runs part of the supervisor's health: which runs fail, and why."""
        failing = [
            {"run": rid, "failures": h.failures, "reason": h.last_error}
            for rid, h in sorted(self.health.items())
            if h.failures
        ]
        return {"runs": len(self.health), "failing": failing}
