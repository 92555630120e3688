"""The role catalogue: role definitions discovered from TOML (or JSON) files.

Where roles come from, first match by id wins:

1. the project's ``.laneboard/roles/``,
2. the user's ``$XDG_CONFIG_HOME/laneboard/roles/`` (``~/.config/laneboard/roles/``),
3. the defaults shipped with laneboard (``worker``, ``reviewer``, ``director``).

A role file is ``<dir>/<name>.toml``, ``<dir>/<name>/role.toml`` (or the ``.json`` forms) and
must carry ``schema = "laneboard.role/1"``: a file without that marker is not a role and is
skipped with a warning, as is a file whose real path leaves its directory (a symlink out).
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from laneboard.domain.roles import LANES, Role

SCHEMA = "laneboard.role/1"
ROLE_PROMPT_LIMIT = 1200
REVIEWER_PROMPT_LIMIT = 2400
log = logging.getLogger("laneboard.roles")

_LIST_FIELDS = ("responsibilities", "boundaries", "shapes", "self_check")
_KNOWN = {
    "schema",
    "id",
    "agent",
    "agents",
    "lanes",
    "title",
    "reviewer_prompt",
    "check_commands",
    *_LIST_FIELDS,
}


class RoleFileError(ValueError):
    """A role file that cannot be used (the message says which and why)."""


@dataclass
class RoleCatalog:
    roles: list[Role] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def get(self, role_id: str) -> Role | None:
        return next((r for r in self.roles if r.id == role_id), None)

    def ids(self) -> list[str]:
        return [r.id for r in self.roles]

    def in_lane(self, lane: str) -> list[Role]:
        return [r for r in self.roles if lane in r.lanes]


def user_roles_dir() -> str:
    from laneboard.config import config_dir

    return os.path.join(config_dir(), "roles")


def project_roles_dir(project_dir: str) -> str:
    """The project's ``roles_dir`` (default ``.laneboard/roles``), inside its directory."""
    from laneboard.config import project_settings

    rel = str(project_settings(project_dir=project_dir).value("project.roles_dir"))
    return os.path.join(project_dir, rel)


def _inside(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _strings(value: Any, name: str, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RoleFileError(f"{path}: {name} must be a list of strings")
    return tuple(value)


def parse_role(data: dict[str, Any], path: str, source: str) -> Role:
    if data.get("schema") != SCHEMA:
        raise RoleFileError(f'{path}: not a role (no schema = "{SCHEMA}" marker)')
    rid = data.get("id")
    if not isinstance(rid, str) or not rid.strip() or any(c.isspace() for c in rid):
        raise RoleFileError(f"{path}: id must be a non-empty word")
    agent = data.get("agent", "")  # none: the supervisor's default_agent runs it
    if not isinstance(agent, str):
        raise RoleFileError(f"{path}: agent must name an agent kind")
    lanes = _strings(data.get("lanes", ["worker"]), "lanes", path)
    bad = [ln for ln in lanes if ln not in LANES]
    if not lanes or bad:
        raise RoleFileError(
            f"{path}: lanes must be some of {', '.join(LANES)} (got {', '.join(bad) or 'none'})"
        )
    prompt = data.get("reviewer_prompt", "")
    if not isinstance(prompt, str):
        raise RoleFileError(f"{path}: reviewer_prompt must be a string")
    title = data.get("title", "")
    if not isinstance(title, str):
        raise RoleFileError(f"{path}: title must be a string")
    extra: dict[str, Any] = {"path": path}
    agents = _strings(data.get("agents"), "agents", path)
    if agents:
        extra["agents"] = list(agents)
    checks = _strings(data.get("check_commands"), "check_commands", path)
    if checks:
        extra["check_commands"] = list(checks)
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        extra["unknown_keys"] = unknown
    lists = {name: _strings(data.get(name), name, path) for name in _LIST_FIELDS}
    return Role(
        id=rid,
        agent=agent,
        lanes=lanes,
        title=title,
        reviewer_prompt=prompt,
        source=source,
        extra=extra,
        **lists,
    )


def load_role_file(path: str, root: str, source: str) -> Role:
    if not _inside(path, root):
        raise RoleFileError(f"{path}: resolves outside {root} (symlink); skipped")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        data = json.loads(raw) if path.endswith(".json") else tomllib.loads(raw.decode())
    except (OSError, ValueError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise RoleFileError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise RoleFileError(f"{path}: not a table")
    return parse_role(data, path, source)


def role_files(root: str) -> list[str]:
    """Candidate role files in a roles directory, in a stable order."""
    if not os.path.isdir(root):
        return []
    out: list[str] = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            for inner in ("role.toml", "role.json"):
                if os.path.isfile(os.path.join(path, inner)):
                    out.append(os.path.join(path, inner))
                    break
        elif name.endswith((".toml", ".json")):
            out.append(path)
    return out


def load_dir(root: str, source: str, catalog: RoleCatalog, seen: set[str]) -> None:
    for path in role_files(root):
        try:
            role = load_role_file(path, root, source)
        except RoleFileError as exc:
            catalog.warnings.append(str(exc))
            log.warning("%s", exc)
            continue
        if role.id in seen:
            continue
        seen.add(role.id)
        catalog.roles.append(role)


def builtin_roles() -> list[Role]:
    out: list[Role] = []
    folder = resources.files("laneboard") / "data" / "roles"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
            out.append(parse_role(data, f"builtin:{entry.name}", "builtin"))
    return out


def discover_roles(
    project_dir: str | None = None, *, user_dir: str | None = None, include_builtin: bool = True
) -> RoleCatalog:
    catalog = RoleCatalog()
    seen: set[str] = set()
    if project_dir:
        load_dir(project_roles_dir(project_dir), "project", catalog, seen)
    load_dir(user_dir if user_dir is not None else user_roles_dir(), "user", catalog, seen)
    if include_builtin:
        for role in builtin_roles():
            if role.id not in seen:
                seen.add(role.id)
                catalog.roles.append(role)
    return catalog


def claim_set(roles: Iterable[Role]) -> tuple[str, ...]:
    """Every worker-lane role plus every reviewer-lane role (the supervisor claims these)."""
    items = list(roles)
    out: list[str] = []
    for lane in ("worker", "reviewer"):
        for role in items:
            if lane in role.lanes and role.id not in out:
                out.append(role.id)
    return tuple(out)


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _section(title: str, items: Sequence[str]) -> list[str]:
    return [f"{title}:", *[f"- {item}" for item in items]] if items else []


def render_role(role: Role, limit: int = ROLE_PROMPT_LIMIT) -> str:
    """The role's title, responsibilities and boundaries, for a handoff or system prompt."""
    if not (role.title or role.responsibilities or role.boundaries):
        return ""
    lines = [f"Your role: {role.title or role.id} ({role.id}, {role.lane} lane)."]
    lines += _section("Responsibilities", role.responsibilities)
    lines += _section("Boundaries", role.boundaries)
    lines += _section("Before you finish, check", role.self_check)
    return _bounded("\n".join(lines), limit)


def render_reviewer_prompt(role: Role, limit: int = REVIEWER_PROMPT_LIMIT) -> str:
    return _bounded(role.reviewer_prompt.strip(), limit)
