"""Which agent kind runs a role: one precedence, used by the supervisor and shown by
``lb agents roles`` and ``lb status``.

1. ``lb start --agent KIND`` (``force_agent``) puts every role on KIND — and only on KIND:
   when KIND is not available nothing runs (a rehearsal with ``scripted`` never spends a
   model turn on another kind).
2. ``[supervisor.role_agents]`` names the kind of a role, shipped roles included.
3. The role's own ``agent``, then the kinds in its ``agents`` list, when available.
4. ``default_agent`` — for a role that names no kind (the shipped roles name none) or whose
   kinds are all unavailable.

Otherwise the role has no kind: this machine claims none of its cards and says so loudly.
Unassigned cards are claimed for one role only, ``unassigned_role`` (default ``worker``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from laneboard.domain.roles import Role

DEFAULT_UNASSIGNED = "worker"


@dataclass(frozen=True)
class Choice:
    role: str
    kind: str | None
    rule: str  # forced | role_agents | role | role agents | default_agent | none
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def choose_kind(
    role: Role,
    *,
    available: Callable[[str], bool],
    force_agent: str = "",
    role_agents: Mapping[str, str] | None = None,
    default_agent: str = "",
) -> Choice:
    if force_agent:
        ok = available(force_agent)
        return Choice(
            role.id,
            force_agent if ok else None,
            "forced",
            f"--agent {force_agent}" + ("" if ok else f" ({force_agent} is not available)"),
        )
    named = (role_agents or {}).get(role.id)
    if named:
        ok = available(named)
        return Choice(
            role.id,
            named if ok else None,
            "role_agents",
            f"role_agents.{role.id} = {named}" + ("" if ok else f" ({named} is not available)"),
        )
    own = [k for k in [role.agent, *role.extra.get("agents", ())] if k and k != "any"]
    for i, kind in enumerate(own):
        if available(kind):
            return Choice(role.id, kind, "role" if i == 0 else "role agents", f"role names {kind}")
    if default_agent and available(default_agent):
        why = "the role names no kind" if not own else f"{', '.join(own)} not available"
        return Choice(role.id, default_agent, "default_agent", f"default_agent ({why})")
    tried = [*own, default_agent] if default_agent else own
    return Choice(role.id, None, "none", f"no available kind ({', '.join(tried) or 'none named'})")


def unassigned_role(configured: str, roles: Iterable[Role]) -> str | None:
    """The worker-lane role that claims unassigned cards (explicit, never the first found)."""
    want = configured or DEFAULT_UNASSIGNED
    for role in roles:
        if role.id == want and "worker" in role.lanes:
            return role.id
    return None
