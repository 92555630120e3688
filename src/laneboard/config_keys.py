"""Every configuration key laneboard reads: its default, its check, and where it may be set.

A key is named by its table and name as written in a file (``supervisor.max_concurrency``,
``project.base_ref``). Machine keys are read from flags, the environment and the user's
file; project keys also from the project's ``.laneboard/config.toml`` and the board's
project settings (``lb project config``). ``supervisor.role_agents`` and
``supervisor.agent_kinds`` are open tables checked entry by entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from laneboard.domain.timecontract import TimeContract

MACHINE, PROJECT = "machine", "project"
CHOICES_AGENT = ("claude", "codex", "pi", "command", "scripted")


class Bad(ValueError):
    """A value a key refuses: what is wrong and how to fix it."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


Check = Callable[[Any], Any]


@dataclass(frozen=True)
class Key:
    name: str
    default: Any
    check: Check
    help: str
    scope: str = MACHINE
    env: str | None = None
    flag: str | None = None

    @property
    def table(self) -> str:
        return self.name.rsplit(".", 1)[0]

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[1]


# -- checks ----------------------------------------------------------------------------------
def integer(lo: int, hi: int | None = None) -> Check:
    def check(value: Any) -> int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise Bad(f"{value!r} is not a whole number", f"write a number, e.g. {max(lo, 1)}")
        if value < lo or (hi is not None and value > hi):
            span = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
            raise Bad(f"{value} is out of range", f"use {span}")
        return value

    return check


def boolean(value: Any) -> bool:
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
    if not isinstance(value, bool):
        raise Bad(f"{value!r} is not true or false", "write true or false")
    return value


def text(choices: tuple[str, ...] = (), *, limit: int = 4000) -> Check:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise Bad(f"{value!r} is not text", 'write it in quotes, e.g. "value"')
        if choices and value not in choices:
            quoted = [c or '""' for c in choices]  # the empty choice stays readable
            raise Bad(f"{value!r} is not one of {', '.join(quoted)}", f"use {' or '.join(quoted)}")
        if len(value) > limit:
            raise Bad(f"the value is {len(value)} characters long", f"keep it under {limit}")
        return value

    return check


def ports(value: Any) -> tuple[int, ...]:
    """A list of TCP port numbers (1-65535); one number is a list of one."""
    if isinstance(value, str):
        raw = value.strip()
        try:
            value = json.loads(raw) if raw else []
        except ValueError:
            raise Bad(f"{raw!r} is not a port number or a list of them", "write [11434]") from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple):
        raise Bad(f"{value!r} is not a list of port numbers", "write [11434]")
    out: list[int] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 < item < 65536:
            raise Bad(f"{item!r} is not a port number", "use whole numbers from 1 to 65535")
        if item not in out:
            out.append(item)
    return tuple(out)


def strings(value: Any) -> tuple[str, ...]:
    """A list of non-empty strings; one string is a list of one. Text may be a JSON array."""
    if isinstance(value, str):
        raw = value.strip()
        if raw.startswith("["):
            try:
                value = json.loads(raw)
            except ValueError:
                raise Bad(f"{raw!r} is not a JSON array", 'write ["a", "b"]') from None
        else:
            value = [raw] if raw else []
    if not isinstance(value, list | tuple):
        raise Bad(f"{value!r} is not a list", 'write a list, e.g. ["a", "b"]')
    out = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise Bad(f"{item!r} is not a non-empty string", "every entry must be text")
        out.append(item.strip())
    return tuple(out)


def repo_paths(value: Any) -> tuple[str, ...]:
    from laneboard.board.inputs import repo_path
    from laneboard.errors import LaneboardError

    out = []
    for item in strings(value):
        try:
            out.append(repo_path(item))
        except LaneboardError as err:
            raise Bad(err.message, err.fix) from None
    return tuple(out)


def seconds(lo: float, hi: float) -> Check:
    def check(value: Any) -> float:
        try:
            number = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None:
            raise Bad(f"{value!r} is not a number of seconds", "give seconds, e.g. 120")
        if not lo < number <= hi:
            raise Bad(f"{number:g} seconds is out of range", f"use {lo:g} < seconds <= {hi:g}")
        return number

    return check


def optional_text(value: Any) -> str:
    return str(text()(value)).strip()


def relative_dir(value: Any) -> str:
    raw = str(text(limit=1000)(value)).strip()
    if not raw or raw.startswith("/") or ".." in raw.split("/"):
        raise Bad(f"{raw!r} is not a directory inside the project", 'write e.g. ".laneboard/roles"')
    return raw.rstrip("/")


def any_path(value: Any) -> str:
    return str(text(limit=4000)(value)).strip()


# -- the keys --------------------------------------------------------------------------------
def _supervisor() -> list[Key]:
    s = "supervisor."
    return [
        Key(
            s + "max_concurrency",
            8,
            integer(1, 1000),
            "agent turns at once",
            env="LANEBOARD_MAX_CONCURRENCY",
            flag="--max-concurrency",
        ),
        Key(
            s + "project_concurrency",
            0,
            integer(0, 1000),
            "agent turns per project on this machine; 0 = same as max_concurrency",
            flag="--project-concurrency",
        ),
        Key(
            s + "claim_unassigned",
            True,
            boolean,
            "take unassigned cards too",
            flag="--no-claim-unassigned",
        ),
        Key(
            s + "recover_stale",
            True,
            boolean,
            "offer in_progress cards with stale heartbeats to their holder",
        ),
        Key(
            s + "default_agent",
            "claude",
            text(CHOICES_AGENT),
            "agent kind for roles that name none or whose kinds are unavailable",
            env="LANEBOARD_DEFAULT_AGENT",
            flag="--default-agent",
        ),
        Key(
            s + "force_agent",
            "",
            text(("", *CHOICES_AGENT)),
            "run every role on this kind and no other",
            flag="--agent",
        ),
        Key(
            s + "unassigned_role",
            "",
            text(),
            "the worker-lane role that claims unassigned cards ('' = worker)",
        ),
        Key(
            s + "sandbox",
            "auto",
            text(("auto", "bwrap", "sandbox-exec", "off")),
            "the agents' OS sandbox (off needs sandbox_reason)",
        ),
        Key(s + "sandbox_reason", "", text(), "why the sandbox is off (required with off)"),
        Key(
            s + "check_network",
            "",
            text(("", "none", "host")),
            "checks' network in their sandbox: '' (their own, no host loopback), none, host",
        ),
        Key(
            s + "check_host_ports",
            (),
            ports,
            "ports of this machine's loopback relayed into the checks' sandbox",
        ),
        Key(s + "worker_roles", ("worker",), strings, "worker-lane roles when none are installed"),
        Key(
            s + "reviewer_roles",
            ("reviewer",),
            strings,
            "reviewer-lane roles when none are installed",
        ),
        Key(
            s + "pool_max_sessions",
            32,
            integer(1, 10_000),
            "open worker sessions before the least recently used idle one closes",
        ),
        Key(
            s + "event_poll_ms",
            50,
            integer(10, 60_000),
            "the fallback: how often the loop reads the log when no write wakes it",
        ),
        Key(s + "debounce_ms", 30, integer(1, 1000), "early tick after an event (at most 1000)"),
        Key(
            s + "failover_beats",
            3,
            integer(2, 1000),
            "heartbeat intervals without a beat before other machines fence a supervisor",
        ),
        Key(
            s + "log_max_bytes",
            10 * 1024 * 1024,
            integer(4096),
            "rotate a log file when it would grow past this size",
        ),
        Key(s + "log_keep", 5, integer(1, 100), "rotated log files kept"),
        Key(
            s + "state_dir",
            "",
            any_path,
            "logs, agent state and token files",
            env="LANEBOARD_STATE_DIR",
            flag="--state-dir",
        ),
        Key(s + "workflow_max_actions", 20, integer(1, 10_000), "workflow actions per pass"),
        Key(s + "board_limit", 500, integer(1, 1_000_000), "cards the workflow pass reads"),
        Key(
            s + "rework_max_rounds",
            4,
            integer(1, 100),
            "rejections answered with a rework before the card is held",
        ),
    ]


_TIME_FLAGS = {"tick_interval": "--tick-interval", "turn_timeout": "--turn-timeout"}


def _time() -> list[Key]:
    base = TimeContract()
    return [
        Key(
            f"supervisor.time.{f.name}",
            getattr(base, f.name),
            integer(1),
            f"time contract: {f.name.replace('_', ' ')}, seconds",
            flag=_TIME_FLAGS.get(f.name),
        )
        for f in fields(TimeContract)
    ]


# the patrol's settings (``PatrolSettings``; a test keeps the two in step)
PATROL_DEFAULTS: dict[str, Any] = {
    "notify_command": "",
    "timezone": "",
    "window": "",
    "leader": "",
    "peer_marker": "",
    "peer_period_s": 900,
    "stale_min": 30,
    "stale_escalate_min": 360,
    "question_min": 60,
    "question_escalate_min": 1440,
    "blocked_min": 120,
    "blocked_escalate_min": 1440,
    "review_aging_min": 60,
    "review_missing_min": 30,
    "leader_min": 240,
    "unreadable_after_min": 10,
}


def _patrol() -> list[Key]:
    out = []
    for name, default in PATROL_DEFAULTS.items():
        check = integer(1) if isinstance(default, int) else text()
        env = "LANEBOARD_NOTIFY_COMMAND" if name == "notify_command" else None
        flag = "--notify" if name == "notify_command" else None
        out.append(Key(f"patrol.{name}", default, check, f"patrol: {name}", env=env, flag=flag))
    return out


def _project() -> list[Key]:
    p = "project."
    return [
        Key(
            p + "base_ref",
            "",
            optional_text,
            "the ref new lanes start from (empty = probe)",
            PROJECT,
            env="LANEBOARD_PROJECT_BASE_REF",
        ),
        Key(
            p + "workspace",
            "lanes",
            text(("lanes", "shared")),
            "lanes (a worktree per card) or shared (the checkout itself)",
            PROJECT,
            env="LANEBOARD_PROJECT_WORKSPACE",
        ),
        Key(
            p + "review_gate",
            (),
            strings,
            "commands run on every delivery after its checks",
            PROJECT,
            env="LANEBOARD_PROJECT_REVIEW_GATE",
        ),
        Key(
            p + "check_timeout",
            120.0,
            seconds(0, 3600),
            "seconds each check may run",
            PROJECT,
            env="LANEBOARD_PROJECT_CHECK_TIMEOUT",
        ),
        Key(
            p + "allowed_paths",
            (),
            repo_paths,
            "scope of a new card that names none (empty = the whole repository)",
            PROJECT,
            env="LANEBOARD_PROJECT_ALLOWED_PATHS",
        ),
        Key(
            p + "acceptance_mode",
            "auto",
            text(("off", "auto", "human")),
            "acceptance mode of a new card that names none",
            PROJECT,
            env="LANEBOARD_PROJECT_ACCEPTANCE_MODE",
        ),
        Key(
            p + "concurrency",
            0,
            integer(0, 1000),
            "cards of this project at once; 0 = the supervisor's per-project cap",
            PROJECT,
            env="LANEBOARD_PROJECT_CONCURRENCY",
        ),
        Key(
            p + "roles_dir",
            ".laneboard/roles",
            relative_dir,
            "the project's role definitions, relative to its directory",
            PROJECT,
            env="LANEBOARD_PROJECT_ROLES_DIR",
        ),
    ]


# the settings a board may hold for a project (``lb project config``), by short name
BOARD_SETTINGS = ("base_ref", "workspace", "review_gate", "check_timeout")

# open tables: entries checked by these
AGENT_KIND_KEYS = {
    "binary": any_path,
    "path": any_path,
    "template": text(),
    "model": text(),
    "provider": text(),
    "args": strings,
    "secret_env": strings,
    "writable_roots": strings,
    "check_commands": strings,
    "network_access": boolean,
    "login_shell": boolean,
    "log_dir": any_path,
    "allow_all_tools": boolean,
    "allow_all_tools_reason": text(),
    "network": text(("", "none", "host")),
    "host_ports": ports,
}
OPEN_TABLES = ("supervisor.role_agents", "supervisor.agent_kinds")


_ALL: dict[str, Key] = {}


def all_keys() -> dict[str, Key]:
    """Every known key by name: built once per process (the definitions are constants),
    the same mapping each time; callers read it and never change it."""
    if not _ALL:
        _ALL.update({k.name: k for k in [*_supervisor(), *_time(), *_patrol(), *_project()]})
    return _ALL


def tables(keys: dict[str, Key]) -> set[str]:
    """Every table name a file may contain (``supervisor``, ``supervisor.time``, …)."""
    out = {k.table for k in keys.values()}
    out.update(OPEN_TABLES)
    return out
