"""Writing settings into a project's ``.laneboard/config.toml`` without losing what is there.

New keys go at the end of the ``[project]`` table (which is added when missing); every
other line — comments, other keys, their order — is kept. The file is replaced
atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from laneboard.config_file import header_lines


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def with_project_keys(text: str, values: Mapping[str, Any]) -> str:
    """``text`` with ``key = value`` lines added to its ``[project]`` table."""
    if not values:
        return text
    added = [f"{k} = {toml_value(v)}" for k, v in values.items()]
    lines = text.splitlines()
    headers = header_lines(text)
    start = headers.get(("project",))
    if start is None:
        tail = [""] if lines and lines[-1].strip() else []
        return "\n".join([*lines, *tail, "[project]", *added]) + "\n"
    following = [n for n in headers.values() if n > start]
    stop = min(following) - 1 if following else len(lines)
    end = start
    for n in range(start, stop + 1):
        if lines[n - 1].strip() and not lines[n - 1].strip().startswith("#"):
            end = n
    return "\n".join([*lines[:end], *added, *lines[end:]]) + "\n"


def write_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".config.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
