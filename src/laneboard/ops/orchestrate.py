"""The one control operation of an orchestrated run: ``orchestrator_control``.

A coordinator proposes transitions of the plan and specialists report on their own
assignments through this single operation: an MCP tool for agent kinds that call tools,
and ``lb orchestrate control VERB …`` (in remote mode, with the session's credential)
for the others. The board checks who calls (the run's coordinator card, a specialist's
assignment card, or a person), then ownership, dependencies and revisions; a refusal is
a stable code the model sees verbatim. ``lb orchestrate`` itself, which starts and
resumes a run, is a local command (``cli.orchestrate_cmds``).

This module imports the board lazily; it stays cheap to load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laneboard.ops import schemas as R
from laneboard.ops.invoke import Call
from laneboard.ops.spec import Caller, Op, Params, Route, p

VERBS = ("assign", "revise", "cancel", "recover", "answer", "update", "inspect", "complete",
         "accept", "checkpoint", "report", "fail", "heartbeat")  # fmt: skip
ARGS = ("run", "assignment", "owner", "brief", "paths", "deps", "checks", "deadline_secs",
        "revision", "note", "decision")  # fmt: skip
NAME = {"maxLength": 40, "minLength": 1}
TEXT = {"maxLength": 20_000}

RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run": R.INT,
        "verb": R.S,
        "phase": R.S,
        "goal": R.S,
        "changed": R.array(R.ANY_OBJECT),
        "assignments": R.array(R.ANY_OBJECT),
        "assignment": R.ANY_OBJECT,
        "revisions": R.array(R.ANY_OBJECT),
        "ready": R.array(R.S),
        "active": R.array(R.S),
        "budgets": R.ANY_OBJECT,
    },
    "required": ["run"],
}


def control(c: Call, a: Params) -> Any:
    from laneboard.board.orchestrate import Orchestrations

    args = {k: a[k] for k in ARGS if a.get(k) not in (None, [])}
    return Orchestrations(c.board).control(c.actor, a["verb"], args)


def assignment_line(x: Mapping[str, Any]) -> str:
    flags = " uncertain" if x.get("uncertain") else ""
    deps = f" after {', '.join(x['deps'])}" if x.get("deps") else ""
    return (
        f"{x['name']} r{x['revision']} {x['state']}{flags} — {x['owner']} owns "
        f"{', '.join(x['paths'])}{deps}" + (f" ({x['card']})" if x.get("card") else "")
    )


def text(d: Any, _a: Params, _n: Mapping[str, Any]) -> str:
    if "changed" in d:
        lines = [f"{d['verb']}: run {d['run']}"]
        return "\n".join([*lines, *("  " + assignment_line(x) for x in d["changed"])])
    if "assignment" in d:
        x = d["assignment"]
        lines = [assignment_line(x), f"  brief: {x['brief']}"]
        lines += [f"  r{r['revision']} {r['state']} {r['lane_branch'] or ''}".rstrip()
                  for r in d["revisions"]]  # fmt: skip
        lines += [f"  [{q['kind']}] {q['author']}: {q['body']}" for q in d["questions"]]
        return "\n".join(lines)
    lines = [f"run {d['run']} ({d['phase']}): {d['goal']}"]
    lines += ["  " + assignment_line(x) for x in d["assignments"]] or ["  (no assignments)"]
    for key, b in d["budgets"].items():
        lines.append(f"  {key}: {b['used']} of {b['limit']}")
    return "\n".join(lines)


CONTROL = Op(
    "orchestrate.control",
    ("orchestrate", "control"),
    "propose a transition of an orchestrated run's plan",
    "The coordinator's and the specialists' one control tool. The coordinator may "
    "assign (a named specialist, owned paths, dependencies that already exist, checks, a "
    "deadline), revise (bumps the assignment and, transitively, its dependents), cancel, "
    "recover (retry, keep or cancel interrupted work), answer (a specialist's question), "
    "update (a message for a specialist: steered into its running turn where its kind "
    "supports it, else delivered with its next turn; to a completed "
    "assignment's idle owner, a read-only clarification turn whose reply comes back), "
    "inspect and complete (only when every assignment is verified and no specialist turn "
    "is active). A specialist may accept, checkpoint, report, fail and heartbeat its own "
    "assignment, naming its revision, and inspect. A report completes nothing: the "
    "runtime verifies scope and checks and integrates the change first. Refusals are "
    "stable codes (PATH_OVERLAP, UNKNOWN_DEPENDENCY, NOT_ACCEPTED, STALE_REVISION, "
    "UNVERIFIED_ASSIGNMENTS, …) and change nothing.",
    (
        "lb orchestrate control assign --assignment producer --owner specialist-a "
        "--brief 'emit the record' --path src/producer --check 'make test'",
        "lb orchestrate control accept --assignment producer --revision 1",
        "lb orchestrate control inspect --run 3",
    ),
    (
        p("verb", "text", "what to do", required=True, choices=VERBS, metavar="VERB"),
        p("run", "int", "the run (an agent's credential names it)", flag="--run",
          schema={"minimum": 1}),
        p("assignment", "text", "the assignment's name (e.g. producer)", flag="--assignment",
          schema=NAME),
        p("owner", "text", "assign: the specialist role that does it", flag="--owner",
          schema=NAME),
        p("brief", "text", "assign/revise: what to do, the contract", flag="--brief",
          schema=TEXT),
        p("paths", "texts", "assign/revise: a repository path it owns (repeat)",
          flag="--path", metavar="PATH"),
        p("deps", "texts", "assign/revise: an assignment it depends on (repeat)",
          flag="--dep", metavar="NAME"),
        p("checks", "texts", "assign/revise: an acceptance check command (repeat)",
          flag="--check", metavar="CMD"),
        p("deadline_secs", "int", "assign/revise: seconds until its deadline",
          flag="--deadline-secs", schema={"minimum": 1}),
        p("revision", "int", "accept/checkpoint/report/fail: the revision acted on",
          flag="--revision", schema={"minimum": 1}),
        p("note", "text", "checkpoint/report/fail: the note; answer: the answer; update: the message",
          flag="--note", schema=TEXT),
        p("decision", "text", "recover: retry, keep or cancel", flag="--decision",
          choices=("retry", "keep", "cancel")),
    ),
    Caller.CARD_READER,
    "own run",
    control,
    text,
    RESULT,
    routes=(Route("POST", "/orchestrate/control", "orchestratorControl", tag="orchestrate"),),
    tool="orchestrator_control",
    what="control orchestrated runs",
)  # fmt: skip

OPS = (CONTROL,)
