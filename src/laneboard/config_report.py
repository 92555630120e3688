"""``lb config show``: every resolved value and where it came from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from laneboard.config import board_layer, config_dir, state_dir
from laneboard.config_resolve import PROJECT_FILE, Origin, Settings, resolve
from laneboard.domain.model import Project


def find_project_dir(start: str) -> str | None:
    """The nearest directory at or above ``start`` that has ``.laneboard/config.toml``."""
    here = os.path.abspath(start)
    while True:
        if os.path.isfile(os.path.join(here, PROJECT_FILE)):
            return here
        if os.path.isdir(os.path.join(here, ".git")):
            return None  # the top of this checkout: no project file in it
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def show(
    *,
    flags: Mapping[str, Any] | None = None,
    project: Project | None = None,
    stored: Mapping[str, Any] | None = None,
    project_dir: str | None = None,
    db_flag: str | None = None,
) -> dict[str, Any]:
    directory = project_dir or (project.path if project is not None else None)
    if directory and not os.path.isdir(directory):
        directory = None
    settings = resolve(
        flags=flags,
        project_dir=directory,
        board=board_layer(project, stored) if project is not None else None,
        board_label=f"board project {project.key}" if project is not None else "board",
    )
    return {
        "project": project.key if project is not None else None,
        "files": _files(settings),
        "database": _database(db_flag),
        "state_dir": _state_dir(settings),
        "config_dir": config_dir(),
        "settings": {k: settings.items[k].to_dict() for k in sorted(settings.items)},
    }


def _files(settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in ("user", "project"):
        path = settings.files.get(layer)
        out[layer] = {"path": path, "exists": os.path.isfile(path)} if path else None
    return out


def _database(db_flag: str | None) -> dict[str, Any]:
    from laneboard.store import default_sqlite_path, redact_url

    if db_flag:
        url, origin = db_flag, Origin("flag", "--db")
    elif os.environ.get("LANEBOARD_DATABASE_URL"):
        url, origin = os.environ["LANEBOARD_DATABASE_URL"], Origin("env", "LANEBOARD_DATABASE_URL")
    else:
        url, origin = "sqlite:///" + default_sqlite_path(), Origin("default", "default")
    return {"url": redact_url(url), "origin": origin.to_dict()}


def _state_dir(settings: Settings) -> dict[str, Any]:
    s = settings.items["supervisor.state_dir"]
    if s.value:
        return {"path": s.value, "origin": s.origin.to_dict()}
    return {"path": state_dir(), "origin": Origin("default", "default").to_dict()}


def render(report: dict[str, Any]) -> str:
    files = report["files"]
    lines = [f"user file     {_file_line(files['user'])}"]
    if files.get("project"):
        lines.append(f"project file  {_file_line(files['project'])}")
    lines.append(
        f"database      {report['database']['url']}  ({report['database']['origin']['source']})"
    )
    lines.append(f"state dir     {report['state_dir']['path']}")
    lines.append("")
    rows = [(k, _shown(v["value"]), v["origin"]["source"]) for k, v in report["settings"].items()]
    width = max(len(r[0]) for r in rows)
    vwidth = min(40, max(len(r[1]) for r in rows))
    for key, value, source in rows:
        lines.append(f"{key.ljust(width)}  {value.ljust(vwidth)}  {source}")
    return "\n".join(lines)


def _file_line(info: dict[str, Any] | None) -> str:
    if not info:
        return "-"
    return str(info["path"]) + ("" if info["exists"] else "  (none)")


def _shown(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)
