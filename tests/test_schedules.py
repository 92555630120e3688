"""Schedules and the scheduler pass, on both backends, with an injected clock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from laneboard.board import schedules as sch
from laneboard.board.schedule_jobs import local_zone_name
from laneboard.board.schedules import (
    Schedules,
    acquire_tick_lock,
    release_tick_lock,
    run_locked_pass,
    run_schedule_pass,
    schedules_summary,
)
from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import Actor, agent
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store

NY = ZoneInfo("America/New_York")
JOB: dict[str, Any] = {
    "project": "WEB",
    "title": "Nightly report",
    "description": "send the report",
    "assignee": "ops",
    "priority": 1,
    "labels": ["ops"],
    "acceptance": ["report sent"],
    "checks": ["true"],
    "allowed_paths": ["reports"],
    "acceptance_mode": "off",
}


def utc(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp()) * 1000


def ny(*parts: int, fold: int = 0) -> int:
    return int(datetime(*parts, tzinfo=NY, fold=fold).timestamp()) * 1000


@pytest.fixture
def svc(board: Board, me: Actor, clock: FakeClock) -> Schedules:
    board.add_project(me, "WEB", path=None)
    return Schedules(board.store, clock)


def cards(board: Board) -> list[Any]:
    return board.list_cards()


def row(store: Store, name: str) -> dict[str, Any]:
    with store.read() as tx:
        got = tx.one("SELECT * FROM schedules WHERE name = ?", (name,))
    assert got is not None
    return got


def event_types(board: Board) -> list[str]:
    return [e.type for e in board.events(limit=1000)]


def test_fires_exactly_once_per_matching_minute(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = utc(2026, 1, 1, 9, 58, 10)
    svc.add(me, "report", "*/5 * * * *", JOB, timezone="UTC")
    clock.t = utc(2026, 1, 1, 10, 0, 1)
    first = run_schedule_pass(board.store, clock, "A")
    assert [f["ref"] for f in first.fired] == ["WEB-1"] and first.state == "ran"
    for seconds in (15, 30, 59):  # repeated passes inside the minute
        clock.t = utc(2026, 1, 1, 10, 0, seconds)
        again = run_schedule_pass(board.store, clock, "A")
        assert again.fired == [] and again.failed == []
    for minute in (1, 2, 3, 4):
        clock.t = utc(2026, 1, 1, 10, minute, 5)
        assert run_schedule_pass(board.store, clock, "A").fired == []
    clock.t = utc(2026, 1, 1, 10, 5, 0)
    assert [f["ref"] for f in run_schedule_pass(board.store, clock, "B").fired] == ["WEB-2"]
    made = cards(board)
    assert [c.idempotency_key for c in made] == [
        "schedule|report|2026-01-01T10:00Z",
        "schedule|report|2026-01-01T10:05Z",
    ]
    c = made[0]
    assert (c.title, c.description, c.assignee, c.priority) == (
        "Nightly report", "send the report", "ops", 1,
    )  # fmt: skip
    assert (list(c.labels), list(c.checks), list(c.allowed_paths)) == (
        ["ops"], ["true"], ["reports"],
    )  # fmt: skip
    assert c.acceptance_mode.value == "off" and c.acceptance[0].text == "report sent"
    assert c.meta == {"schedule": "report", "occurrence": "2026-01-01T10:00Z"}
    r = row(board.store, "report")
    assert (r["last_outcome"], r["last_minute"], r["fired_minute"]) == (
        "dispatched", utc(2026, 1, 1, 10, 5), None,
    )  # fmt: skip
    assert r["next_due_at"] == utc(2026, 1, 1, 10, 10)
    types = event_types(board)
    assert types.count("schedule.fired") == 2 and types.count("schedule.dispatched") == 2
    assert types.count("card.created") == 2
    v = svc.get("report")
    assert (v["health"], v["last_card"], v["next_due"]) == (
        "ok", "WEB-2", "2026-01-01T10:10:00.000Z",
    )  # fmt: skip


def test_held_lock_creates_nothing_until_it_goes_stale(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    svc.add(me, "tick", "* * * * *", JOB, timezone="UTC")
    assert acquire_tick_lock(board.store, "crashed-holder") is None
    res = run_schedule_pass(board.store, clock, "A")
    assert (res.state, res.lock_holder, res.fired, res.locked) == (
        "locked", "crashed-holder", [], True,
    )  # fmt: skip
    assert res.to_dict()["state"] == "locked"
    assert cards(board) == []
    clock.advance(sch.LOCK_TTL_MS)  # older than its stale window: taken over
    res = run_schedule_pass(board.store, clock, "A")
    assert res.state == "ran" and len(res.fired) == 1
    with board.store.read() as tx:
        assert tx.lock_row(sch.LOCK_NAME) is None  # released after the pass


def test_two_passes_with_separate_stores_create_one_card(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock, store_url: str
) -> None:
    svc.add(me, "tick", "* * * * *", JOB, timezone="UTC")
    other = open_store(store_url, clock)
    try:
        assert acquire_tick_lock(board.store, "A") is None
        second = run_schedule_pass(other, clock, "B")  # while A holds the lease
        assert (second.state, second.lock_holder) == ("locked", "A")
        first = run_locked_pass(board.store, clock, "A")
        release_tick_lock(board.store, "A")
        assert len(first.fired) == 1
        late = run_schedule_pass(other, clock, "B")  # same minute, lease free again
        assert late.state == "ran" and late.fired == []
    finally:
        other.close()
    assert len(cards(board)) == 1


def test_racing_threads_with_separate_stores_fire_once(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock, store_url: str
) -> None:
    svc.add(me, "tick", "* * * * *", JOB, timezone="UTC")
    stores = [open_store(store_url, clock) for _ in range(4)]
    gate = threading.Barrier(len(stores))
    results: list[sch.PassResult] = []
    errors: list[BaseException] = []

    def go(i: int) -> None:
        try:
            gate.wait()
            results.append(run_schedule_pass(stores[i], clock, f"T{i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in stores:
        s.close()
    assert errors == []
    assert {r.state for r in results} <= {"ran", "locked"} and len(results) == 4
    assert sum(len(r.fired) for r in results) == 1
    assert len(cards(board)) == 1


def _mark(store: Store, name: str, minute: int, card_id: int | None) -> None:
    with store.write() as tx:
        tx.run(
            "UPDATE schedules SET fired_minute = ?, fired_at = ?, fired_card_id = ? WHERE name = ?",
            (minute, minute, card_id, name),
        )


def test_reconcile_withdraws_an_orphan_mark(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = utc(2026, 1, 1, 9, 0)
    svc.add(me, "daily", "0 10 * * *", JOB, timezone="UTC")
    _mark(board.store, "daily", utc(2026, 1, 1, 10), None)
    clock.t = utc(2026, 1, 1, 10, 0, 30)  # still the marked minute
    res = run_schedule_pass(board.store, clock, "A")
    assert res.reconciled == [
        {"name": "daily", "minute": "2026-01-01T10:00Z", "action": "withdrawn"}
    ]
    # the withdrawn fire is free to happen within its minute: one card, not two
    assert [f["ref"] for f in res.fired] == ["WEB-1"]
    assert "schedule.mark_withdrawn" in event_types(board)
    _mark(board.store, "daily", utc(2026, 1, 2, 10), None)  # orphan, its minute gone
    clock.t = utc(2026, 1, 2, 10, 3)
    res = run_schedule_pass(board.store, clock, "A")
    assert [r["action"] for r in res.reconciled] == ["withdrawn"] and res.fired == []
    assert row(board.store, "daily")["fired_minute"] is None
    assert len(cards(board)) == 1
    assert svc.get("daily")["health"] == "overdue"  # a withdrawn mark is not an outcome


def test_reconcile_adopts_a_mark_with_a_card_after_a_crash(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock.t = utc(2026, 1, 1, 9, 0)
    svc.add(me, "daily", "0 10 * * *", JOB, timezone="UTC")
    clock.t = utc(2026, 1, 1, 10, 0, 5)

    def crash(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt("killed between the fire and its outcome")

    with monkeypatch.context() as m:
        m.setattr(sch, "_record", crash)
        with pytest.raises(KeyboardInterrupt):
            run_schedule_pass(board.store, clock, "A")
    r = row(board.store, "daily")
    assert r["fired_minute"] == utc(2026, 1, 1, 10) and r["last_outcome"] is None
    assert r["fired_card_id"] == cards(board)[0].id  # the mark and its card, together
    clock.t = utc(2026, 1, 1, 10, 2)  # the minute has elapsed: not overdue once adopted
    assert svc.get("daily")["health"] == "ok"
    res = run_schedule_pass(board.store, clock, "A")
    assert res.reconciled == [
        {"name": "daily", "minute": "2026-01-01T10:00Z", "action": "adopted", "ref": "WEB-1",
         "anomaly": None}
    ]  # fmt: skip
    assert res.missed == [] and res.fired == []
    r = row(board.store, "daily")
    assert (r["last_outcome"], r["last_minute"], r["fired_minute"]) == (
        "dispatched", utc(2026, 1, 1, 10), None,
    )  # fmt: skip
    assert r["last_detail"] == "adopted by reconciliation"
    assert svc.get("daily")["health"] == "ok" and len(cards(board)) == 1


def test_adoption_states_its_anomalies(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = utc(2026, 1, 1, 9, 0)
    svc.add(me, "daily", "0 10 * * *", JOB, timezone="UTC")
    key = sch.fire_key("daily", utc(2026, 1, 1, 10))
    card = board.create_card(me, "WEB", "made by hand", idempotency_key=key)
    _mark(board.store, "daily", utc(2026, 1, 1, 10), None)  # the mark lost its card id
    clock.t = utc(2026, 1, 1, 11)
    res = run_schedule_pass(board.store, clock, "A")
    assert res.reconciled[0]["action"] == "adopted" and res.reconciled[0]["ref"] == card.ref
    assert res.reconciled[0]["anomaly"] == "the mark did not name its card; found it by key"
    assert "found it by key" in row(board.store, "daily")["last_detail"]


def test_missed_window_is_overdue_and_not_caught_up(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = utc(2026, 1, 1, 9, 0)
    svc.add(me, "daily", "0 10 * * *", JOB, timezone="UTC")
    assert svc.get("daily")["health"] == "never-run"
    clock.t = utc(2026, 1, 1, 9, 59, 59)
    assert run_schedule_pass(board.store, clock, "A").missed == []
    clock.t = utc(2026, 1, 1, 10, 0, 59)  # the minute has not fully elapsed yet
    assert svc.get("daily")["health"] == "never-run"
    clock.t = utc(2026, 1, 1, 10, 2)  # no pass ran during 10:00
    res = run_schedule_pass(board.store, clock, "A")
    assert res.fired == [] and res.missed == [{"name": "daily", "minute": "2026-01-01T10:00Z"}]
    assert cards(board) == []
    v = svc.get("daily")
    assert (v["health"], v["overdue_since"], v["next_due"]) == (
        "overdue", "2026-01-01T10:00:00.000Z", "2026-01-02T10:00:00.000Z",
    )  # fmt: skip
    assert row(board.store, "daily")["next_due_at"] == utc(2026, 1, 2, 10)
    clock.t = utc(2026, 1, 1, 15)
    assert len(run_schedule_pass(board.store, clock, "A").missed) == 1
    assert event_types(board).count("schedule.missed") == 1  # recorded once
    summary = schedules_summary(board.store, clock)
    assert summary["overdue"] == [
        {"name": "daily", "expression": "0 10 * * *", "missed": "2026-01-01T10:00:00.000Z"}
    ]
    clock.t = utc(2026, 1, 2, 10, 0, 20)  # the next matching minute fires as usual
    assert len(run_schedule_pass(board.store, clock, "A").fired) == 1
    clock.t = utc(2026, 1, 2, 10, 5)
    assert svc.get("daily")["health"] == "ok"
    assert schedules_summary(board.store, clock)["overdue"] == []


def test_disabled_schedules_never_fire(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = utc(2026, 1, 1, 9, 0)
    svc.add(me, "tick", "* * * * *", JOB, timezone="UTC")
    svc.add(me, "off", "* * * * *", JOB, timezone="UTC", enabled=False)
    v = svc.set_enabled(me, "tick", False)
    assert (v["enabled"], v["next_due"]) == (False, None)
    for minute in range(0, 30):
        clock.t = utc(2026, 1, 1, 9, minute, 10)
        assert run_schedule_pass(board.store, clock, "A").fired == []
    assert cards(board) == []
    assert {v["name"]: v["health"] for v in svc.list()} == {"off": "never-run", "tick": "never-run"}
    clock.t = utc(2026, 1, 1, 9, 30, 30)
    v = svc.set_enabled(me, "tick", True)
    assert v["health"] == "never-run"  # minutes while disabled are not owed
    assert len(run_schedule_pass(board.store, clock, "A").fired) == 1
    types = event_types(board)
    assert "schedule.disabled" in types and "schedule.enabled" in types


def _run_minutes(store: Store, clock: FakeClock, start: int, minutes: int) -> None:
    for i in range(minutes):
        clock.t = start + i * 60_000 + 7_000
        run_schedule_pass(store, clock, "A")


def test_dst_spring_forward_and_fall_back_fire_once(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = ny(2026, 3, 7, 12)
    svc.add(me, "half-two", "30 2 * * *", JOB, timezone="America/New_York")
    svc.add(me, "half-one", "30 1 * * *", JOB, timezone="America/New_York")
    _run_minutes(board.store, clock, ny(2026, 3, 8, 0, 50), 140)  # 00:50 EST .. 04:09 EDT
    fired = {c.meta["schedule"]: c.meta["occurrence"] for c in cards(board)}
    assert fired == {"half-one": "2026-03-08T06:30Z", "half-two": "2026-03-08T07:00Z"}
    assert len(cards(board)) == 2  # 02:30 did not exist: it ran once, at 03:00 EDT
    clock.t = ny(2026, 10, 31, 12)
    for name in ("half-one", "half-two"):  # re-arm so the months between are not owed
        svc.set_enabled(me, name, False)
        svc.set_enabled(me, name, True)
    _run_minutes(board.store, clock, ny(2026, 11, 1, 0, 50), 200)  # 00:50 EDT .. 03:09 EST
    later = [c for c in cards(board) if c.meta["occurrence"].startswith("2026-11")]
    assert sorted((c.meta["schedule"], c.meta["occurrence"]) for c in later) == [
        ("half-one", "2026-11-01T05:30Z"),  # 01:30 EDT, not again at 01:30 EST
        ("half-two", "2026-11-01T07:30Z"),  # 02:30 EST
    ]
    assert all(v["health"] == "ok" for v in svc.list())


def test_dispatch_failure_is_recorded_with_its_reason(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    svc.add(me, "tick", "* * * * *", JOB, timezone="UTC")
    with board.store.write() as tx:  # the project was renamed after the schedule was added
        tx.run("UPDATE projects SET key = 'SITE', name = 'SITE'")
    res = run_schedule_pass(board.store, clock, "A")
    assert res.fired == [] and res.failed == [
        {"name": "tick", "minute": "2026-01-01T00:00Z", "reason": "project WEB does not exist"}
    ]
    r = row(board.store, "tick")
    assert (r["last_outcome"], r["fired_minute"], r["last_detail"]) == (
        "dispatch-failed", None, "project WEB does not exist",
    )  # fmt: skip
    assert cards(board) == [] and "schedule.dispatch_failed" in event_types(board)
    assert schedules_summary(board.store, clock)["failed"] == [
        {"name": "tick", "reason": "project WEB does not exist"}
    ]


def test_list_summary_and_remove(svc: Schedules, board: Board, me: Actor, clock: FakeClock) -> None:
    clock.t = utc(2026, 1, 1, 8, 0)
    added = svc.add(me, "weekdays", "0 9 * * 1-5", JOB, timezone="Europe/Berlin")
    assert added["explanation"] == "At 09:00 on Monday through Friday"
    assert added["next_due"] == "2026-01-01T08:00:00.000Z"
    assert added["next_due_local"] == "2026-01-01 09:00 CET"
    assert (added["enabled"], added["health"], added["last_outcome"]) == (True, "never-run", None)
    assert added["job"]["acceptance"] == [{"id": "A1", "text": "report sent"}]
    svc.add(me, "local", "5-55/10 * * * *", {"project": "WEB", "title": "t"})
    assert [v["name"] for v in svc.list()] == ["local", "weekdays"]
    assert svc.get("local")["timezone"] == local_zone_name() != "local"  # resolved once
    summary = schedules_summary(board.store, clock)
    assert summary == {
        "total": 2,
        "enabled": 2,
        "overdue": [],
        "failed": [],
        "never_run": ["local", "weekdays"],
        "broken": [],
        "next": {"name": "weekdays", "at": "2026-01-01T08:00:00.000Z"},
    }
    gone = svc.remove(me, "weekdays")
    assert gone["name"] == "weekdays"
    assert [v["name"] for v in svc.list()] == ["local"]
    for call in (
        lambda: svc.remove(me, "weekdays"),
        lambda: svc.set_enabled(me, "nope", True),
        lambda: svc.get("nope"),
    ):
        with pytest.raises(LaneboardError) as exc:
            call()
        assert exc.value.code == "NOT_FOUND" and exc.value.exit_code == 1


@pytest.mark.parametrize(
    ("name", "expression", "job", "zone", "code", "message"),
    [
        ("x", "* * * *", JOB, "UTC", "BAD_INPUT", "cron expression '* * * *' has 4 fields, not 5"),
        ("x", "* * * * *", {**JOB, "colour": "red"}, "UTC", "BAD_INPUT",
         "job definition has unknown field colour"),
        ("x", "* * * * *", {"project": "WEB"}, "UTC", "BAD_INPUT", "job definition has no title"),
        ("x", "* * * * *", {**JOB, "project": "NOPE"}, "UTC", "NOT_FOUND",
         "project NOPE does not exist"),
        ("x", "* * * * *", {**JOB, "priority": 9}, "UTC", "BAD_INPUT", "priority 9 is out of range"),
        ("x", "* * * * *", {**JOB, "labels": "ops"}, "UTC", "BAD_INPUT",
         "job field labels must be a list"),
        ("x", "* * * * *", {**JOB, "checks": [1]}, "UTC", "BAD_INPUT",
         "job field checks must be a list"),
        ("x", "* * * * *", {**JOB, "title": 7}, "UTC", "BAD_INPUT", "job field title must be text"),
        ("x", "* * * * *", {**JOB, "allowed_paths": ["/etc"]}, "UTC", "BAD_INPUT",
         "allowed path '/etc' is not repository-relative"),
        ("x", "* * * * *", {**JOB, "acceptance_mode": "maybe"}, "UTC", "BAD_INPUT",
         "unknown acceptance mode 'maybe'"),
        ("x", "* * * * *", JOB, "Mars/Base", "BAD_INPUT", "unknown time zone 'Mars/Base'"),
        ("bad name", "* * * * *", JOB, "UTC", "BAD_INPUT", "schedule name 'bad name' is not valid"),
        ("dup", "* * * * *", JOB, "UTC", "CONFLICT", "schedule dup already exists"),
    ],
)  # fmt: skip
def test_refused_adds_store_nothing(  # type: ignore[no-untyped-def]
    svc: Schedules, board: Board, me: Actor, name, expression, job, zone, code, message
) -> None:
    svc.add(me, "dup", "0 0 * * *", JOB, timezone="UTC")
    before = (len(svc.list()), len(board.events(limit=1000)))
    with pytest.raises(LaneboardError) as exc:
        svc.add(me, name, expression, job, timezone=zone)
    assert (exc.value.code, exc.value.message) == (code, message)
    assert (len(svc.list()), len(board.events(limit=1000))) == before


def test_agents_may_not_manage_schedules(svc: Schedules, me: Actor) -> None:
    with pytest.raises(LaneboardError) as exc:
        svc.add(agent("worker"), "x", "* * * * *", JOB)
    assert exc.value.code == "FORBIDDEN"
    svc.add(me, "x", "* * * * *", JOB)
    with pytest.raises(LaneboardError):
        svc.remove(agent("worker"), "x")
    assert len(svc.list()) == 1


def test_local_is_resolved_once_when_added(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daily ``local`` schedule added on a New York host fires at 09:00 New York time,
    whichever host (a UTC one here) runs the pass: once a day, never twice."""
    clock.t = utc(2026, 1, 5, 12, 0)
    monkeypatch.setenv("TZ", "America/New_York")
    added = svc.add(me, "daily", "0 9 * * *", {"project": "WEB", "title": "t"}, timezone="local")
    assert added["timezone"] == "America/New_York"
    monkeypatch.setenv("TZ", "UTC")  # another host
    assert svc.get("daily")["next_due"] == "2026-01-05T14:00:00.000Z"
    monkeypatch.setenv("TZ", "Not/A_Zone")
    with pytest.raises(LaneboardError) as exc:
        svc.add(me, "other", "0 9 * * *", {"project": "WEB", "title": "t"}, timezone="local")
    assert exc.value.code == "BAD_INPUT" and "--timezone" in (exc.value.fix or "")
    assert [v["name"] for v in svc.list()] == ["daily"]


def test_every_missed_occurrence_is_recorded(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = utc(2026, 1, 1, 9, 5)
    svc.add(me, "hourly", "0 * * * *", JOB, timezone="UTC")
    clock.t = utc(2026, 1, 1, 13, 30)  # an outage: no pass ran at 10, 11, 12 or 13
    res = run_schedule_pass(board.store, clock, "A")
    want = [f"2026-01-01T{h}:00Z" for h in (10, 11, 12, 13)]
    assert [m["minute"] for m in res.missed] == want
    got = [e.payload["minute"] for e in board.events(limit=500) if e.type == "schedule.missed"]
    assert sorted(got) == want
    clock.t = utc(2026, 1, 1, 13, 40)
    run_schedule_pass(board.store, clock, "A")  # nothing new: nothing recorded again
    assert event_types(board).count("schedule.missed") == 4
    clock.t = utc(2026, 1, 1, 15, 30)  # 14:00 and 15:00 missed too: only those are new
    assert [m["minute"] for m in run_schedule_pass(board.store, clock, "A").missed] == [
        "2026-01-01T14:00Z", "2026-01-01T15:00Z",
    ]  # fmt: skip
    assert event_types(board).count("schedule.missed") == 6


def test_a_failed_dispatch_is_never_ok(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    clock.t = utc(2026, 1, 1, 9, 0, 10)
    svc.add(me, "tick", "* * * * *", {"project": "WEB", "title": "t"}, timezone="UTC")
    with board.store.write() as tx:
        tx.run("UPDATE projects SET key = 'SITE', name = 'SITE'")
    assert run_schedule_pass(board.store, clock, "A").failed
    assert svc.get("tick")["health"] == "failing"
    assert schedules_summary(board.store, clock)["failed"][0]["name"] == "tick"


def test_a_corrupt_row_breaks_only_its_schedule(
    svc: Schedules, board: Board, me: Actor, clock: FakeClock
) -> None:
    from laneboard.server.status import health as healthz
    from laneboard.supervisor.doctor import doctor_report

    clock.t = utc(2026, 1, 1, 9, 0, 10)
    svc.add(me, "good", "* * * * *", {"project": "WEB", "title": "t"}, timezone="UTC")
    svc.add(me, "bad", "* * * * *", {"project": "WEB", "title": "t"}, timezone="UTC")
    with board.store.write() as tx:
        tx.run("UPDATE schedules SET job = '{not json', timezone = 'Nowhere/Zone' "
               "WHERE name = 'bad'")  # fmt: skip
    views = {v["name"]: v for v in svc.list()}
    assert views["good"]["health"] == "never-run"
    assert views["bad"]["health"] == "broken" and views["bad"]["broken"]
    assert svc.get("bad")["enabled"] is False
    res = run_schedule_pass(board.store, clock, "A")
    assert [f["name"] for f in res.fired] == ["good"] and not res.failed
    summary = schedules_summary(board.store, clock)
    assert [b["name"] for b in summary["broken"]] == ["bad"]
    assert "1 broken schedules" in doctor_report(board.store, clock)["reasons"]
    code, body = healthz(board.store)
    assert code == 200 and body["store"]["ok"] is True
    assert svc.remove(me, "bad")["name"] == "bad"
    assert [v["name"] for v in svc.list()] == ["good"]
