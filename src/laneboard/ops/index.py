"""The command words of ``lb``, and which module declares each: all ``lb`` reads to
dispatch a call, so it imports only the invoked command's module.

A test checks these lines against the modules' declarations (``ops.table``). Adding a
verb: declare its ``Op`` in an area module and add its line here. A local command (one
that runs on this machine and has no HTTP or MCP surface) keeps its own argparse
``register(subparsers)`` and plugs in with one ``LOCAL`` line.
"""

from __future__ import annotations

# the modules declaring operations, each with a module-level OPS tuple
MODULES = (
    "laneboard.ops.board",
    "laneboard.ops.cards",
    "laneboard.ops.work",
    "laneboard.ops.landing",
    "laneboard.ops.schedules",
    "laneboard.ops.runs",
    "laneboard.ops.orchestrate",
    "laneboard.ops.turns",
)

# command words -> (declaring module, summary)
OPS: dict[str, tuple[str, str]] = {
    "whoami": ("laneboard.ops.board", "show who you act as"),
    "status": ("laneboard.ops.board", "show the supervisor, pool, queue and sessions"),
    "doctor": ("laneboard.ops.board", "show the read-only health report"),
    "land": ("laneboard.ops.landing", "land an accepted card's lane, or retry a landing"),
    "project add": ("laneboard.ops.board", "add a project"),
    "project get": ("laneboard.ops.board", "show one project"),
    "project list": ("laneboard.ops.board", "list projects"),
    "project edit": ("laneboard.ops.board", "change a project's shared git remote"),
    "project config": ("laneboard.ops.board", "show or change a project's settings"),
    "card add": ("laneboard.ops.cards", "create a card"),
    "card get": ("laneboard.ops.cards", "show one card"),
    "card list": ("laneboard.ops.cards", "list cards"),
    "card edit": ("laneboard.ops.cards", "change fields of a card"),
    "card move": ("laneboard.ops.work", "move a card to another status"),
    "card claim": ("laneboard.ops.work", "claim a card"),
    "card heartbeat": ("laneboard.ops.work", "refresh your claim"),
    "card release": ("laneboard.ops.work", "give a claimed card back"),
    "card comment": ("laneboard.ops.work", "comment on a card"),
    "card comments": ("laneboard.ops.work", "list a card's comments"),
    "card report": ("laneboard.ops.work", "write the delivery report for the current round"),
    "card reports": ("laneboard.ops.work", "list a card's delivery reports"),
    "card deliver": ("laneboard.ops.work", "report and move the card to in_review"),
    "card link": ("laneboard.ops.cards", "make a card depend on another"),
    "card candidates": ("laneboard.ops.cards", "list claimable cards, heaviest first"),
    "card ask": ("laneboard.ops.work", "ask a blocking question on your in_progress card"),
    "card wait": (
        "laneboard.ops.work",
        "hold until a question is answered, escalated or the card moves",
    ),
    "card follow-up": ("laneboard.ops.landing", "create a card proposed by a done card's handoff"),
    "card handoff": (
        "laneboard.ops.landing",
        "record the handoff decision of a done producer card",
    ),
    "holds release": ("laneboard.ops.work", "release every card held for one reason"),
    "card transcript": ("laneboard.ops.turns", "show a card's agent transcript, and follow it"),
    "card stop": ("laneboard.ops.turns", "stop the agent turn running on a card"),
    "card tell": (
        "laneboard.ops.turns",
        "send the card's worker a follow-up (its running turn, or its next)",
    ),
    "card answer": ("laneboard.ops.turns", "answer a card's open question"),
    "card reject": (
        "laneboard.ops.turns",
        "reject a delivery waiting for your acceptance, naming what must be fixed",
    ),
    "inbox": ("laneboard.ops.turns", "list what needs you, each with its action"),
    "events tail": ("laneboard.ops.board", "print recent events, and follow new ones"),
    "token create": ("laneboard.ops.board", "create a token"),
    "token list": ("laneboard.ops.board", "list tokens"),
    "token revoke": ("laneboard.ops.board", "revoke a token"),
    "schedule add": ("laneboard.ops.schedules", "add a schedule from a card template"),
    "schedule list": (
        "laneboard.ops.schedules",
        "list schedules with next due, last outcome and health",
    ),
    "schedule show": ("laneboard.ops.schedules", "show one schedule"),
    "schedule remove": ("laneboard.ops.schedules", "delete a schedule"),
    "schedule enable": ("laneboard.ops.schedules", "enable a schedule"),
    "schedule disable": ("laneboard.ops.schedules", "disable a schedule"),
    "run create": ("laneboard.ops.runs", "create a run for a goal"),
    "run list": ("laneboard.ops.runs", "list runs"),
    "run show": ("laneboard.ops.runs", "show one run"),
    "run status": ("laneboard.ops.runs", "show a project's run status snapshot"),
    "run start": ("laneboard.ops.runs", "start a run (starting, stopped -> active)"),
    "run pause": ("laneboard.ops.runs", "pause a run (active -> paused-intake)"),
    "run resume": ("laneboard.ops.runs", "resume a run (degraded, paused-intake -> active)"),
    "run stop": ("laneboard.ops.runs", "stop a run (active, draining, paused-intake -> stopped)"),
    "run force-stop": (
        "laneboard.ops.runs",
        "force-stop a run (active, degraded, draining, paused-intake -> stopped)",
    ),
    "orchestrate control": (
        "laneboard.ops.orchestrate",
        "propose a transition of an orchestrated run's plan",
    ),
}

# groups of operations: word -> summary
GROUPS: dict[str, str] = {
    "project": "projects on the board",
    "card": "cards: create, read, move, claim, report",
    "events": "the event log",
    "holds": "cards the supervisor parked for a person",
    "token": "API, MCP and remote lb credentials",
    "schedule": "schedules: cards created by cron",
    "run": "runs: a goal's work (lb run --goal TEXT drives one)",
    "orchestrate": "orchestrated runs: a goal split into verified assignments",
}

# local commands: word -> (module with register(subparsers), summary, why it is local)
LOCAL: dict[str, tuple[str, str, str]] = {
    "init": (
        "laneboard.cli.init_cmds",
        "create the board database (and optionally a project)",
        "creates the database file or schema itself",
    ),
    "start": (
        "laneboard.cli.loop_cmds",
        "run the resident supervisor (clocks, passes, pool)",
        "runs this machine's supervisor and its agent processes",
    ),
    "loop": (
        "laneboard.cli.loop_cmds",
        "one-shot supervisor passes (cron shape)",
        "runs supervisor passes and agent processes on this machine",
    ),
    "patrol": (
        "laneboard.cli.doctor_cmds",
        "run one SLA patrol pass (notify-only)",
        "runs the notify command on this machine",
    ),
    "scheduler": (
        "laneboard.cli.schedule_cmds",
        "run schedule passes",
        "a pass of this machine's scheduler (it holds the tick lock)",
    ),
    "agents": (
        "laneboard.cli.agents_cmds",
        "agent CLIs and roles on this machine",
        "probes the agent binaries and role files of this machine",
    ),
    "worktree": (
        "laneboard.cli.worktree_cmds",
        "your own session worktrees under .worktrees/",
        "git worktrees of a checkout on this machine",
    ),
    "serve": (
        "laneboard.cli.serve_cmds",
        "serve the HTTP API, dashboard, metrics and MCP",
        "serves the board itself",
    ),
    "mcp": (
        "laneboard.cli.serve_cmds",
        "serve the board's MCP tools over stdio",
        "serves the board itself, or forwards each call to LANEBOARD_URL's board",
    ),
    "demo": (
        "laneboard.cli.demo_cmds",
        "run three cards end to end with the scripted agent",
        "runs a temporary board, project and supervisor on this machine",
    ),
    "config": (
        "laneboard.cli.config_cmds",
        "configuration: resolved values, where each came from, checks",
        "reads this machine's and the project's configuration files",
    ),
    "logs": (
        "laneboard.cli.logs_cmds",
        "read the supervisor's and the server's logs",
        "reads this machine's log files",
    ),
    "supervisor": (
        "laneboard.cli.service_cmds",
        "the supervisor as an OS service (systemd, launchd, cron)",
        "installs and reads this machine's service units",
    ),
    "service": (
        "laneboard.cli.service_cmds",
        "the supervisor and the server as OS services",
        "installs and reads this machine's service units",
    ),
    "backup": (
        "laneboard.cli.backup_cmds",
        "copy the SQLite board to a file, safely while it is in use",
        "copies the database file itself",
    ),
    "migrate": (
        "laneboard.cli.backup_cmds",
        "copy the whole board into another database, ids and events intact",
        "opens both databases itself",
    ),
    "watch": (
        "laneboard.cli.watch_cmds",
        "watch the board (or one card) live in the terminal",
        "draws in this terminal (it reads the board like any command, local or remote)",
    ),
    "completion": (
        "laneboard.cli.completion_cmds",
        "print a shell completion script (bash, zsh or fish)",
        "prints a script generated from this table",
    ),
}


# groups whose bare form (no action word) is a local command: word -> its module, whose
# register(subparsers) builds the group's parser with the table's actions under it
BARE: dict[str, str] = {
    "orchestrate": "laneboard.cli.orchestrate_cmds",  # lb orchestrate --goal … (this machine)
    "run": "laneboard.cli.run_cmds",  # lb run --goal … (this machine)
}


def words_of(key: str) -> tuple[str, ...]:
    return tuple(key.split(" "))


def top_words() -> dict[str, str]:
    """Every first command word with its summary (what ``lb --help`` lists)."""
    out: dict[str, str] = {}
    for key, (_module, summary) in OPS.items():
        words = words_of(key)
        if len(words) == 1:
            out[key] = summary
        else:
            out.setdefault(words[0], GROUPS[words[0]])
    for word, (_module, summary, _reason) in LOCAL.items():
        out[word] = summary
    return dict(sorted(out.items()))


def actions(group: str) -> dict[str, str]:
    """The second words of a group with their summaries."""
    return {
        words_of(key)[1]: summary
        for key, (_module, summary) in OPS.items()
        if words_of(key)[0] == group and len(words_of(key)) == 2
    }
