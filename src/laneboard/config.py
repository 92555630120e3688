"""Configuration: flag → environment (``LANEBOARD_*``) → project file → user file → default.

The user file is ``$XDG_CONFIG_HOME/laneboard/config.toml``; the project file is
``<project>/.laneboard/config.toml``. Only the ``[supervisor]`` table is read here.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import Any

from laneboard.domain.timecontract import TimeContract
from laneboard.errors import LaneboardError


def config_dir() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "laneboard")


def state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "laneboard")


@dataclass(frozen=True)
class SupervisorConfig:
    max_concurrency: int = 8
    project_concurrency: int = 0  # 0 = same as max_concurrency
    claim_unassigned: bool = True
    recover_stale: bool = True
    default_agent: str = "claude"  # kind for roles that do not name one
    force_agent: str = ""  # when set, every role runs on this kind (lb start --agent)
    agent_kinds: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-kind settings
    worker_roles: tuple[str, ...] = ("worker",)
    reviewer_roles: tuple[str, ...] = ("reviewer",)
    role_agents: dict[str, str] = field(default_factory=dict)  # role id -> agent kind
    pool_max_sessions: int = 32  # open worker sessions before LRU eviction
    event_poll_ms: int = 200  # how often the event watcher reads the high-water mark
    debounce_ms: int = 300  # early-tick debounce after an event (≤ 1 s)
    log_max_bytes: int = 10 * 1024 * 1024
    log_keep: int = 5
    state_dir: str = ""
    workflow_max_actions: int = 20  # workflow pass: actions (writes) per pass
    board_limit: int = 500  # workflow pass: cards read per pass (more = truncated read)
    rework_max_rounds: int = 4  # rejections answered by a rework before the card is held
    time: TimeContract = field(default_factory=TimeContract)

    @property
    def claim_set(self) -> tuple[str, ...]:
        return self.worker_roles + self.reviewer_roles

    @property
    def per_project(self) -> int:
        return self.project_concurrency or self.max_concurrency

    def state_path(self, *parts: str) -> str:
        return os.path.join(self.state_dir or state_dir(), *parts)

    def agent_for(self, role: str) -> str:
        return self.role_agents.get(role, self.default_agent)

    def validate(self) -> SupervisorConfig:
        if self.max_concurrency < 1:
            raise LaneboardError(
                "CONFIG_INVALID",
                "max_concurrency must be at least 1",
                "set supervisor.max_concurrency to a positive number",
            )
        if self.project_concurrency < 0:
            raise LaneboardError(
                "CONFIG_INVALID",
                "project_concurrency must not be negative",
                "use 0 for 'same as max_concurrency'",
            )
        if not 0 < self.debounce_ms <= 1000:
            raise LaneboardError(
                "CONFIG_INVALID",
                "debounce_ms must be within 1..1000",
                "an early tick must follow an event within a second",
            )
        for name in ("workflow_max_actions", "board_limit", "rework_max_rounds"):
            if getattr(self, name) < 1:
                raise LaneboardError(
                    "CONFIG_INVALID",
                    f"{name} must be at least 1",
                    f"set supervisor.{name} to a positive number",
                )
        self.time.validate()
        return self


_SIMPLE = {f.name for f in fields(SupervisorConfig)} - {"time", "agent_kinds", "role_agents"}
_TIME = {f.name for f in fields(TimeContract)}


def _read(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LaneboardError(
            "CONFIG_INVALID", f"cannot read {path}: {exc}", "fix the TOML syntax"
        ) from None
    return data


def _apply(cfg: SupervisorConfig, table: dict[str, Any], source: str) -> SupervisorConfig:
    changes: dict[str, Any] = {}
    time_changes: dict[str, Any] = {}
    for key, value in table.items():
        if key in _SIMPLE:
            if isinstance(getattr(cfg, key), tuple):
                value = tuple(value)
            changes[key] = value
        elif key == "time" and isinstance(value, dict):
            for tk, tv in value.items():
                if tk not in _TIME:
                    raise LaneboardError(
                        "CONFIG_INVALID",
                        f"{source}: unknown time key {tk!r}",
                        f"known: {', '.join(sorted(_TIME))}",
                    )
                time_changes[tk] = int(tv)
        elif key in ("agent_kinds", "role_agents") and isinstance(value, dict):
            changes[key] = {**getattr(cfg, key), **value}
        else:
            raise LaneboardError(
                "CONFIG_INVALID",
                f"{source}: unknown supervisor key {key!r}",
                "remove it or check the spelling in docs/configuration.md",
            )
    if time_changes:
        changes["time"] = replace(cfg.time, **time_changes)
    return replace(cfg, **changes)


def load_supervisor_config(
    overrides: dict[str, Any] | None = None, *, user_file: str | None = None
) -> SupervisorConfig:
    cfg = SupervisorConfig()
    path = user_file or os.path.join(config_dir(), "config.toml")
    data = _read(path)
    if "supervisor" in data:
        cfg = _apply(cfg, dict(data["supervisor"]), path)
    env_map = {
        "LANEBOARD_MAX_CONCURRENCY": "max_concurrency",
        "LANEBOARD_DEFAULT_AGENT": "default_agent",
        "LANEBOARD_STATE_DIR": "state_dir",
    }
    env: dict[str, Any] = {}
    for var, key in env_map.items():
        if os.environ.get(var):
            raw = os.environ[var]
            env[key] = int(raw) if key == "max_concurrency" and raw.isdigit() else raw
    if env:
        cfg = _apply(cfg, env, "environment")
    if overrides:
        cfg = _apply(cfg, {k: v for k, v in overrides.items() if v is not None}, "flags")
    return cfg.validate()
