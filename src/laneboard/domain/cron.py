"""Five-field cron expressions: validation, plain words, and when they fall due.

The expression language is standard five-field cron (minute, hour, day of month,
month, day of week; 0 and 7 are Sunday). A field is ``*``, a number, a range
``9-17``, a step ``*/5`` or ``9-17/2``, or a comma list of those. Matching is done by
``cronsim`` in a given time zone; this module adds exact validation messages and the
minute-level rules the scheduler needs:

* an occurrence is the start of a minute (epoch milliseconds);
* ``is_due(m)`` holds when ``m`` is the first occurrence after the minute before it,
  which gives cron's behaviour across daylight-saving changes: a fixed-time job whose
  wall time is skipped runs once just after the jump, and one whose wall time repeats
  runs once, on the first pass; a job with a ``*`` minute or hour runs in real minutes.

No I/O here: callers resolve the time zone and read the clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, tzinfo

from laneboard.domain.clock import MINUTE_MS
from laneboard.errors import LaneboardError

FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
FORMS = "use *, a number, a range like 9-17, a step like */5 or 9-17/2, or a list like 1,15,30"
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTHS = (
    "",
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_TERM = re.compile(r"^(\*|\d+|\d+-\d+)(?:/(\d+))?$")
_SEARCH_LIMIT = 2000  # occurrences examined when walking backwards


@dataclass(frozen=True)
class CronExpr:
    """A validated expression: the normalised text and the values each field allows."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0..6, Sunday = 0


def _refuse(field: str, raw: str, reason: str, fix: str = FORMS) -> LaneboardError:
    return LaneboardError("BAD_INPUT", f"cron {field} field {raw!r}: {reason}", fix)


def _field_values(index: int, raw: str) -> frozenset[int]:
    name, lo, hi = FIELDS[index]
    values: set[int] = set()
    for term in raw.split(","):
        m = _TERM.match(term)
        if m is None:
            if term.isalpha() and index >= 3:
                first = "0 = Sunday, 7 = Sunday" if index == 4 else "1 = January"
                raise _refuse(
                    name, raw, f"names like {term!r} are not accepted", f"use numbers ({first})"
                )
            what = "an empty list item" if term == "" else f"{term!r} is not a cron term"
            raise _refuse(name, raw, what)
        base, step_s = m.group(1), m.group(2)
        if base == "*":
            start, end = lo, hi
        elif "-" in base:
            a, b = (int(x) for x in base.split("-"))
            for v in (a, b):
                if not lo <= v <= hi:
                    raise _refuse(name, raw, f"{v} is out of range {lo}-{hi}", f"use {lo}-{hi}")
            if a > b:
                raise _refuse(name, raw, f"range {a}-{b} runs backwards", f"write it as {b}-{a}")
            start, end = a, b
        else:
            start = int(base)
            if not lo <= start <= hi:
                raise _refuse(name, raw, f"{start} is out of range {lo}-{hi}", f"use {lo}-{hi}")
            end = hi if step_s is not None else start
        step = 1
        if step_s is not None:
            step = int(step_s)
            span = hi - lo + 1
            if step < 1 or step > span:
                raise _refuse(
                    name,
                    raw,
                    f"step {step} is out of range 1-{span}",
                    f"use a step from 1 to {span}",
                )
        values.update(range(start, end + 1, step))
    if index == 4:
        values = {v % 7 for v in values}
    return frozenset(values)


def parse(text: str) -> CronExpr:
    """Validate a five-field expression; a refusal names the field and the reason."""
    if not isinstance(text, str):
        raise LaneboardError("BAD_INPUT", "a cron expression must be text", FORMS)
    parts = text.split()
    if len(parts) != 5:
        raise LaneboardError(
            "BAD_INPUT",
            f"cron expression {text.strip()!r} has {len(parts)} field"
            f"{'' if len(parts) == 1 else 's'}, not 5",
            'give five fields: minute hour day-of-month month day-of-week, e.g. "*/5 * * * *"',
        )
    sets = [_field_values(i, raw) for i, raw in enumerate(parts)]
    expr = CronExpr(" ".join(parts), *sets)
    # cron ANDs the day fields when either starts with '*', otherwise ORs them
    and_days = parts[2].startswith("*") or parts[4].startswith("*")
    if and_days and not any(d <= _DAYS_IN_MONTH[m] for m in expr.months for d in expr.days):
        days = ",".join(str(d) for d in sorted(expr.days))
        months = ", ".join(_MONTHS[m] for m in sorted(expr.months))
        raise _refuse(
            "day-of-month",
            parts[2],
            f"day {days} never occurs in {months}",
            "pick a day that exists in the chosen months",
        )
    try:
        from cronsim import CronSim, CronSimError

        it = CronSim(expr.text, datetime(2000, 1, 1))
        next(it)
    except CronSimError as exc:
        raise LaneboardError("BAD_INPUT", f"cron expression {expr.text!r}: {exc}", FORMS) from None
    except StopIteration:
        raise LaneboardError(
            "BAD_INPUT",
            f"cron expression {expr.text!r} never matches a real date",
            "pick a day that exists in the chosen months",
        ) from None
    return expr


def explain(expr: CronExpr) -> str:
    """The expression in plain words, e.g. 'At 09:00 on Monday through Friday'."""
    from cronsim import CronSim

    try:
        return str(CronSim(expr.text, datetime(2000, 1, 1)).explain())
    except Exception:  # the explainer is best effort; the expression itself is valid
        return expr.text


def floor_minute(ms: int) -> int:
    return ms - ms % MINUTE_MS


def _aware(ms: int, tz: tzinfo) -> datetime:
    return datetime.fromtimestamp((ms // 1000), tz)


def occurrences(expr: CronExpr, tz: tzinfo, after_ms: int) -> Iterator[int]:
    """Occurrence minutes (epoch ms) strictly after ``after_ms``, in order."""
    from cronsim import CronSim

    last = after_ms
    it = CronSim(expr.text, _aware(after_ms, tz))
    while True:
        try:
            dt = next(it)
        except StopIteration:
            return
        ms = int(dt.timestamp()) * 1000
        if ms <= last:  # a repeated wall time maps to an instant already passed
            continue
        last = ms
        yield ms


def next_due(expr: CronExpr, tz: tzinfo, after_ms: int) -> int | None:
    """The first occurrence strictly after ``after_ms``."""
    return next(occurrences(expr, tz, after_ms), None)


def next_due_from(expr: CronExpr, tz: tzinfo, now_ms: int) -> int | None:
    """The first occurrence whose minute has not ended: this minute if it is due."""
    return next_due(expr, tz, floor_minute(now_ms) - 1)


def is_due(expr: CronExpr, tz: tzinfo, minute_ms: int) -> bool:
    """Whether the minute starting at ``minute_ms`` (floored) is an occurrence."""
    m = floor_minute(minute_ms)
    return next_due(expr, tz, m - 1) == m


def last_elapsed(expr: CronExpr, tz: tzinfo, now_ms: int, since_ms: int) -> int | None:
    """The latest occurrence at or after ``since_ms`` whose minute has fully elapsed."""
    from cronsim import CronSim

    upper = floor_minute(now_ms) - MINUTE_MS  # the last minute that has ended
    if upper < since_ms:
        return None
    # walking backwards goes by wall time, which can land before the true latest
    # occurrence around a repeated hour; walk forwards from each candidate to settle it
    it = CronSim(expr.text, _aware(upper + MINUTE_MS, tz), reverse=True)
    for _ in range(_SEARCH_LIMIT):
        try:
            cand = int(next(it).timestamp()) * 1000
        except StopIteration:
            return None
        best = cand if cand <= upper and is_due(expr, tz, cand) else None
        for steps, o in enumerate(occurrences(expr, tz, cand)):
            if o > upper or steps >= _SEARCH_LIMIT:
                break
            best = o
        if best is not None:
            return best if best >= since_ms else None
        if cand < since_ms:
            return None
    return None
