"""Runs: the statuses of a run, its transition table, its loop options and convergence.

A run groups the work toward one goal in one project. Everything here is pure: the
store keeps the rows, ``board.runs`` writes them, the supervisor drives the loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from laneboard.errors import LaneboardError


class RunStatus(StrEnum):
    STARTING = "starting"
    ACTIVE = "active"
    PAUSED = "paused-intake"
    DRAINING = "draining"
    DEGRADED = "degraded"
    STOPPED = "stopped"
    COMPLETED = "completed"
    BLOCKED = "blocked"
    FAILED = "failed"


R = RunStatus

# the person's transitions: action -> (allowed prior states, target)
TRANSITIONS: dict[str, tuple[frozenset[RunStatus], RunStatus]] = {
    "start": (frozenset({R.STOPPED, R.STARTING}), R.ACTIVE),
    "pause": (frozenset({R.ACTIVE}), R.PAUSED),
    "resume": (frozenset({R.PAUSED, R.DEGRADED}), R.ACTIVE),
    "stop": (frozenset({R.ACTIVE, R.PAUSED, R.DRAINING}), R.STOPPED),
    "force-stop": (frozenset({R.ACTIVE, R.PAUSED, R.DRAINING, R.DEGRADED}), R.STOPPED),
}
ACTIONS: tuple[str, ...] = tuple(TRANSITIONS)

# the loop's end states: the run converged, or gave up
ENDED: frozenset[RunStatus] = frozenset({R.STOPPED, R.COMPLETED, R.BLOCKED, R.FAILED})
# the supervisor ticks runs in these states (draining: to finish the drain)
TICKED: frozenset[RunStatus] = frozenset({R.ACTIVE, R.DEGRADED, R.DRAINING})
# a run in these states takes new claims for its cards
CLAIMING: frozenset[RunStatus] = frozenset({R.ACTIVE, R.DEGRADED})


def parse_run_status(value: str) -> RunStatus:
    try:
        return RunStatus(value)
    except ValueError:
        names = ", ".join(s.value for s in RunStatus)
        raise LaneboardError(
            "BAD_INPUT", f"unknown run status {value!r}", f"use one of: {names}"
        ) from None


def check_action(action: str) -> None:
    if action not in TRANSITIONS:
        raise LaneboardError(
            "BAD_INPUT",
            f"unknown run action {action!r}",
            f"use one of: {', '.join(ACTIONS)}",
        )


def transition(action: str, current: RunStatus) -> RunStatus:
    """The target of ``action`` from ``current``; ILLEGAL_RUN_TRANSITION otherwise."""
    check_action(action)
    allowed, target = TRANSITIONS[action]
    if current not in allowed:
        names = ", ".join(sorted(s.value for s in allowed))
        raise LaneboardError(
            "ILLEGAL_RUN_TRANSITION",
            f"cannot {action} a run that is {current.value}",
            f"{action} applies to a run that is {names}",
        )
    return target


# -- loop options -------------------------------------------------------------------------
DEFAULT_INTERVAL_MS = 1000
DEFAULT_RETRY_BACKOFF_MS = 250
DEFAULT_MAX_CONSECUTIVE_ERRORS = 5
DEFAULT_MAX_ITERATIONS = 0


@dataclass(frozen=True)
class RunOptions:
    """The loop's options, normalized (``normalize``)."""

    interval_ms: int = DEFAULT_INTERVAL_MS
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    max_consecutive_errors: int = DEFAULT_MAX_CONSECUTIVE_ERRORS
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    headless: bool = False

    @property
    def limit(self) -> int | None:
        """The iteration bound, or None when unbounded (zero or negative)."""
        return self.max_iterations if self.max_iterations > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval_ms": self.interval_ms,
            "retry_backoff_ms": self.retry_backoff_ms,
            "max_consecutive_errors": self.max_consecutive_errors,
            "max_iterations": self.max_iterations,
            "headless": self.headless,
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> RunOptions:
        return normalize(
            interval_ms=int(d.get("interval_ms", 0)),
            retry_backoff_ms=int(d.get("retry_backoff_ms", 0)),
            max_consecutive_errors=int(d.get("max_consecutive_errors", 0)),
            max_iterations=int(d.get("max_iterations", 0)),
            headless=bool(d.get("headless", False)),
        )


def normalize(
    *,
    interval_ms: int = 0,
    retry_backoff_ms: int = 0,
    max_consecutive_errors: int = 0,
    max_iterations: int = 0,
    headless: bool = False,
) -> RunOptions:
    """Non-positive interval, backoff and threshold take their defaults; ``headless``
    turns exactly zero iterations into one (a negative limit stays unbounded)."""
    iterations = max_iterations
    if headless and iterations == 0:
        iterations = 1
    return RunOptions(
        interval_ms=interval_ms if interval_ms > 0 else DEFAULT_INTERVAL_MS,
        retry_backoff_ms=retry_backoff_ms if retry_backoff_ms > 0 else DEFAULT_RETRY_BACKOFF_MS,
        max_consecutive_errors=(
            max_consecutive_errors if max_consecutive_errors > 0 else DEFAULT_MAX_CONSECUTIVE_ERRORS
        ),
        max_iterations=iterations,
        headless=headless,
    )


# -- convergence ----------------------------------------------------------------------------
ACTIVE, BLOCKED, TERMINAL = "active", "blocked", "terminal"

# card status -> its class for convergence. in_review is a delivery under review (the
# seed's proposal); a review card in todo/in_progress is active work like any other.
# backlog and awaiting wait for a person, as a blocked or held card does.
CARD_CLASSES: dict[str, str] = {
    "todo": ACTIVE,
    "in_progress": ACTIVE,
    "in_review": ACTIVE,
    "backlog": BLOCKED,
    "awaiting": BLOCKED,
    "blocked": BLOCKED,
    "done": TERMINAL,
    "canceled": TERMINAL,
}

PENDING_AGENT_TURN = "pending_agent_turn"
AWAITING_INITIAL_WORK = "awaiting_initial_work"
ALL_TERMINAL = "all_tasks_and_proposals_terminal"
ALL_BLOCKED = "all_remaining_tasks_blocked"
WORK_REMAINS = "work_remains"
REASONS = (PENDING_AGENT_TURN, AWAITING_INITIAL_WORK, ALL_TERMINAL, ALL_BLOCKED, WORK_REMAINS)


def card_class(status: str) -> str:
    """A card status's class; a status this table does not know counts as active."""
    return CARD_CLASSES.get(status, ACTIVE)


@dataclass(frozen=True)
class Convergence:
    state: str  # "active", "completed" or "blocked"
    reason: str  # one of REASONS
    active: int
    blocked: int
    terminal: int
    outstanding_turns: int

    @property
    def converged(self) -> bool:
        return self.state != "active"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "active": self.active,
            "blocked": self.blocked,
            "terminal": self.terminal,
            "outstanding_turns": self.outstanding_turns,
        }


def converge(card_statuses: Iterable[str], outstanding_turns: int) -> Convergence:
    """Classify a run from its own cards' statuses and its queued or running turns."""
    counts = {ACTIVE: 0, BLOCKED: 0, TERMINAL: 0}
    for status in card_statuses:
        counts[card_class(status)] += 1
    a, b, t = counts[ACTIVE], counts[BLOCKED], counts[TERMINAL]
    if outstanding_turns > 0:
        state, reason = "active", PENDING_AGENT_TURN
    elif a + b + t == 0:
        state, reason = "active", AWAITING_INITIAL_WORK
    elif a == 0 and b == 0:
        state, reason = "completed", ALL_TERMINAL
    elif a == 0:
        state, reason = "blocked", ALL_BLOCKED
    else:
        state, reason = "active", WORK_REMAINS
    return Convergence(state, reason, a, b, t, outstanding_turns)


# -- per-run tick backoff in lb start -------------------------------------------------------
TICK_BACKOFF_START_MS = 250
TICK_BACKOFF_CAP_MS = 30_000


def tick_backoff_ms(failures: int) -> int:
    """The wait after ``failures`` consecutive failed ticks of one run: 250 ms doubling,
    capped at 30 s (0 after none)."""
    if failures <= 0:
        return 0
    return int(min(TICK_BACKOFF_START_MS * 2 ** (min(failures, 20) - 1), TICK_BACKOFF_CAP_MS))
