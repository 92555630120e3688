"""What every pass and the pool share: the store, board, clock, config and identity."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from laneboard.agents import check_sandbox
from laneboard.agents.selection import Choice, choose_kind, unassigned_role
from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.claims import ClaimWindows
from laneboard.domain.clock import Clock
from laneboard.domain.model import Actor, Card, Project, system
from laneboard.domain.roles import Role
from laneboard.errors import not_found
from laneboard.store import Store
from laneboard.supervisor.logs import LogFile
from laneboard.workspace.admit import Admitter
from laneboard.workspace.hooks import install as install_gates
from laneboard.workspace.land import LaneRechecks
from laneboard.workspace.lane_admit import LaneAdmitter
from laneboard.workspace.remote import checkout_of

ROLES_TTL_S = 30.0  # a project's .laneboard/roles/ is read again after this long


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
    run_scope: int | None = None  # lb run: the claims of its ticks are this run's cards only
    _project_roles: dict[str, tuple[float, dict[str, Role]]] = field(default_factory=dict)
    absence_read: int | None = None  # when the poll last read its no_resident alert (ms)
    # the projects and their board settings as the last poll read them, kept while a
    # resident ticker runs the polls (``keep_projects``): it forgets them on a project's
    # news (every project write logs project.*) and on a tick without news
    projects_seen: tuple[list[Project], dict[int, dict[str, Any]]] | None = None
    keep_projects: bool = False
    # how far this machine's clock is ahead of the database server's (ms), as last measured
    # (``cluster.declared``, at each beat): failover compares heartbeats in server time
    clock_offset_ms: int = 0
    # project id -> whether this machine raised its project_admission alert (absent: not
    # known since the start; ``admission_alerts``)
    project_alerts: dict[int, bool] = field(default_factory=dict)
    # project id -> (when the poll tries it again, why): a remote this machine could not
    # clone or fetch is not tried again before then, whatever wakes the poll sooner
    remote_failing: dict[int, tuple[int, str]] = field(default_factory=dict)
    # when the lanes the clean-up and the sweep kept, and the landings the lanes pass was
    # refused, are looked at again (``land.LaneRechecks``)
    lane_rechecks: LaneRechecks = field(init=False)

    def __post_init__(self) -> None:
        self.lane_rechecks = LaneRechecks(self.now)
        t = self.config.time
        self.board = install_gates(
            Board(
                self.store,
                ClaimWindows(
                    t.heartbeat_fresh * 1000, t.stale_same_holder * 1000, t.stale_anyone * 1000
                ),
            ),
            clones=self.clones,
            checks=check_sandbox.for_config(self.config, self.store.url),
        )
        if self.admitter is None:
            self.admitter = LaneAdmitter(
                self.board,
                warn=lambda msg: self.log.warn("lanes", msg),
                clones=self.clones,
                machine=self.machine,  # the name its lanes are recorded and cleaned under
            )
        for rid in self.config.worker_roles:
            self.roles.setdefault(rid, Role(rid, "", ("worker",), rid))
        for rid in self.config.reviewer_roles:
            self.roles.setdefault(rid, Role(rid, "", ("reviewer",), rid))

    @property
    def clones(self) -> str:
        """Where this machine keeps its clones of projects' remotes."""
        return self.config.state_path("clones")

    @property
    def clock(self) -> Clock:
        return self.store.clock

    @property
    def actor(self) -> Actor:
        return system("Orchestrator")

    def now(self) -> int:
        return self.store.clock.now_ms()

    def card(self, card_id: int) -> Card:
        """A card read on its own (one statement, no transaction), as ``Board.get``."""
        with self.store.autocommit() as tx:
            card = tx.card(card_id)
        if card is None:
            raise not_found("card", card_id, "list cards with: lb card list")
        return card

    def project_roles(self, project: Project | None) -> dict[str, Role]:
        """The roles for cards of ``project``: its ``.laneboard/roles/`` first, then ours."""
        path = checkout_of(project, self.clones) if project is not None else None
        if not path or not os.path.isdir(path):
            return self.roles
        now = time.monotonic()
        seen = self._project_roles.get(path)
        if seen is None or now - seen[0] > ROLES_TTL_S:
            from laneboard.agents.roles import RoleCatalog, load_dir

            catalog = RoleCatalog()
            load_dir(os.path.join(path, ".laneboard", "roles"), "project", catalog, set())
            seen = (now, {**self.roles, **{r.id: r for r in catalog.roles}})
            self._project_roles[path] = seen
        return seen[1]

    def claim_set(self, projects: Iterable[Project] = ()) -> tuple[str, ...]:
        """Every worker-lane and reviewer-lane role, project roles included."""
        out = list(self.config.claim_set)
        for project in projects:
            for role in self.project_roles(project).values():
                if {"worker", "reviewer"} & set(role.lanes) and role.id not in out:
                    out.append(role.id)
        return tuple(out)

    def role_for(self, assignee: str | None, project: Project | None = None) -> Role | None:
        roles = self.project_roles(project)
        if assignee is None:
            rid = unassigned_role(self.config.unassigned_role, roles.values())
            return roles.get(rid) if rid else None
        return roles.get(assignee)

    def choice_for(self, role: Role) -> Choice:
        cfg = self.config
        return choose_kind(
            role,
            available=self.kind_available,
            force_agent=cfg.force_agent,
            role_agents=cfg.role_agents,
            default_agent=cfg.default_agent,
        )

    def kind_for(self, role: Role) -> str | None:
        """The agent kind that runs the role (``agents.selection``); None: none available."""
        return self.choice_for(role).kind
