"""What a session is told when its turn ended with the card still in progress: the
workflow's own reason when it sent the card back while that turn still ran (a reopened
review), once; otherwise that the turn ended undelivered."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.test_domain_rules import T0, make_card

from laneboard.domain.model import Card
from laneboard.supervisor.outcomes import continuation
from laneboard.supervisor.records import QueueRow

REOPEN = {"round": 1, "at": T0 + 500, "reason": "your verdict on W-1 could not be used",
          "detail": "Your report could not be used (verdict_unreadable): …"}  # fmt: skip


def row(created_at: int, **payload: Any) -> QueueRow:
    return QueueRow(
        id=1, kind="handoff", card_id=7, role="reviewer", project_id=1, machine="m",
        target_dir="/lane", round=1, epoch=1, state="running", attempts=1, recoveries=0,
        owner=None, pid=None, payload=payload, last_error=None, created_at=created_at,
        updated_at=created_at, started_at=created_at,
    )  # fmt: skip


def card(**meta: Any) -> Card:
    return replace(make_card(), meta=meta)


def test_a_reopen_while_the_turn_ran_is_what_the_session_hears() -> None:
    got = continuation(card(loop_resume=REOPEN), row(T0 + 100))
    assert got["resume_reason"] == REOPEN["reason"]
    assert got["resume_detail"] == REOPEN["detail"]
    assert got["loop_resume_at"] == REOPEN["at"]


def test_a_reopen_is_said_once() -> None:
    said = row(T0 + 100, loop_resume_at=REOPEN["at"])
    got = continuation(card(loop_resume=REOPEN), said)
    assert "not delivered" in str(got["resume_reason"])


def test_a_reopen_before_the_row_or_of_another_round_is_not_news() -> None:
    before = continuation(card(loop_resume=REOPEN), row(T0 + 900))
    other = continuation(card(loop_resume={**REOPEN, "round": 2}), row(T0 + 100))
    plain = continuation(card(), row(T0 + 100))
    for got in (before, other, plain):
        assert "not delivered" in str(got["resume_reason"])
        assert "loop_resume_at" not in got


def test_at_a_shutdown_a_turn_that_did_not_end_well_is_interrupted_not_failed() -> None:
    """An agent stopped by the shutdown before it read its prompt reports a broken pipe:
    that turn is interrupted (resumed at the next start, no failure counted), while the
    same result outside a shutdown is a failure, and a timeout or a person's stop keep
    their own names."""
    from laneboard.supervisor.outcomes import turn_outcome

    assert turn_outcome(False, False, False, False, stopping=True) == "interrupted"
    assert turn_outcome(False, False, False, False, stopping=False) == "failed"
    assert turn_outcome(True, False, False, False, stopping=True) == "ok"
    assert turn_outcome(False, True, False, False, stopping=True) == "timed_out"
    assert turn_outcome(False, False, False, True, stopping=True) == "stopped"
    assert turn_outcome(False, False, True, True, stopping=False) == "interrupted"
