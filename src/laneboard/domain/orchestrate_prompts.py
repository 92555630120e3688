"""The prompts of an orchestrated run: the coordinator's and each specialist's turns.

Each prompt says how to reach the one control tool (the ``orchestrator_control`` MCP
tool, or ``lb orchestrate control VERB …`` in a shell) and states what the runtime, not
the model, decides: a report completes nothing until the runtime has checked scope and
checks and integrated the change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from laneboard.domain.assignments import Assignment

CONTROL = (
    "Use the orchestrator_control tool (verb plus arguments) when you have it; otherwise "
    "run `lb orchestrate control VERB --option …` in your shell. Refusals come back as a "
    "stable code and one line: read them, they change nothing."
)


def coordinator_start(goal: str, allow: Sequence[str], checks: Sequence[str]) -> str:
    return "\n".join(
        [
            "You coordinate an orchestrated run. Plan the goal as assignments for named "
            "specialists; you do not write code yourself.",
            f"Goal: {goal}",
            f"Authorized paths: {', '.join(allow)}",
            f"The user's checks, run on the combined change before publication: "
            f"{'; '.join(checks) or '(none)'}",
            "",
            "Verbs: assign (--assignment NAME --owner ROLE --brief TEXT --path P… "
            "[--dep NAME…] [--check CMD…] [--deadline-secs N]), revise (--assignment NAME "
            "and what changes), cancel, recover (--decision retry|keep|cancel for "
            "uncertain work), answer (--assignment NAME --note TEXT), update (--assignment "
            "NAME --note TEXT: a message for its owner, steered into its running turn "
            "where possible, else given with its next turn; a completed "
            "assignment's owner answers it in a read-only turn), inspect, complete.",
            "Each path has exactly one owner; dependencies must already exist. Only verified "
            "assignments release their dependents. Call complete when every assignment is "
            "verified; the runtime then checks and publishes the combined change.",
            CONTROL,
        ]
    )


def coordinator_wake(notes: Iterable[str]) -> str:
    lines = ["What happened since your last turn:"]
    lines += [f"- {n}" for n in notes]
    lines.append("Decide the next step (inspect shows the whole plan). " + CONTROL)
    return "\n".join(lines)


def specialist_work(a: Assignment, lane: str, role: str) -> str:
    return messages(a) + _work(a, lane, role)


def _work(a: Assignment, lane: str, role: str) -> str:
    deps = (
        f"It builds on: {', '.join(a.deps)} (already verified and in your tree)." if a.deps else ""
    )
    return "\n".join(
        x
        for x in [
            f"You are {role}. Assignment {a.name!r}, revision {a.revision}.",
            f"Brief: {a.brief}",
            f"You own (and may change only): {', '.join(a.paths)}",
            f"Acceptance checks the runtime runs: {'; '.join(a.checks) or '(none)'}",
            deps,
            f"Your working tree: {lane}",
            f"First accept: verb accept --assignment {a.name} --revision {a.revision}. Work, "
            "commit, then report: verb report --assignment "
            f"{a.name} --revision {a.revision} --note SUMMARY. Record a checkpoint (verb "
            "checkpoint) before stopping half-way; ask a question with `lb card ask "
            "$LANEBOARD_CARD TEXT` and end your turn. A report completes nothing until the "
            "runtime has verified it.",
            CONTROL,
        ]
        if x
    )


def messages(a: Assignment) -> str:
    """The coordinator's queued messages, as a block a turn's prompt starts with."""
    if not a.messages:
        return ""
    return "Messages from the coordinator:\n" + "\n".join(f"- {m}" for m in a.messages) + "\n\n"


def specialist_clarify(a: Assignment) -> str:
    return (
        messages(a)
        + f"Assignment {a.name!r} (revision {a.revision}) is completed and verified. Answer "
        "the coordinator's question above in your reply. This turn is read-only: change "
        "no file (the runtime discards any change)."
    )


def specialist_answer(a: Assignment, answer: str) -> str:
    return "\n".join(
        [
            f"The coordinator answered your question on assignment {a.name!r} "
            f"(revision {a.revision}):",
            answer,
            "Continue the same assignment; report its revision when done. " + CONTROL,
        ]
    ) + ("\n\n" + messages(a).strip() if a.messages else "")
