"""Schedule inputs: job definitions (card templates), schedule names and time zones."""

from __future__ import annotations

import contextlib
import os
import re
from datetime import datetime, tzinfo
from typing import Any

from laneboard.board import inputs
from laneboard.domain.model import AcceptanceMode, check_priority, parse_enum
from laneboard.errors import bad_input, not_found
from laneboard.store.tx import Tx

JOB_KEYS = (
    "project",
    "title",
    "description",
    "assignee",
    "priority",
    "labels",
    "acceptance",
    "checks",
    "allowed_paths",
    "acceptance_mode",
)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LOCAL = "local"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise bad_input(
            f"schedule name {name!r} is not valid",
            "use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


# -- time zones -------------------------------------------------------------------------
def check_zone(name: str) -> str:
    """``local`` or an IANA zone name that this machine knows."""
    if name == LOCAL:
        return name
    zone_of(name)
    return name


def zone_of(name: str) -> tzinfo:
    """The tzinfo for a schedule's zone: ``local`` is the host's zone."""
    if name == LOCAL:
        return local_zone()
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise bad_input(
            f"unknown time zone {name!r}",
            "use local or an IANA name like Europe/Berlin or America/New_York",
        ) from None


def local_zone_name() -> str:
    """The host's zone as an IANA name (``TZ``, the /etc/localtime link, /etc/timezone),
    so that a ``local`` schedule means the same zone on every host that runs it."""
    from zoneinfo import available_timezones

    known = available_timezones()
    tz = (os.environ.get("TZ") or "").lstrip(":")
    if tz:
        if tz in known:
            return tz
        raise bad_input(
            f"TZ={tz!r} is not an IANA time zone, so local cannot be resolved",
            "pass --timezone with an IANA name like Europe/Berlin",
        )
    candidates = []
    # each source is optional: a host may have either, both or neither
    with contextlib.suppress(OSError):
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    with contextlib.suppress(OSError), open("/etc/timezone") as fh:
        candidates.append(fh.read().strip())
    for name in candidates:
        if name in known:
            return name
    raise bad_input(
        "this host's time zone has no IANA name, so local cannot be resolved",
        "pass --timezone with an IANA name like Europe/Berlin",
    )


def resolve_zone(name: str) -> str:
    """The zone a new schedule stores: ``local`` becomes this host's IANA name."""
    return local_zone_name() if check_zone(name) == LOCAL else name


def local_zone() -> tzinfo:
    """The host's zone: ``TZ`` if it names a zone, else /etc/localtime, else the offset."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    tz = (os.environ.get("TZ") or "").lstrip(":")
    if tz:
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    try:
        with open("/etc/localtime", "rb") as fh:
            return ZoneInfo.from_file(fh, key="localtime")
    except (OSError, ValueError):
        pass
    local = datetime.now().astimezone().tzinfo
    assert local is not None
    return local


# -- job definitions ----------------------------------------------------------------------
def _string_list(job: dict[str, Any], key: str, *, strings: bool = True) -> list[Any]:
    value = job.get(key, [])
    if not isinstance(value, list) or (strings and not all(isinstance(v, str) for v in value)):
        raise bad_input(f"job field {key} must be a list", f"write {key} as a list of strings")
    return value


def validate_job(tx: Tx, job: dict[str, Any]) -> dict[str, Any]:
    """Check a card template as card creation would; returns it normalised.

    The project must exist (stored by key); unknown fields are refused.
    """
    unknown = sorted(set(job) - set(JOB_KEYS))
    if unknown:
        raise bad_input(
            f"job definition has unknown field{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)}",
            f"allowed fields: {', '.join(JOB_KEYS)}",
        )
    for key in ("project", "title"):
        if key not in job:
            raise bad_input(f"job definition has no {key}", f"add a {key} field")
    for key in ("project", "title", "description", "assignee", "acceptance_mode"):
        if key in job and not isinstance(job[key], str):
            raise bad_input(f"job field {key} must be text", f"write {key} as a string")
    title = inputs.text(job["title"], "title", limit=500)
    description = inputs.text(job.get("description", ""), "description", empty=True, multiline=True)
    priority = job.get("priority", 2)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise bad_input("job field priority must be a whole number", "use 0 (highest) to 3")
    check_priority(priority)
    labels = inputs.strings(_string_list(job, "labels"), "labels")
    checks = inputs.strings(_string_list(job, "checks"), "checks")
    paths = [inputs.repo_path(p) for p in _string_list(job, "allowed_paths")]
    crit = [c.to_dict() for c in inputs.criteria(_string_list(job, "acceptance", strings=False))]
    mode = parse_enum(AcceptanceMode, job.get("acceptance_mode", "auto"), "acceptance mode")
    assignee = job.get("assignee")
    if assignee is not None:
        assignee = inputs.text(assignee, "assignee", limit=200).strip()
    ref = job["project"]
    project = tx.project(key=ref) or tx.project(name=ref)
    if project is None:
        raise not_found("project", ref, "add it with: lb project add KEY --path DIR")
    return {
        "project": project.key,
        "title": title,
        "description": description,
        "assignee": assignee,
        "priority": priority,
        "labels": labels,
        "acceptance": crit,
        "checks": checks,
        "allowed_paths": paths,
        "acceptance_mode": mode.value,
    }
