"""Operations on runs: list, show, the project's status snapshot, and a person's
transitions (start, pause, resume, stop, force-stop). ``lb run --goal …`` (the loop
itself) is the local command of ``cli.run_cmds``.

Each call imports the board lazily; this module stays cheap to load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneboard.ops import schemas as R
from laneboard.ops.invoke import Call
from laneboard.ops.render import table
from laneboard.ops.spec import Caller, Op, Params, Route, p

RUN_ID = p("id", "int", "the run's id (lb run list)", required=True, http="path", metavar="RUN",
           schema={"minimum": 1})  # fmt: skip
KEY = p(
    "idempotency_key",
    "text",
    "idempotency key (required; lb makes a fresh one when it is left out): a repeat with "
    "the same key and request returns the first response",
    flag="--key",
    http="header",
    wire="Idempotency-Key",
    schema={"maxLength": 500},
)
REASON = p("reason", "text", "why (kept in the run's event)", flag="--reason",
           schema={"maxLength": 500})  # fmt: skip


def line(v: Mapping[str, Any]) -> str:
    conv = v["convergence"]
    state = f"{conv['state']} / {conv['reason']}" if conv["reason"] else "not ticked yet"
    return (
        f"run {v['id']} [{v['project']}] {v['status']}: {v['goal'].splitlines()[0][:80]} "
        f"({v['card_total']} cards, {v['iterations']} iterations, {state})"
    )


def show_text(v: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    out = [line(v)]
    cards = ", ".join(f"{n} {s}" for s, n in v["cards"].items()) or "none yet"
    out.append(f"  cards: {cards}")
    o = v["options"]
    out.append(
        f"  options: interval {o['interval_ms']} ms, retry backoff {o['retry_backoff_ms']} ms, "
        f"max consecutive errors {o['max_consecutive_errors']}, "
        f"max iterations {o['max_iterations'] or 'unbounded'}"
        + (", headless" if o["headless"] else "")
    )
    out.append(f"  started {v['started_at']}, ended {v['ended_at'] or '-'}")
    if v["consecutive_errors"] or v["errors_total"]:
        out.append(f"  errors: {v['consecutive_errors']} in a row, {v['errors_total']} in all")
    if v["last_error"]:
        out.append(f"  last error: {v['last_error']}")
    for key, b in (v.get("budgets") or {}).items():
        out.append(f"  budget {key}: {b['used']} of {b['limit']}")
    return "\n".join(out)


def list_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    rows = [
        [str(v["id"]), v["project"], v["status"], v["convergence"]["reason"] or "-",
         str(v["card_total"]), str(v["iterations"]), v["goal"].splitlines()[0][:50]]
        for v in d
    ]  # fmt: skip
    return table(rows, ["RUN", "PROJECT", "STATUS", "CONVERGENCE", "CARDS", "ITER", "GOAL"])


def create(c: Call, a: Params) -> Any:
    from laneboard.domain.runs import normalize

    options = normalize(
        interval_ms=a.get("interval_ms") or 0,
        retry_backoff_ms=a.get("retry_backoff_ms") or 0,
        max_consecutive_errors=a.get("max_consecutive_errors") or 0,
        max_iterations=a.get("max_iterations") or 0,
    )
    return c.board.create_run(c.actor, a["project"], a["goal"], options)


MS = {"minimum": -(2**31), "maximum": 2**31}
CREATE = Op(
    "run.create",
    ("run", "create"),
    "create a run for a goal",
    "Create an active run for a goal in a project, with its loop options (non-positive "
    "values take the defaults). Its cards join it with lb card add --run; the resident "
    "supervisor (lb start) ticks it. lb run --goal creates one and drives it itself.",
    ('lb run create WEB --goal "ship the billing export"',),
    (
        p("project", "project", "project key or name", required=True, metavar="PROJECT"),
        p("goal", "text", "what the run is for", flag="--goal", required=True,
          schema={"maxLength": 5000, "minLength": 1}),
        p("interval_ms", "int", "wait between iterations, ms (default 1000)",
          flag="--interval-ms", schema=MS),
        p("retry_backoff_ms", "int", "wait after a failed iteration, ms (default 250)",
          flag="--retry-backoff-ms", schema=MS),
        p("max_consecutive_errors", "int", "fail the run after this many failed iterations "
          "in a row (default 5)", flag="--max-consecutive-errors", schema=MS),
        p("max_iterations", "int", "bound the iterations of lb run (0: unbounded)",
          flag="--max-iterations", schema=MS),
    ),
    Caller.PERSON,
    "board",
    create,
    lambda d, _a, _n: "created " + line(d),
    R.RUN,
    routes=(Route("POST", "/runs", "createRun", 201, tag="runs"),),
    tool="create_run",
    what="create runs",
)  # fmt: skip


def list_runs(c: Call, a: Params) -> Any:
    return c.board.runs(project=a.get("project"), statuses=a.get("statuses") or [],
                        limit=a["limit"])  # fmt: skip


LIST = Op(
    "run.list",
    ("run", "list"),
    "list runs",
    "Runs, newest first: each run's project, status, convergence state and reason, its "
    "cards by status and its iteration count.",
    ("lb run list", "lb run list --project WEB --status active"),
    (
        p("project", "project", "only this project", flag="--project", http="query"),
        p("statuses", "texts", "only this status (repeatable)", flag="--status", http="query",
          wire="status", choices=tuple(R.RUN_STATUSES)),
        p("limit", "int", "at most this many", flag="--limit", http="query", default=100,
          schema={"minimum": 1, "maximum": 1000}),
    ),
    Caller.PERSON,
    "board",
    list_runs,
    list_text,
    R.array(R.RUN),
    read_only=True,
    routes=(Route("GET", "/runs", "listRuns", tag="runs"),),
    tool="list_runs",
    tool_key="runs",
    what="read runs",
)  # fmt: skip


SHOW = Op(
    "run.show",
    ("run", "show"),
    "show one run",
    "One run: its goal, status, options, counters, convergence state and reason, and its "
    "cards by status (list them with lb card list --run RUN).",
    ("lb run show 3", "lb run show 3 --json"),
    (RUN_ID,),
    Caller.PERSON,
    "board",
    lambda c, a: c.board.run(a["id"]),
    show_text,
    R.RUN,
    read_only=True,
    routes=(Route("GET", "/runs/{id}", "getRun", tag="runs"),),
    tool="get_run",
    what="read runs",
)


def snapshot_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    out = [line(d["run"]), f"  as of {d['as_of']} (last change {d['updated_at']})"]
    out.append(
        f"  agents {d['active_agents']} active, {d['queued_dispatches']} queued; deliveries "
        f"{d['open_deliveries']} open, {d['pending_approvals']} awaiting a person; "
        f"blockers {d['blockers']}"
    )
    out += [f"    {b['ref']} {b['status']}: {b['title']}" for b in d["blocked_cards"]]
    return "\n".join(out)


STATUS = Op(
    "run.status",
    ("run", "status"),
    "show a project's run status snapshot",
    "One consistent snapshot of a project's newest run (or --run): its status and "
    "convergence, active agents (turns running), queued dispatches, open deliveries (cards "
    "in review), pending approvals (deliveries a person must accept) and blockers (blocked "
    "or awaiting cards, listed), read in one transaction. A failing read is an error, "
    "never zeroes; a project without runs is NOT_FOUND.",
    ("lb run status WEB", "lb run status WEB --run 3 --json"),
    (
        p("project", "project", "project key or name", required=True, http="path",
          metavar="PROJECT"),
        p("run", "int", "this run of the project (default: its newest)", flag="--run",
          http="query", schema={"minimum": 1}),
    ),
    Caller.PERSON,
    "board",
    lambda c, a: c.board.run_status(a["project"], a.get("run")),
    snapshot_text,
    R.RUN_SNAPSHOT,
    read_only=True,
    routes=(Route("GET", "/projects/{project}/runs/status", "getRunStatus", tag="runs"),),
    tool="get_run_status",
    what="read runs",
)  # fmt: skip


def _transition(action: str) -> Any:
    def call(c: Call, a: Params) -> Any:
        return c.board.transition_run(
            c.actor, a["id"], action, idempotency_key=a.get("idempotency_key"),
            reason=a.get("reason"),
        )  # fmt: skip

    return call


def transition_text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    done = f"run {d['run_id']}: {d['action']} {d['from']} -> {d['status']}"
    if d["status"] != d["target"]:
        done += f" (becomes {d['target']} when its running turns have finished)"
    return done + (" (replayed: this key's first response)" if d["replayed"] else "")


def with_key(runner: Any, op: Op, params: Params, _local: Params, as_json: bool) -> int:
    """The command line's driver: a fresh idempotency key when none was given."""
    import json
    import sys
    import uuid

    params = {**params}
    params.setdefault("idempotency_key", f"lb-{uuid.uuid4()}")
    data, notes = runner.call(op, params)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(op.text(data, params, notes) + "\n")
    return 0


DESCRIPTIONS = {
    "start": "Start a run that is stopped or starting: it becomes active and the "
    "supervisor ticks it again.",
    "pause": "Pause an active run's intake: its cards take no new claims; turns already "
    "running finish. resume lifts it.",
    "resume": "Resume a paused or degraded run: it becomes active and takes claims again.",
    "stop": "Stop a run by draining it: no new turns start, running turns finish, then it "
    "is stopped (draining until then).",
    "force-stop": "Stop a run now: the supervisor interrupts its running turns (their process "
    "groups), records them interrupted and releases their claims, then it is stopped.",
}


def transition_op(action: str) -> Op:
    allowed, target = _allowed(action)
    return Op(
        f"run.{action}",
        ("run", action),
        f"{action} a run ({allowed} -> {target})",
        DESCRIPTIONS[action] + " Needs a person's credential and an idempotency key; "
        "another state is refused with ILLEGAL_RUN_TRANSITION.",
        (f"lb run {action} 3", f"lb run {action} 3 --key {action}-3-a --json"),
        (RUN_ID, REASON, KEY),
        Caller.PERSON,
        "board",
        _transition(action),
        transition_text,
        R.RUN_TRANSITION,
        destructive=action == "force-stop",
        routes=(Route("POST", f"/runs/{{id}}/{action}", _op_id(action), tag="runs"),),
        tool=f"{action.replace('-', '_')}_run",
        cli_run=with_key,
        what="change runs",
    )


def _allowed(action: str) -> tuple[str, str]:
    from laneboard.domain.runs import TRANSITIONS

    prior, target = TRANSITIONS[action]
    return ", ".join(sorted(s.value for s in prior)), target.value


def _op_id(action: str) -> str:
    first, *rest = action.split("-")
    return first + "".join(w.capitalize() for w in rest) + "Run"


TRANSITION_OPS = tuple(transition_op(a) for a in ("start", "pause", "resume", "stop", "force-stop"))

OPS = (CREATE, LIST, SHOW, STATUS, *TRANSITION_OPS)
