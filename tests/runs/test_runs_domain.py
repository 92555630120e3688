"""Runs in the domain: the transition table, the loop's options, convergence (pure)."""

from __future__ import annotations

import pytest

from laneboard.domain import runs as dr
from laneboard.domain.runs import RunStatus as R
from laneboard.errors import LaneboardError

# action -> (allowed prior states, target), written out as seed 000 states it
EXPECTED = {
    "start": ({"stopped", "starting"}, "active"),
    "pause": ({"active"}, "paused-intake"),
    "resume": ({"paused-intake", "degraded"}, "active"),
    "stop": ({"active", "paused-intake", "draining"}, "stopped"),
    "force-stop": ({"active", "paused-intake", "draining", "degraded"}, "stopped"),
}


@pytest.mark.parametrize("action", sorted(EXPECTED))
@pytest.mark.parametrize("state", [s.value for s in R])
def test_every_action_from_every_state(action: str, state: str) -> None:
    allowed, target = EXPECTED[action]
    if state in allowed:
        assert dr.transition(action, R(state)).value == target
    else:
        with pytest.raises(LaneboardError) as err:
            dr.transition(action, R(state))
        assert err.value.code == "ILLEGAL_RUN_TRANSITION"
        assert err.value.http_status == 409
        assert state in err.value.message


def test_an_unknown_action_is_bad_input() -> None:
    with pytest.raises(LaneboardError) as err:
        dr.transition("restart", R.ACTIVE)
    assert err.value.code == "BAD_INPUT"
    assert "force-stop" in err.value.fix


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, (1000, 250, 5, 0, None)),
        ({"interval_ms": 0, "retry_backoff_ms": -1, "max_consecutive_errors": 0},
         (1000, 250, 5, 0, None)),
        ({"interval_ms": -5, "retry_backoff_ms": 0, "max_consecutive_errors": -3},
         (1000, 250, 5, 0, None)),
        ({"interval_ms": 20, "retry_backoff_ms": 7, "max_consecutive_errors": 2},
         (20, 7, 2, 0, None)),
        ({"max_iterations": 3}, (1000, 250, 5, 3, 3)),
        ({"max_iterations": -1}, (1000, 250, 5, -1, None)),
        ({"headless": True}, (1000, 250, 5, 1, 1)),  # exactly zero becomes one cycle
        ({"headless": True, "max_iterations": -2}, (1000, 250, 5, -2, None)),  # stays unbounded
        ({"headless": True, "max_iterations": 4}, (1000, 250, 5, 4, 4)),
    ],
)  # fmt: skip
def test_option_normalization(given: dict[str, int], expected: tuple[object, ...]) -> None:
    o = dr.normalize(**given)  # type: ignore[arg-type]
    assert (o.interval_ms, o.retry_backoff_ms, o.max_consecutive_errors, o.max_iterations,
            o.limit) == expected  # fmt: skip
    assert dr.RunOptions.from_dict(o.to_dict()) == o


@pytest.mark.parametrize(
    ("statuses", "turns", "state", "reason"),
    [
        ([], 0, "active", "awaiting_initial_work"),
        ([], 1, "active", "pending_agent_turn"),
        (["done", "done"], 1, "active", "pending_agent_turn"),  # turns take precedence
        (["done", "canceled"], 0, "completed", "all_tasks_and_proposals_terminal"),
        (["done"], 0, "completed", "all_tasks_and_proposals_terminal"),
        (["done", "blocked"], 0, "blocked", "all_remaining_tasks_blocked"),
        (["awaiting"], 0, "blocked", "all_remaining_tasks_blocked"),
        (["backlog", "canceled"], 0, "blocked", "all_remaining_tasks_blocked"),
        (["todo"], 0, "active", "work_remains"),
        (["in_progress", "blocked"], 0, "active", "work_remains"),
        (["in_review", "done"], 0, "active", "work_remains"),  # a delivery under review
        (["some_future_status", "done"], 0, "active", "work_remains"),  # unknown: active
    ],
)
def test_convergence_table(statuses: list[str], turns: int, state: str, reason: str) -> None:
    got = dr.converge(statuses, turns)
    assert (got.state, got.reason) == (state, reason)
    assert got.active + got.blocked + got.terminal == len(statuses)
    assert got.converged == (state != "active")


def test_every_card_status_has_a_class() -> None:
    from laneboard.domain.status import Status

    assert set(dr.CARD_CLASSES) == {s.value for s in Status}


@pytest.mark.parametrize(
    ("failures", "wait"),
    [
        (0, 0),
        (1, 250),
        (2, 500),
        (3, 1000),
        (7, 16_000),
        (8, 30_000),
        (50, 30_000),
        (10**6, 30_000),
    ],
)
def test_tick_backoff_doubles_from_250ms_to_30s(failures: int, wait: int) -> None:
    assert dr.tick_backoff_ms(failures) == wait
