"""What a service unit runs, worked out once from this machine and the configuration.

A scheduler starts a unit with a minimal ``PATH`` of its own and none of your shell's
variables, so the unit names everything: the absolute interpreter (never ``env python``),
a ``PATH`` whose head is every agent CLI's directory (and the directory of the
interpreter an agent script's ``#!/usr/bin/env …`` line asks for), then the interpreter's
and ``lb``'s directories, then the scheduler's default; the board (the database URL, or
the SQLite file); the state directory, where the logs are; and the environment file for
secrets.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

UNITS = ("supervisor", "server")
DEFAULT_PATH = {
    "systemd": "/usr/local/bin:/usr/bin:/bin",
    "launchd": "/usr/bin:/bin:/usr/sbin:/sbin",
    "cron": "/usr/bin:/bin",
}
# variables a unit carries when they are set here, so it resolves the same files
CARRIED = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "LANEBOARD_MACHINE", "PYTHONPATH")
DESCRIPTIONS = {
    "supervisor": "laneboard supervisor (lb start)",
    "server": "laneboard server (lb serve: HTTP API, dashboard, MCP)",
}


@dataclass(frozen=True)
class ServiceSpec:
    unit: str  # supervisor | server
    python: str  # the absolute interpreter
    command: tuple[str, ...]  # lb's arguments, e.g. ("start",)
    env: dict[str, str]  # inline, never a secret (PATH first)
    env_file: str
    log: str  # the process's log file
    state_dir: str
    tick_interval: int = 600  # cron: --continue-once cadence, seconds
    warnings: tuple[str, ...] = field(default=())

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.unit]

    @property
    def start_log(self) -> str:
        """Where a scheduler puts what is printed before the log is open."""
        return os.path.join(self.state_dir, f"{self.unit}.start.log")

    def program(self, command: tuple[str, ...] | None = None, *, quiet: bool = False) -> list[str]:
        """The argv a unit runs: the launcher, then ``lb``'s arguments."""
        argv = [self.python, "-m", "laneboard.service.run", "--env-file", self.env_file]
        argv += ["--log", self.log]
        if quiet:
            argv.append("--discard-stdout")
        return [*argv, "--", *(command or self.command)]


def has_secret(url: str) -> bool:
    """A database URL that carries a password (in the netloc or the query)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.password) or "password" in parse_qs(parts.query)


def agent_dirs(
    kinds: Mapping[str, Mapping[str, object]],
    which: Callable[[str], str | None] = shutil.which,
    find: Callable[[str, Mapping[str, object]], str | None] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(directories, missing kind -> why): each found agent CLI's directory, in kind order,
    followed by the directory of the interpreter its ``#!`` line names through ``env``."""
    from laneboard.agents.discovery import KINDS, find_binary

    finder = find or find_binary
    dirs: list[str] = []
    missing: dict[str, str] = {}
    for kind in KINDS:
        found = finder(kind, dict(kinds.get(kind, {})))
        if not found:
            missing[kind] = f"{kind} is not on PATH and has no configured binary"
            continue
        dirs.append(os.path.dirname(os.path.abspath(found)))
        interp = _env_interpreter(found)
        where = which(interp) if interp else None
        if where:
            dirs.append(os.path.dirname(where))
    return dirs, missing


def _env_interpreter(path: str) -> str | None:
    """``node`` for a script starting ``#!/usr/bin/env node`` (None otherwise)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if len(words) >= 2 and os.path.basename(words[0]) == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        return rest[0] if rest else None
    return None


def unit_path(heads: list[str], scheduler: str) -> str:
    seen: list[str] = []
    for d in [*heads, *DEFAULT_PATH[scheduler].split(":")]:
        if d and d not in seen:
            seen.append(d)
    return ":".join(seen)


def database_env(url: str | None, env_file_vars: dict[str, str]) -> dict[str, str]:
    """The board for the unit: inline when it has no password, else into the env file."""
    from laneboard.store import resolve_url

    resolved = resolve_url(url)
    if resolved.startswith("sqlite:///"):
        resolved = "sqlite:///" + os.path.abspath(resolved[len("sqlite:///") :])
    elif "://" not in resolved:
        resolved = "sqlite:///" + os.path.abspath(resolved)
    if has_secret(resolved):
        env_file_vars["LANEBOARD_DATABASE_URL"] = resolved
        return {}
    return {"LANEBOARD_DATABASE_URL": resolved}


@dataclass(frozen=True)
class Machine:
    """What ``build`` reads from this machine (injectable for tests)."""

    python: str = sys.executable
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    which: Callable[[str], str | None] = shutil.which
    find: Callable[[str, Mapping[str, object]], str | None] | None = None


def build(
    unit: str,
    scheduler: str,
    *,
    db: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    machine: Machine | None = None,
) -> tuple[ServiceSpec, dict[str, str]]:
    """(the spec, the managed variables its environment file must hold)."""
    from laneboard.config import load_supervisor_config
    from laneboard.service.envfile import env_file_path

    m = machine or Machine()
    cfg = load_supervisor_config()
    state = os.path.abspath(cfg.state_path())
    dirs, missing = agent_dirs(cfg.agent_kinds, m.which, m.find)
    lb = m.which("lb")
    heads = [*dirs, os.path.dirname(os.path.abspath(m.python))]
    if lb:
        heads.append(os.path.dirname(os.path.abspath(lb)))
    secrets: dict[str, str] = {}
    env = {"PATH": unit_path(heads, scheduler), "LANEBOARD_STATE_DIR": state}
    env.update(database_env(db or m.env.get("LANEBOARD_DATABASE_URL"), secrets))
    env.update({k: m.env[k] for k in CARRIED if m.env.get(k)})
    used = {cfg.default_agent, cfg.force_agent, *cfg.role_agents.values()} - {""}
    warnings = tuple(
        f"{why}: the unit's PATH cannot carry it, so a {kind} session would not start "
        f"(install it, then run this enable again)"
        for kind, why in missing.items()
        if kind in used
    )
    command = ("start",) if unit == "supervisor" else ("serve", "--host", host, "--port", str(port))
    spec = ServiceSpec(
        unit=unit,
        python=os.path.abspath(m.python),
        command=command,
        env=env,
        env_file=env_file_path(),
        log=os.path.join(state, f"{unit}.log"),
        state_dir=state,
        tick_interval=cfg.time.tick_interval,
        warnings=warnings,
    )
    return spec, secrets
