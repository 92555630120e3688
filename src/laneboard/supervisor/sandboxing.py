"""The sandbox of each agent session the supervisor opens (workers, reviewers, director).

The pool and the director lane ask ``session_sandbox`` for the ``Sandbox`` a session's
processes start in: its spec (``agents.sandbox_spec``) filled with this session's paths —
the lane it works in, the user's checkout it may only read, its own agent home and
temporary directory under the state directory, the directory holding its token — or
``None`` when the user turned the sandbox off (``sandbox = "off"`` with a reason).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping

from laneboard.agents.base import ConfigurationError
from laneboard.agents.sandbox import INSTALL_HINT, Sandbox, SandboxSettings, sandbox_status
from laneboard.agents.sandbox_spec import SessionPaths, build_spec, sqlite_file
from laneboard.config import SupervisorConfig, config_dir
from laneboard.workspace.lanes import WORKTREES

TOKEN_NAME = "token"


def settings_of(config: SupervisorConfig) -> SandboxSettings:
    return SandboxSettings(config.sandbox, config.sandbox_reason)


def token_path(state_dir: str, name: str) -> str:
    """Where the session ``name`` (a card's ref, ``director-…``) keeps its token."""
    return os.path.join(state_dir, "tokens", name, TOKEN_NAME)


def token_file(config: SupervisorConfig, name: str) -> str:
    """A session's token file, alone in its own directory (the sandbox binds only it)."""
    path = token_path(config.state_path(), name)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return path


def write_token(path: str, token: str) -> None:
    """Replace a session's token file atomically (owner-only). Only the supervisor writes
    it: inside the sandbox its directory is read-only."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    os.replace(tmp, path)


def home_name(kind: str, lane_key: str) -> str:
    """``worker:WEB-1:r2`` → ``claude-worker-WEB-1``: one home per card lane, all rounds."""
    base = re.sub(r":r\d+$", "", lane_key)
    return f"{kind}-" + re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-")


def lane_root(cwd: str, checkout: str | None) -> str | None:
    """The lane directory holding ``cwd`` (``<checkout>/.worktrees/<lane>``), if any."""
    if not checkout:
        return None
    top = os.path.join(os.path.realpath(checkout), WORKTREES)
    real = os.path.realpath(cwd)
    if not real.startswith(top + os.sep):
        return None
    return os.path.join(top, real[len(top) + 1 :].split(os.sep, 1)[0])


def agent_binary(kind: str, config: SupervisorConfig) -> str | None:
    from laneboard.agents.discovery import KINDS, find_binary

    kind_cfg = config.agent_kinds.get(kind, {})
    if kind in KINDS:
        return find_binary(kind, kind_cfg)
    if kind == "command":
        template = str(kind_cfg.get("template") or "")
        words = shlex.split(template) if template else []
        return shutil.which(words[0]) if words else None
    return sys.executable


def session_sandbox(
    config: SupervisorConfig,
    *,
    kind: str,
    lane_key: str,
    cwd: str,
    env: Mapping[str, str],
    checkout: str | None,
    token: str | None,
    database_url: str,
    writable_cwd: bool = True,
) -> Sandbox | None:
    """The sandbox of one session; None when the sandbox is off. A lane session may write
    its lane; a session outside any lane (a project that is not a git checkout, the
    shared workspace) may write its directory unless ``writable_cwd`` is False. A SQLite
    board (``database_url``) is hidden wherever it lives."""
    status = sandbox_status(settings_of(config))
    if status.mode == "off":
        return None
    if not status.ok:
        raise ConfigurationError(
            f"no sandbox for the agent: {status.problem}",
            f'{INSTALL_HINT.get(status.backend or "bwrap")}, or set sandbox = "off" with a '
            "sandbox_reason in [supervisor]",
        )
    lane = lane_root(cwd, checkout)
    if lane is None and writable_cwd and not _inside(cwd, checkout):
        lane = cwd
    if lane is None and not _inside(cwd, checkout):
        checkout = cwd  # a directory it may not write: it may read it
    name = home_name(kind, lane_key)
    from laneboard.store import data_dir

    kind_cfg = config.agent_kinds.get(kind, {})
    state = env.get("LANEBOARD_AGENT_STATE")
    paths = SessionPaths(
        kind=kind,
        cwd=cwd,
        home=config.state_path("agents", "homes", name),
        tmp=config.state_path("agents", "tmp", name),
        state_dir=config.state_path(),
        checkout=checkout,
        lane=lane,
        token_dir=os.path.dirname(token) if token else None,
        data_dir=data_dir(),
        config_dir=config_dir(),
        network=str(kind_cfg.get("network", "")) != "none",
        host_network=str(kind_cfg.get("network", "")) == "host",
        host_ports=tuple(int(p) for p in kind_cfg.get("host_ports", ())),
        extra_writable=(state,) if kind == "scripted" and state else (),
        database=sqlite_file(database_url),
    )
    spec = build_spec(paths, env, agent_binary(kind, config))
    return Sandbox(spec, str(status.backend), str(status.path), slirp=status.slirp)


def _inside(path: str, root: str | None) -> bool:
    if not root:
        return False
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)
