"""Statuses and the one transition table."""

from __future__ import annotations

from enum import StrEnum

from laneboard.errors import LaneboardError


class Status(StrEnum):
    BACKLOG = "backlog"
    TODO = "todo"
    IN_PROGRESS = "in_progress"
    AWAITING = "awaiting"
    BLOCKED = "blocked"
    IN_REVIEW = "in_review"
    DONE = "done"
    CANCELED = "canceled"


S = Status

# The only authority on which moves exist. ``todo -> in_progress`` happens through a
# claim; ``in_progress -> done`` is further limited to acceptance mode ``off``.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    S.BACKLOG: frozenset({S.TODO, S.CANCELED}),
    S.TODO: frozenset({S.BACKLOG, S.IN_PROGRESS, S.BLOCKED, S.CANCELED}),
    S.IN_PROGRESS: frozenset({S.TODO, S.IN_REVIEW, S.AWAITING, S.BLOCKED, S.DONE, S.CANCELED}),
    S.AWAITING: frozenset({S.TODO, S.BLOCKED, S.CANCELED}),
    S.BLOCKED: frozenset({S.TODO, S.BACKLOG, S.CANCELED}),
    S.IN_REVIEW: frozenset({S.DONE, S.IN_PROGRESS, S.TODO, S.BLOCKED, S.CANCELED}),
    S.DONE: frozenset(),
    S.CANCELED: frozenset(),
}

TERMINAL: frozenset[Status] = frozenset({S.DONE, S.CANCELED})
ALL: tuple[Status, ...] = tuple(Status)


def parse_status(value: str) -> Status:
    try:
        return Status(value)
    except ValueError:
        names = ", ".join(s.value for s in Status)
        raise LaneboardError(
            "BAD_INPUT", f"unknown status {value!r}", f"use one of: {names}"
        ) from None


def is_allowed(src: Status, dst: Status) -> bool:
    return dst in TRANSITIONS[src]


def check_transition(src: Status, dst: Status) -> None:
    if not is_allowed(src, dst):
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[src])) or "none (terminal)"
        raise LaneboardError(
            "ILLEGAL_TRANSITION",
            f"{src.value} -> {dst.value} is not a legal move",
            f"from {src.value} the legal moves are: {allowed}",
        )
