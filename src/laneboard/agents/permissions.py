"""The headless permission boundary: which tools each role gets on each agent kind.

A supervisor turn has nobody at the keyboard to answer "may I run this?", so every
session runs under a boundary declared up front:

=========  =================================================  ==============================
lane       may                                                may not
=========  =================================================  ==============================
worker     read, search, edit, write; run ``lb``, ``git`` and  anything else in the shell
           the project's check commands
reviewer   read, search; run ``lb``, ``git`` and the checks    edit or write files
director   read, search; run ``lb``                            edit, write, ``git``, checks
=========  =================================================  ==============================

There is no bypass by default. ``allow_all_tools = true`` in an agent kind's settings turns
the boundary off for that kind, and only together with ``allow_all_tools_reason`` — a
written reason, recorded in the config file and shown by ``permission_summary`` (``lb
status``). Without a reason the adapter refuses to start.

How each kind enforces it: Claude Code through ``--tools`` / ``--allowedTools`` /
``--disallowedTools`` with ``--permission-mode dontAsk`` (anything not allowed is denied);
Codex through its ``workspace-write`` sandbox plus the adapter answering every approval
request from the role's list; Pi through ``--tools`` plus a generated ``tool_call`` guard
that checks each shell command against the role's list. A kind that cannot enforce a
role's tool set gets a one-time warning (``warn_once``).
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laneboard.domain.roles import Role
from laneboard.errors import LaneboardError

log = logging.getLogger("laneboard.agents")

BASE_COMMANDS = {"worker": ("lb", "git"), "reviewer": ("lb", "git"), "director": ("lb",)}
EDITS = {"worker": True, "reviewer": False, "director": False}

# how each kind carries the boundary (shown by `lb agents check` and `lb status`)
ENFORCEMENT = {
    "claude": "tool allowlist (--tools/--allowedTools, permission mode dontAsk)",
    "codex": "workspace-write sandbox; approvals answered from the role's command list",
    "pi": "--tools list; shell commands checked by a tool_call guard (best effort)",
}

_warned: set[tuple[str, str]] = set()
_warn_lock = threading.Lock()


def warn_once(kind: str, message: str) -> bool:
    """Log ``message`` once per process for ``kind``; True when it was logged now."""
    with _warn_lock:
        key = (kind, message)
        if key in _warned:
            return False
        _warned.add(key)
    log.warning("%s: %s", kind, message)
    return True


@dataclass(frozen=True)
class ToolPolicy:
    lane: str
    edit: bool
    commands: tuple[str, ...]
    """Command prefixes the shell may run (``lb``, ``git``, ``pytest -q``, ...)."""
    allow_all: bool = False
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "lane": self.lane,
            "edit": self.edit,
            "commands": list(self.commands),
            "allow_all": self.allow_all,
            "reason": self.reason,
        }


def allow_all_reason(kind: str, config: Mapping[str, Any]) -> str | None:
    """The written reason when ``allow_all_tools`` is on; refuses a bypass without one."""
    if not config.get("allow_all_tools"):
        return None
    reason = str(config.get("allow_all_tools_reason") or "").strip()
    if not reason:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"agent kind {kind!r} has allow_all_tools on without a written reason",
            f'add allow_all_tools_reason = "who authorized it and why" to '
            f"[supervisor.agent_kinds.{kind}], or remove allow_all_tools",
        )
    return reason


def policy_for(kind: str, role: Role, config: Mapping[str, Any]) -> ToolPolicy:
    lane = role.lane if role.lane in BASE_COMMANDS else "worker"
    reason = allow_all_reason(kind, config)
    commands = list(BASE_COMMANDS[lane])
    if lane != "director":
        checks = list(config.get("check_commands") or ()) + list(
            role.extra.get("check_commands") or ()
        )
        for check in checks:
            prefix = " ".join(str(check).split())
            if prefix and prefix not in commands:
                commands.append(prefix)
    return ToolPolicy(lane, EDITS[lane], tuple(commands), reason is not None, reason)


# -- shell command checking (Codex approvals, Pi guard) ----------------------------------------

SEPARATORS = {"&&", "||", ";", "|", "&", "\n", ";;", "|&"}
SAFE_REDIRECT_TARGETS = {"/dev/null"}


def split_commands(command: str) -> list[list[str]] | None:
    """The simple commands of a shell line, or None when it cannot be checked safely."""
    if "`" in command or "$(" in command or "<(" in command or ">(" in command:
        return None
    try:
        lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    out: list[list[str]] = []
    current: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in SEPARATORS:
            if current:
                out.append(current)
            current = []
        elif tok in ("(", ")", "{", "}"):
            return None
        elif set(tok) <= set("<>&|;") and tok:
            # a redirect: only to /dev/null or an fd duplication (2>&1)
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if tok.endswith("&") and target.isdigit():
                if current and current[-1].isdigit():
                    current.pop()
                i += 2
                continue
            if target in SAFE_REDIRECT_TARGETS and ">" in tok:
                if current and current[-1].isdigit():
                    current.pop()
                i += 2
                continue
            return None
        else:
            current.append(tok)
        i += 1
    if current:
        out.append(current)
    return out


def unwrap_shell(command: str) -> str:
    """``/bin/bash -lc 'x'`` → ``x`` (how Codex reports a command)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if (
        len(words) == 3
        and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh")
        and words[1] in ("-c", "-lc")
    ):
        return words[2]
    return command


def command_allowed(command: str, prefixes: Sequence[str]) -> tuple[bool, str]:
    """Whether every simple command of ``command`` starts with an allowed prefix."""
    parts = split_commands(command)
    if parts is None:
        return (
            False,
            "the command uses shell features that cannot be checked "
            "(substitution, subshells or redirects)",
        )
    if not parts:
        return False, "empty command"
    allowed = [p.split() for p in prefixes]
    for words in parts:
        while words and "=" in words[0] and not words[0].startswith("="):
            words = words[1:]  # leading VAR=value assignments
        if not words:
            continue
        if not any(words[: len(p)] == p for p in allowed if p):
            return False, f"{words[0]!r} is not in this role's command list ({', '.join(prefixes)})"
    return True, ""


# -- per-kind renderings ---------------------------------------------------------------------


ROOT_BYPASS_NOTE = (
    "Claude Code refuses --dangerously-skip-permissions (bypassPermissions) as root; "
    "allow_all_tools runs it with every tool pre-approved instead (--allowedTools, "
    "permission mode acceptEdits) — the OS sandbox, not a bypass, is the boundary"
)
ALL_CLAUDE_TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "Glob", "NotebookEdit")


def claude_args(
    policy: ToolPolicy, euid: int | None = None, mcp_tools: Sequence[str] = ()
) -> list[str]:
    """Claude Code's permission flags for ``policy``; ``mcp_tools`` (``mcp__server__tool``
    names of the MCP servers the session is given) are allowed on top of the role's."""
    if policy.allow_all:
        if (os.geteuid() if euid is None else euid) == 0:
            warn_once("claude", ROOT_BYPASS_NOTE)
            return ["--allowedTools", *ALL_CLAUDE_TOOLS, *mcp_tools,
                    "--permission-mode", "acceptEdits"]  # fmt: skip
        return ["--permission-mode", "bypassPermissions"]
    tools = ["Read", "Grep", "Glob", "Bash"] + (["Edit", "Write"] if policy.edit else [])
    allowed = ["Read", "Grep", "Glob"] + (["Edit", "Write"] if policy.edit else [])
    allowed += list(mcp_tools)
    for prefix in policy.commands:
        allowed += [f"Bash({prefix})", f"Bash({prefix} *)"]
    args = ["--tools", ",".join(tools), "--allowedTools", *allowed]
    if not policy.edit:
        args += ["--disallowedTools", "Edit", "Write", "NotebookEdit"]
    return [*args, "--permission-mode", "dontAsk"]


def pi_tools(policy: ToolPolicy) -> list[str]:
    tools = ["read", "bash", "grep", "find", "ls"]
    if policy.edit or policy.allow_all:
        tools += ["edit", "write"]
    return tools


def summarize(kinds: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, cfg in sorted(kinds.items()):
        on = bool(cfg.get("allow_all_tools"))
        reason = str(cfg.get("allow_all_tools_reason") or "").strip() or None
        out[kind] = {
            "allow_all_tools": on,
            "reason": reason,
            "valid": (not on) or reason is not None,
            "enforcement": "none (allow_all_tools)"
            if on
            else ENFORCEMENT.get(kind, "not enforced by this kind"),
        }
    return out


def permission_summary(config: Any) -> dict[str, Any]:
    """For ``lb status``: per kind, whether the boundary is bypassed and why.

    ``config`` is a ``SupervisorConfig`` (its ``agent_kinds``) or a mapping kind → settings.
    """
    kinds = getattr(config, "agent_kinds", config)
    kinds = dict(kinds or {})
    for kind in ENFORCEMENT:
        kinds.setdefault(kind, {})
    per_kind = summarize(kinds)
    bypassed = [k for k, v in per_kind.items() if v["allow_all_tools"]]
    return {"bypass": bool(bypassed), "bypassed_kinds": bypassed, "kinds": per_kind}


def lanes_of(roles: Iterable[Role]) -> set[str]:
    return {lane for r in roles for lane in r.lanes}
