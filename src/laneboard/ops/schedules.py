"""Operations on schedules: cards created by cron (add, list, show, remove, enable,
disable). ``lb scheduler run`` (the pass itself) is a local command.

Each call imports the board lazily; this module stays cheap to load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from laneboard.errors import bad_input
from laneboard.ops import schemas as R
from laneboard.ops.invoke import Call
from laneboard.ops.render import table
from laneboard.ops.spec import Caller, Op, Params, Route, p

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
NAME = p("name", "text", "the schedule's name", required=True, http="path", metavar="NAME",
         schema={"maxLength": 64, "minLength": 1})  # fmt: skip


def read_job(path: str) -> dict[str, Any]:
    """Read a job definition file (TOML, or JSON when it ends in .json or starts with '{').

    It is read where ``lb`` runs and sent as a JSON object, so a remote board gets the
    template itself, never a path it cannot see.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise bad_input(
            f"job definition {path} does not exist", "pass the path of a TOML or JSON file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise bad_input(
            f"job definition {path} cannot be read: {exc}", "pass a readable UTF-8 file"
        ) from None
    as_json = path.lower().endswith(".json") or (
        not path.lower().endswith(".toml") and text.lstrip().startswith("{")
    )
    if as_json:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise bad_input(
                f"job definition {path} is not valid JSON: {exc}", "fix the JSON syntax"
            ) from None
    else:
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = str(exc).replace("\n", " ")
            raise bad_input(
                f"job definition {path} is not valid TOML: {msg}", "fix the TOML syntax"
            ) from None
    if not isinstance(data, dict):
        raise bad_input(
            f"job definition {path} is not a table of fields",
            f"give an object with: {', '.join(JOB_KEYS)}",
        )
    return data


def _service(c: Call) -> Any:
    from laneboard.board.schedules import Schedules

    return Schedules(c.store, c.clock)


def line(v: Mapping[str, Any]) -> str:
    state = "enabled" if v["enabled"] else "disabled"
    nxt = v["next_due_local"] or "-"
    meaning = v["explanation"] or f"BROKEN: {v.get('broken')}"
    out = f"{v['name']}: {v['expression']} ({meaning}; {v['timezone']}), {state}"
    return out + f", next due {nxt}, health {v['health']}"


def add(c: Call, a: Params) -> Any:
    return _service(c).add(
        c.actor,
        a["name"],
        a["cron"],
        a["job"],
        timezone=a["timezone"],
        enabled=not a.get("disabled"),
    )


ADD = Op(
    "schedule.add",
    ("schedule", "add"),
    "add a schedule from a card template",
    "Create a card from a template each time a five-field cron expression matches, in "
    "the schedule's time zone (local by default). The template (TOML or JSON) names the "
    "project and title, and may set any field of lb card add. Missed minutes are not "
    "caught up.",
    ('lb schedule add nightly.toml --cron "0 3 * * *" --name nightly',
     'lb schedule add weekly.json --cron "0 9 * * 1" --name weekly --timezone Europe/Berlin'),
    (
        p("job", "object", "path to the card template (TOML or JSON)", required=True,
          metavar="JOBDEF", cli_type="jobfile"),
        p("cron", "text", 'five-field cron, e.g. "*/5 * * * *"', flag="--cron", required=True,
          schema={"maxLength": 200, "minLength": 1}),
        p("name", "text", "a unique name for the schedule", flag="--name", required=True,
          schema={"maxLength": 64, "minLength": 1}),
        p("timezone", "text", "local (the host's zone) or an IANA name like Europe/Berlin",
          flag="--timezone", default="local", schema={"maxLength": 100}),
        p("disabled", "bool", "add it disabled", flag="--disabled"),
    ),
    Caller.PERSON,
    "board",
    add,
    lambda d, _a, _n: "added schedule " + line(d),
    R.SCHEDULE,
    routes=(Route("POST", "/schedules", "addSchedule", 201, tag="schedules"),),
    tool="add_schedule",
    what="add schedules",
)  # fmt: skip


def list_all(c: Call, _a: Params) -> Any:
    return _service(c).list()


def list_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    rows = []
    for v in d:
        last = v["last_outcome"] or "-"
        if v["last_card"]:
            last += f" {v['last_card']}"
        rows.append(
            [v["name"], v["expression"], v["explanation"] or f"BROKEN: {v.get('broken')}",
             v["timezone"],
             "yes" if v["enabled"] else "no", v["next_due_local"] or "-", last, v["health"]]
        )  # fmt: skip
    headers = ["NAME", "CRON", "MEANING", "ZONE", "ON", "NEXT DUE", "LAST", "HEALTH"]
    return table(rows, headers)


LIST = Op(
    "schedule.list",
    ("schedule", "list"),
    "list schedules with next due, last outcome and health",
    "Every schedule: its cron expression in words, zone, whether it is enabled, when it "
    "is next due, its last outcome and card, and its health (never-run, ok, overdue, "
    "failing: its last dispatch failed; broken: its stored row cannot be read).",
    ("lb schedule list",),
    (),
    Caller.PERSON,
    "board",
    list_all,
    list_text,
    R.array(R.SCHEDULE),
    read_only=True,
    routes=(Route("GET", "/schedules", "listSchedules", tag="schedules"),),
    tool="list_schedules",
    tool_key="schedules",
    what="read schedules",
)


def show(c: Call, a: Params) -> Any:
    return _service(c).get(a["name"])


def show_text(v: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    text = [line(v), f"  card: {v['project']}: {v['title']}"]
    if v["last_outcome"]:
        text.append(
            f"  last: {v['last_outcome']} for {v['last_minute']}"
            + (f" -> {v['last_card']}" if v["last_card"] else "")
            + (f" ({v['last_detail']})" if v["last_detail"] else "")
        )
    if v["overdue_since"]:
        text.append(f"  overdue: the occurrence at {v['overdue_since']} has no outcome")
    return "\n".join(text)


SHOW = Op(
    "schedule.show",
    ("schedule", "show"),
    "show one schedule",
    "One schedule with its card template and its last outcome.",
    ("lb schedule show nightly",),
    (NAME,),
    Caller.PERSON,
    "board",
    show,
    show_text,
    R.SCHEDULE,
    read_only=True,
    routes=(Route("GET", "/schedules/{name}", "getSchedule", tag="schedules"),),
    tool="get_schedule",
    what="read schedules",
)


def remove(c: Call, a: Params) -> Any:
    return _service(c).remove(c.actor, a["name"])


REMOVE = Op(
    "schedule.remove",
    ("schedule", "remove"),
    "delete a schedule",
    "Delete a schedule; the cards it created stay.",
    ("lb schedule remove nightly",),
    (NAME,),
    Caller.PERSON,
    "board",
    remove,
    lambda d, _a, _n: f"removed schedule {d['name']}",
    R.SCHEDULE,
    destructive=True,
    routes=(Route("DELETE", "/schedules/{name}", "removeSchedule", tag="schedules"),),
    tool="remove_schedule",
    what="remove schedules",
)


def enable(c: Call, a: Params) -> Any:
    return _service(c).set_enabled(c.actor, a["name"], True)


ENABLE = Op(
    "schedule.enable",
    ("schedule", "enable"),
    "enable a schedule",
    "It fires from its next matching minute; occurrences while it was disabled are not owed.",
    ("lb schedule enable nightly",),
    (NAME,),
    Caller.PERSON,
    "board",
    enable,
    lambda d, _a, _n: "enabled schedule " + line(d),
    R.SCHEDULE,
    routes=(Route("POST", "/schedules/{name}/enable", "enableSchedule", tag="schedules"),),
    tool="enable_schedule",
    what="change schedules",
)


def disable(c: Call, a: Params) -> Any:
    return _service(c).set_enabled(c.actor, a["name"], False)


DISABLE = Op(
    "schedule.disable",
    ("schedule", "disable"),
    "disable a schedule",
    "It stops firing until it is enabled again.",
    ("lb schedule disable nightly",),
    (NAME,),
    Caller.PERSON,
    "board",
    disable,
    lambda d, _a, _n: "disabled schedule " + line(d),
    R.SCHEDULE,
    routes=(Route("POST", "/schedules/{name}/disable", "disableSchedule", tag="schedules"),),
    tool="disable_schedule",
    what="change schedules",
)

OPS = (ADD, LIST, SHOW, REMOVE, ENABLE, DISABLE)
