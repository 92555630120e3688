"""Cron expressions: validation messages, plain words, due minutes and DST transitions."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from laneboard.domain import cron
from laneboard.errors import LaneboardError

NY = ZoneInfo("America/New_York")


def at(zone, *parts: int, fold: int = 0) -> int:  # type: ignore[no-untyped-def]
    return int(datetime(*parts, tzinfo=zone, fold=fold).timestamp()) * 1000


def local(ms: int, zone=NY) -> str:  # type: ignore[no-untyped-def]
    return datetime.fromtimestamp(ms / 1000, tz=zone).isoformat()


def fires(expr: str, zone, start: int, minutes: int) -> list[str]:  # type: ignore[no-untyped-def]
    e = cron.parse(expr)
    return [
        local(start + i * 60_000, zone)
        for i in range(minutes)
        if cron.is_due(e, zone, start + i * 60_000)
    ]


@pytest.mark.parametrize(
    ("text", "minutes", "hours", "days", "months", "weekdays"),
    [
        ("*/15 * * * *", {0, 15, 30, 45}, set(range(24)), set(range(1, 32)), set(range(1, 13)),
         set(range(7))),
        ("0 9-17/4 1,15 6 1-5", {0}, {9, 13, 17}, {1, 15}, {6}, {1, 2, 3, 4, 5}),
        ("5 0 * * 7", {5}, {0}, set(range(1, 32)), set(range(1, 13)), {0}),
        ("50/5 23 L_IS_NOT_USED * * *".replace(" L_IS_NOT_USED", ""), {50, 55}, {23},
         set(range(1, 32)), set(range(1, 13)), set(range(7))),
    ],
)  # fmt: skip
def test_parse_accepts_standard_fields(  # type: ignore[no-untyped-def]
    text, minutes, hours, days, months, weekdays
) -> None:
    e = cron.parse("  " + text.replace(" ", "   ") + " ")
    assert e.text == text
    assert (set(e.minutes), set(e.hours), set(e.days), set(e.months), set(e.weekdays)) == (
        minutes, hours, days, months, weekdays,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("* * * *", "cron expression '* * * *' has 4 fields, not 5"),
        ("0 * * * * *", "cron expression '0 * * * * *' has 6 fields, not 5"),
        ("", "cron expression '' has 0 fields, not 5"),
        ("60 * * * *", "cron minute field '60': 60 is out of range 0-59"),
        ("0 24 * * *", "cron hour field '24': 24 is out of range 0-23"),
        ("0 0 0 * *", "cron day-of-month field '0': 0 is out of range 1-31"),
        ("0 0 32 * *", "cron day-of-month field '32': 32 is out of range 1-31"),
        ("0 0 * 13 *", "cron month field '13': 13 is out of range 1-12"),
        ("0 0 * * 8", "cron day-of-week field '8': 8 is out of range 0-7"),
        ("0 0 * 0-3 *", "cron month field '0-3': 0 is out of range 1-12"),
        ("5-1 * * * *", "cron minute field '5-1': range 5-1 runs backwards"),
        ("*/0 * * * *", "cron minute field '*/0': step 0 is out of range 1-60"),
        ("*/61 * * * *", "cron minute field '*/61': step 61 is out of range 1-60"),
        ("1,,2 * * * *", "cron minute field '1,,2': an empty list item"),
        ("? * * * *", "cron minute field '?': '?' is not a cron term"),
        ("0 0 L * *", "cron day-of-month field 'L': 'L' is not a cron term"),
        ("0 0 * * MON", "cron day-of-week field 'MON': names like 'MON' are not accepted"),
        ("0 0 * JAN *", "cron month field 'JAN': names like 'JAN' are not accepted"),
        ("0 0 30 2 *", "cron day-of-month field '30': day 30 never occurs in February"),
        ("0 0 31 4,6,9,11 *",
         "cron day-of-month field '31': day 31 never occurs in April, June, September, November"),
        ("0 0 30,31 2 1-5", None),  # day fields OR-ed: weekdays in February exist
    ],
)  # fmt: skip
def test_parse_refuses_with_field_and_reason(text: str, message: str | None) -> None:
    if message is None:
        assert cron.parse(text).text == text
        return
    with pytest.raises(LaneboardError) as exc:
        cron.parse(text)
    assert exc.value.code == "BAD_INPUT"
    assert exc.value.message == message
    assert exc.value.fix and "\n" not in exc.value.line()


def test_feb_29_is_possible_and_falls_on_leap_years() -> None:
    e = cron.parse("0 0 29 2 *")
    nxt = cron.next_due(e, UTC, at(UTC, 2026, 1, 1))
    assert nxt == at(UTC, 2028, 2, 29)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("*/5 * * * *", "Every fifth minute"),
        ("0 9 * * 1-5", "At 09:00 on Monday through Friday"),
        ("30 2 * * *", "At 02:30 every day"),
        ("0 0 * * 7", "At 00:00 on Sunday"),
        ("0 0 * * 0", "At 00:00 on Sunday"),
    ],
)
def test_explanation_in_plain_words(text: str, words: str) -> None:
    assert cron.explain(cron.parse(text)).startswith(words)


def test_next_due_and_is_due_in_utc() -> None:
    e = cron.parse("*/5 * * * *")
    t = at(UTC, 2026, 1, 1, 10, 3)
    assert cron.next_due(e, UTC, t) == at(UTC, 2026, 1, 1, 10, 5)
    assert cron.next_due_from(e, UTC, at(UTC, 2026, 1, 1, 10, 5) + 42_000) == at(
        UTC, 2026, 1, 1, 10, 5
    )
    assert cron.is_due(e, UTC, at(UTC, 2026, 1, 1, 10, 5) + 59_999)
    assert not cron.is_due(e, UTC, at(UTC, 2026, 1, 1, 10, 6))


def test_day_of_week_zero_is_sunday() -> None:
    e = cron.parse("0 12 * * 0")
    got = cron.next_due(e, UTC, at(UTC, 2026, 1, 1))  # a Thursday
    assert datetime.fromtimestamp(got / 1000, tz=UTC).strftime("%A %d") == "Sunday 04"


def test_last_elapsed_counts_only_finished_minutes_after_since() -> None:
    e = cron.parse("0 10 * * *")
    ten = at(UTC, 2026, 1, 2, 10)
    assert cron.last_elapsed(e, UTC, ten + 30_000, 0) == at(UTC, 2026, 1, 1, 10)
    assert cron.last_elapsed(e, UTC, ten + 60_000, 0) == ten
    assert cron.last_elapsed(e, UTC, ten + 60_000, ten + 1) is None
    assert cron.last_elapsed(e, UTC, ten + 5 * 60_000, at(UTC, 2026, 1, 2)) == ten


def test_spring_forward_new_york() -> None:
    start = at(NY, 2026, 3, 8, 0, 0)
    day = 23 * 60  # this day has 23 hours
    # 02:30 does not exist on 8 March 2026: it runs once, right after the jump
    assert fires("30 2 * * *", NY, start, day) == ["2026-03-08T03:00:00-04:00"]
    assert fires("30 1 * * *", NY, start, day) == ["2026-03-08T01:30:00-05:00"]
    assert fires("0 3 * * *", NY, start, day) == ["2026-03-08T03:00:00-04:00"]
    # a wildcard hour runs in real minutes: the skipped hour simply has none
    half_hourly = fires("*/30 * * * *", NY, start, day)
    assert len(half_hourly) == 46
    assert not any("T02:" in t for t in half_hourly)


def test_fall_back_new_york() -> None:
    start = at(NY, 2026, 11, 1, 0, 0)
    day = 25 * 60  # this day has 25 hours
    # 01:30 happens twice: a fixed-time job runs once, on the first pass
    assert fires("30 1 * * *", NY, start, day) == ["2026-11-01T01:30:00-04:00"]
    assert fires("30 2 * * *", NY, start, day) == ["2026-11-01T02:30:00-05:00"]
    half_hourly = fires("*/30 * * * *", NY, start, day)
    assert len(half_hourly) == 50
    assert half_hourly.count("2026-11-01T01:30:00-04:00") == 1
    assert half_hourly.count("2026-11-01T01:30:00-05:00") == 1


def test_next_due_never_returns_a_past_instant_in_the_repeated_hour() -> None:
    e = cron.parse("30 1 * * *")
    second_pass = at(NY, 2026, 11, 1, 1, 10, fold=1)  # 01:10 EST, after the 01:30 EDT fire
    assert local(cron.next_due_from(e, NY, second_pass) or 0) == "2026-11-02T01:30:00-05:00"
    assert cron.last_elapsed(e, NY, second_pass, 0) == at(NY, 2026, 11, 1, 1, 30)


@pytest.mark.parametrize("expr", ["30 1 * * *", "30 2 * * *", "*/20 * * * *", "0 1-3 * * *"])
@pytest.mark.parametrize("day", [(2026, 3, 8), (2026, 11, 1), (2026, 6, 1)])
def test_last_elapsed_agrees_with_a_minute_by_minute_scan(expr: str, day: tuple[int, ...]) -> None:
    e = cron.parse(expr)
    start = at(NY, *day)
    due = [start + i * 60_000 for i in range(26 * 60) if cron.is_due(e, NY, start + i * 60_000)]
    for now in range(start + 30 * 60_000, start + 26 * 3_600_000, 17 * 60_000 + 13_000):
        upper = cron.floor_minute(now) - 60_000
        want = max((m for m in due if m <= upper), default=None)
        assert cron.last_elapsed(e, NY, now, start) == want, local(now)
