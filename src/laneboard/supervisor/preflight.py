"""What ``lb start`` checks before it runs any agent: one refusal line, or a go.

* Every agent kind with ``allow_all_tools`` carries a written ``allow_all_tools_reason``
  (``CONFIG_INVALID`` otherwise, naming the kind).
* An OS sandbox can be created (``SANDBOX_UNAVAILABLE`` naming the package to install),
  unless ``sandbox = "off"`` with a ``sandbox_reason``, which is logged and shown.
* A role whose agent kind is unavailable is logged (and shown by ``lb status``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from laneboard.agents.permissions import allow_all_reason
from laneboard.agents.sandbox import SandboxStatus, require_sandbox
from laneboard.config import SupervisorConfig
from laneboard.supervisor.sandboxing import settings_of

if TYPE_CHECKING:
    from laneboard.supervisor.runtime import Runtime


def preflight(rt: Runtime) -> SandboxStatus:
    rt.store.require_known_schema()  # an older supervisor never runs a newer board
    cfg = rt.config
    for kind, settings in sorted(cfg.agent_kinds.items()):
        allow_all_reason(kind, settings)
    status = require_sandbox(settings_of(cfg))
    if status.mode == "off":
        rt.log.warn("supervisor", f"agents run WITHOUT a sandbox: {status.reason}")
    elif status.network == "shared":
        rt.log.warn("supervisor", f"agents share this machine's network: {status.line()}")
    else:
        rt.log.info(
            "supervisor", "agents run in a sandbox", backend=status.backend, network=status.network
        )
    for kind, settings in sorted(cfg.agent_kinds.items()):
        if settings.get("network") == "host":
            rt.log.info(
                "supervisor",
                f'{kind} agents share this machine\'s network (network = "host"): they reach '
                "every service on its loopback, lb serve included",
            )
        elif settings.get("host_ports") and status.mode != "off":
            ports = ", ".join(str(p) for p in settings["host_ports"])
            rt.log.info("supervisor", f"{kind} agents reach this machine's loopback port {ports}")
    for role in rt.roles.values():
        if {"worker", "reviewer"} & set(role.lanes) and rt.kind_for(role) is None:
            rt.log.error("agents", f"role {role.id} cannot run: {rt.choice_for(role).detail}")
    return status


def availability(cfg: SupervisorConfig) -> Callable[[str], bool]:
    """Whether a kind can run here: its CLI found, a command template set (cached)."""
    from laneboard.agents.discovery import find_binary

    cache: dict[str, bool] = {}

    def available(kind: str) -> bool:
        if kind not in cache:
            if kind == "scripted":
                cache[kind] = True
            elif kind == "command":
                cache[kind] = bool(cfg.agent_kinds.get("command", {}).get("template"))
            else:
                cache[kind] = find_binary(kind, cfg.agent_kinds.get(kind, {})) is not None
        return cache[kind]

    return available


def boundary_summary(cfg: SupervisorConfig, project_dir: str | None = None) -> dict[str, Any]:
    """For ``lb status``, ``lb doctor`` and ``lb agents roles``: the sandbox, and which kind
    runs each role under the one precedence (``agents.selection``)."""
    from laneboard.agents.check_sandbox import summary as check_summary
    from laneboard.agents.roles import discover_roles
    from laneboard.agents.sandbox import sandbox_status
    from laneboard.agents.selection import choose_kind, unassigned_role

    status = sandbox_status(settings_of(cfg))
    roles = discover_roles(project_dir).roles
    available = availability(cfg)
    choices = [
        choose_kind(
            r,
            available=available,
            force_agent=cfg.force_agent,
            role_agents=cfg.role_agents,
            default_agent=cfg.default_agent,
        ).to_dict()
        for r in roles
    ]
    return {
        "sandbox": {**status.to_dict(), "line": status.line()},
        "checks": check_summary(cfg, status),
        "force_agent": cfg.force_agent or None,
        "default_agent": cfg.default_agent,
        "unassigned_role": unassigned_role(cfg.unassigned_role, roles),
        "agents": choices,
        "unrunnable": [c["role"] for c in choices if c["kind"] is None],
    }
