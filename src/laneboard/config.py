"""Configuration: flag → environment (``LANEBOARD_*``) → project file → board → user file →
default (``config_resolve``; every key is declared once in ``config_keys``).

The user file is ``$XDG_CONFIG_HOME/laneboard/config.toml`` (machine settings, and
``[project]`` defaults for every project); the project file is
``<project>/.laneboard/config.toml`` (only ``[project]``). This module builds the typed
views the rest of laneboard reads: ``SupervisorConfig`` and a project's settings.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laneboard.config_keys import all_keys
from laneboard.config_resolve import Settings, resolve
from laneboard.domain.timecontract import TimeContract
from laneboard.errors import LaneboardError

if TYPE_CHECKING:
    from laneboard.domain.model import Project


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
    event_poll_ms: int = 50  # the loop's fallback poll of the log (writes wake it at once)
    debounce_ms: int = 30  # early-tick debounce after an event (≤ 1 s)
    failover_beats: int = 3  # heartbeat intervals without a beat before others fence a host
    log_max_bytes: int = 10 * 1024 * 1024
    log_keep: int = 5
    state_dir: str = ""
    workflow_max_actions: int = 20  # workflow pass: actions (writes) per pass
    board_limit: int = 500  # workflow pass: cards read per pass (more = truncated read)
    rework_max_rounds: int = 4  # rejections answered by a rework before the card is held
    sandbox: str = "auto"  # auto | bwrap | sandbox-exec | off (off needs sandbox_reason)
    sandbox_reason: str = ""
    check_network: str = ""  # checks' network: "" (their own) | "none" | "host"
    check_host_ports: tuple[int, ...] = ()  # the host's loopback ports relayed into checks
    unassigned_role: str = ""  # the worker role that claims unassigned cards ("": "worker")
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
        from laneboard.agents.sandbox import SandboxSettings

        SandboxSettings(self.sandbox, self.sandbox_reason).validate()
        self.time.validate()
        return self


# -- building it from the resolved settings --------------------------------------------------
_TABLES = ("agent_kinds", "role_agents")


def flags_from_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"max_concurrency": 3, "time": {"tick_interval": 5}}`` as flag values by key name."""
    out: dict[str, Any] = {}
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name == "time" and isinstance(value, dict):
            out.update({f"supervisor.time.{k}": v for k, v in value.items() if v is not None})
        elif name not in _TABLES:
            out[f"supervisor.{name}"] = value
    return out


def supervisor_config(
    settings: Settings, tables: Mapping[str, Any] | None = None
) -> SupervisorConfig:
    simple = settings.section("supervisor")
    time = TimeContract(**settings.section("supervisor.time"))
    kinds: dict[str, dict[str, Any]] = {}
    for name, setting in settings.entries("supervisor.agent_kinds").items():
        kind, _, inner = name.partition(".")
        kinds.setdefault(kind, {})[inner] = _plain_value(setting.value)
    roles = {k: str(s.value) for k, s in settings.entries("supervisor.role_agents").items()}
    for name, extra in (tables or {}).items():
        if name == "agent_kinds":
            for kind, cfg in dict(extra).items():
                kinds[kind] = {**kinds.get(kind, {}), **dict(cfg)}
        elif name == "role_agents":
            roles.update(dict(extra))
    cfg = SupervisorConfig(**simple, agent_kinds=kinds, role_agents=roles, time=time)
    try:
        return cfg.validate()
    except LaneboardError as err:
        clocks = [k for k in settings.items if k.startswith("supervisor.time.")]
        raise with_origins(err, settings, clocks) from None


def _plain_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def with_origins(err: LaneboardError, settings: Settings, names: Iterable[str]) -> LaneboardError:
    """``err`` with where each of ``names`` was set (those not left at their default)."""
    set_here = [
        f"{name.rsplit('.', 1)[1]} from {settings.items[name].origin.source}"
        for name in names
        if name in settings.items and settings.items[name].origin.layer != "default"
    ]
    if not set_here:
        return err
    return LaneboardError(
        err.code, f"{err.message} ({'; '.join(set_here)})", err.fix, **err.details
    )


def load_supervisor_config(
    overrides: dict[str, Any] | None = None, *, user_file: str | None = None
) -> SupervisorConfig:
    """The supervisor's settings: flags (``overrides``) → environment → user file → default.

    The whole user file is checked: an unknown key or a bad value anywhere in it is
    refused with the file and the line.
    """
    settings = resolve(
        flags=flags_from_overrides(overrides), user_file=user_file, prefixes=("supervisor.",)
    )
    tables = {k: v for k, v in (overrides or {}).items() if k in _TABLES and v}
    return supervisor_config(settings, tables)


# -- a project's settings ----------------------------------------------------------------------
def board_layer(project: Project | None, stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The board's settings for a project: its stored config and its ``base_ref`` column."""
    layer = dict(stored or {})
    if project is not None and project.base_ref:
        layer["base_ref"] = project.base_ref
    return layer


def project_settings(
    project: Project | None = None,
    stored: Mapping[str, Any] | None = None,
    *,
    project_dir: str | None = None,
    flags: Mapping[str, Any] | None = None,
    user_file: str | None = None,
) -> Settings:
    """Every ``project.*`` key for one project, with origins."""
    directory = project_dir or (project.path if project is not None else None)
    label = f"board project {project.key}" if project is not None else "board"
    return resolve(
        flags=flags,
        user_file=user_file,
        project_dir=directory if directory and os.path.isdir(directory) else None,
        board=board_layer(project, stored) if project is not None or stored else None,
        board_label=label,
        prefixes=("project.",),
    )


def effective_project_config(
    project: Project | None, stored: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A project's resolved settings by short name (``workspace``, ``base_ref``, …)."""
    values = project_settings(project, stored).section("project")
    return {k: _plain_value(v) for k, v in values.items()}


def project_cap(cfg: SupervisorConfig, project: Project | None) -> int:
    """Cards of ``project`` at once: its own ``concurrency``, never above the machine's cap.

    A project file that cannot be read leaves the machine's cap; admission then defers the
    project's cards with the file's error.
    """
    if project is None:
        return cfg.per_project
    try:
        own = int(project_settings(project, {}).value("project.concurrency"))
    except LaneboardError:
        return cfg.per_project
    return min(own, cfg.per_project) if own > 0 else cfg.per_project


def check_project_files(projects: Iterable[Project]) -> None:
    """Refuse (``CONFIG_INVALID``, file and line) when any project's file is bad."""
    for project in projects:
        if project.path and os.path.isdir(project.path):
            project_settings(project, {})


def patrol_values(
    user_file: str | None = None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``[patrol]`` settings: flags (``overrides``) → environment → user file → default.

    Settings that do not fit together (a window without a time zone) are refused naming
    where each was set.
    """
    from laneboard.supervisor.patrol_rows import PatrolSettings

    flags = {f"patrol.{k}": v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(k for k in flags if k not in all_keys())
    if unknown:
        raise LaneboardError(
            "CONFIG_INVALID", f"unknown patrol setting {unknown[0]!r}", "see docs/operations.md"
        )
    settings = resolve(flags=flags, user_file=user_file, prefixes=("patrol.",))
    values = settings.section("patrol")
    try:
        PatrolSettings(**values).validate()
    except LaneboardError as err:
        raise with_origins(err, settings, ("patrol.timezone", "patrol.window")) from None
    return values
