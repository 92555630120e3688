"""``lb status``'s text: every section reads as sentences, never as a JSON dump."""

from __future__ import annotations

from typing import Any

from laneboard.supervisor.reports_text import render_status


def _report(**extra: Any) -> dict[str, Any]:
    return {
        "supervisor": {"state": "running", "detail": "ticking", "pid": 42},
        "next_tick_at": None,
        "queue": {"counts": {}, "live": []},
        "sessions": [],
        "deferrals": [],
        **extra,
    }


def _schedules(**over: Any) -> dict[str, Any]:
    return {
        "total": 0,
        "enabled": 0,
        "overdue": [],
        "failed": [],
        "never_run": [],
        "broken": [],
        "next": None,
        **over,
    }


def test_schedules_read_as_a_line_with_what_needs_attention() -> None:
    text = render_status(_report(schedules=_schedules()))
    assert "schedules   none" in text and "{" not in text
    busy = _schedules(
        total=5,
        enabled=4,
        overdue=[{"name": "nightly", "expression": "0 2 * * *", "missed": "2026-12-06T02:00Z"}],
        failed=[{"name": "weekly", "reason": "project W was removed"}],
        never_run=["fresh"],
        broken=[{"name": "old", "reason": "its project is gone"}],
        next={"name": "hourly", "at": "2026-12-06T10:00Z"},
    )
    text = render_status(_report(schedules=busy))
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("schedules"))
    assert head == "schedules   5 (4 enabled), next hourly at 2026-12-06T10:00Z", text
    assert "  overdue nightly (0 2 * * *): missed 2026-12-06T02:00Z" in lines
    assert "  failed weekly: project W was removed" in lines
    assert "  broken old: its project is gone" in lines
    assert "  never run: fresh" in lines
    assert "{" not in text and "[" not in text


def test_many_schedule_problems_are_counted_not_cut_mid_word() -> None:
    failed = [{"name": f"s{i}", "reason": "boom"} for i in range(30)]
    text = render_status(_report(schedules=_schedules(total=30, enabled=30, failed=failed)))
    shown = [line for line in text.splitlines() if line.startswith("  failed ")]
    assert len(shown) == 10
    assert "  … and 20 more failed: lb schedule list" in text.splitlines()


def test_a_role_this_machine_cannot_run_says_it_is_this_machine() -> None:
    boundary = {
        "sandbox": {"line": "bwrap (/usr/bin/bwrap)"},
        "force_agent": None,
        "agents": [
            {"role": "worker", "kind": None, "detail": "no available kind (claude)"},
            {"role": "reviewer", "kind": "codex", "detail": "role_agents"},
        ],
        "unassigned_role": "worker",
    }
    lines = render_status(_report(boundary=boundary)).splitlines()
    assert (
        "  role worker: NONE — this machine claims none of its cards "
        "(no available kind (claude))" in lines
    )
    assert "  role reviewer: codex (role_agents)" in lines


def test_a_machine_whose_clock_is_far_off_is_named() -> None:
    def instance(offset: int) -> dict[str, Any]:
        return {
            "id": f"m{offset}:1:1",
            "machine": f"m{offset}",
            "state": "running",
            "heartbeat_at": "2026-12-06T10:00:00Z",
            "info": {"clock_offset_ms": offset},
        }

    lines = render_status(_report(instances=[instance(62_000), instance(-7_400), instance(900)]))
    text = lines.splitlines()
    assert any(line.endswith(", clock 62s ahead of the database's (fix its time sync)")
               for line in text), lines  # fmt: skip
    assert any(line.endswith(", clock 7s behind the database's (fix its time sync)")
               for line in text), lines  # fmt: skip
    assert any(line.endswith("beat 2026-12-06T10:00:00Z") for line in text), lines
