"""What every pass and the pool share: the store, board, clock, config and identity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.claims import ClaimWindows
from laneboard.domain.clock import Clock
from laneboard.domain.model import Actor, system
from laneboard.domain.roles import Role
from laneboard.store import Store
from laneboard.supervisor.logs import LogFile
from laneboard.workspace.admit import Admitter
from laneboard.workspace.hooks import install as install_gates
from laneboard.workspace.lanes import LaneAdmitter


@dataclass
class Runtime:
    store: Store
    config: SupervisorConfig
    machine: str
    log: LogFile
    instance: str | None = None
    admitter: Admitter | None = None
    roles: dict[str, Role] = field(default_factory=dict)
    kind_available: Callable[[str], bool] = field(default=lambda kind: True)
    pool_alive: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        t = self.config.time
        self.board = install_gates(
            Board(
                self.store,
                ClaimWindows(
                    t.heartbeat_fresh * 1000, t.stale_same_holder * 1000, t.stale_anyone * 1000
                ),
            )
        )
        if self.admitter is None:
            self.admitter = LaneAdmitter(self.board, warn=lambda msg: self.log.warn("lanes", msg))
        for rid in self.config.worker_roles:
            self.roles.setdefault(rid, Role(rid, self.config.agent_for(rid), ("worker",), rid))
        for rid in self.config.reviewer_roles:
            self.roles.setdefault(rid, Role(rid, self.config.agent_for(rid), ("reviewer",), rid))

    @property
    def clock(self) -> Clock:
        return self.store.clock

    @property
    def actor(self) -> Actor:
        return system("Orchestrator")

    def now(self) -> int:
        return self.store.clock.now_ms()

    def role_for(self, assignee: str | None) -> Role | None:
        if assignee is None:
            rid = self.config.worker_roles[0] if self.config.worker_roles else None
            return self.roles.get(rid) if rid else None
        return self.roles.get(assignee)

    def kind_for(self, role: Role) -> str | None:
        """The agent kind that runs the role: the forced kind, else the role's own kind,
        else another kind that carries it, else the default; None when none is available."""
        if self.config.force_agent:
            forced = self.config.force_agent
            return forced if self.kind_available(forced) else None
        extra = role.extra.get("agents") or ()
        kinds = [role.agent, *[k for k in extra if isinstance(k, str)], self.config.default_agent]
        for kind in kinds:
            if kind and kind != "any" and self.kind_available(kind):
                return kind
        return None
