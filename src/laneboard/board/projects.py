"""Projects and their settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from laneboard.board import inputs
from laneboard.board.base import BoardBase
from laneboard.domain.model import Actor, ActorKind, Project
from laneboard.errors import LaneboardError, bad_input
from laneboard.store import IntegrityError


class ProjectsMixin(BoardBase):
    def add_project(
        self,
        actor: Actor,
        key: str,
        name: str | None = None,
        path: str | None = None,
        base_ref: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> Project:
        self._human_only(actor, "add a project")
        key = inputs.project_key(key)
        name = inputs.text(name or key, "project name", limit=200)
        try:
            with self.store.write() as tx:
                if tx.project(key=key) or tx.project(name=name):
                    raise LaneboardError(
                        "CONFLICT",
                        f"project {key} ({name}) already exists",
                        "pick another key and name, or use the existing project",
                    )
                pid = tx.insert_project(key, name, path, base_ref)
                if config:
                    tx.update_project(pid, config=config)
                tx.append_event(
                    "project.added",
                    actor,
                    project_id=pid,
                    payload={"key": key, "name": name, "path": path},
                )
                p = tx.project(id=pid)
        except IntegrityError:
            raise LaneboardError(
                "CONFLICT", f"project {key} already exists", "use the existing project"
            ) from None
        assert p is not None
        return p

    def projects(self) -> list[Project]:
        with self.store.read() as tx:
            return tx.projects()

    def project(self, ref: str | int) -> Project:
        with self.store.read() as tx:
            return self._project(tx, ref)

    def project_config(self, ref: str | int) -> dict[str, Any]:
        with self.store.read() as tx:
            return tx.project_config(self._project(tx, ref).id)

    def set_project_config(
        self, actor: Actor, ref: str | int, changes: dict[str, Any], unset: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Change a project's settings (workspace, review_gate, check_timeout, base_ref)."""
        self._human_only(actor, "change project settings")
        checked = {k: _project_setting(k, v) for k, v in changes.items()}
        for key in unset:
            _project_setting(key, None)
        with self.store.write() as tx:
            p = self._project(tx, ref)
            cfg = {**tx.project_config(p.id), **checked}
            for key in unset:
                cfg.pop(key, None)
            tx.update_project(p.id, config=cfg)
            tx.append_event(
                "project.configured",
                actor,
                project_id=p.id,
                payload={"set": sorted(checked), "unset": sorted(unset)},
            )
            return cfg

    @staticmethod
    def _human_only(actor: Actor, what: str) -> None:
        if actor.kind is ActorKind.AGENT:
            raise LaneboardError("FORBIDDEN", f"agents may not {what}", "ask a human to do it")


PROJECT_SETTINGS = ("workspace", "review_gate", "check_timeout", "base_ref")


def _project_setting(key: str, value: Any) -> Any:
    """Validate one project setting (``None`` only checks the key)."""
    if key not in PROJECT_SETTINGS:
        raise bad_input(
            f"unknown project setting {key!r}", f"settings: {', '.join(PROJECT_SETTINGS)}"
        )
    if value is None:
        return None
    if key == "workspace" and value not in ("lanes", "shared"):
        raise bad_input(f"workspace {value!r} is not valid", "use lanes or shared")
    if key == "review_gate":
        items = value if isinstance(value, list) else [value]
        return inputs.strings(items, "review_gate")
    if key == "check_timeout":
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise bad_input(
                f"check_timeout {value!r} is not a number", "give seconds, e.g. 120"
            ) from None
        if not 0 < seconds <= 3600:
            raise bad_input(f"check_timeout {seconds} is out of range", "use 0 < seconds <= 3600")
        return seconds
    if key == "base_ref":
        return inputs.text(str(value), "base_ref", limit=200).strip()
    return value
