"""Reading one TOML configuration file, keeping the line each key was written on.

``tomllib`` parses the values; a small scanner over the same text finds the line of every
key (``[table]`` headers, ``key = value`` lines, dotted keys), so a refusal can name the
file and the line. A parsed file is cached by its modification time and size.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from laneboard.errors import LaneboardError

KeyPath = tuple[str, ...]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_PART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_TABLE = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]\s*(?:#.*)?$")
_ARRAY_TABLE = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")
_SPLIT = re.compile(rf"{_PART}")


@dataclass(frozen=True)
class ConfigFile:
    path: str
    data: dict[str, Any]
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, keys: KeyPath) -> int | None:
        """The line of ``keys``, else of the nearest enclosing table that has one."""
        for n in range(len(keys), 0, -1):
            found = self.lines.get(keys[:n])
            if found is not None:
                return found
        return None

    def where(self, keys: KeyPath) -> str:
        line = self.line(keys)
        return f"{self.path}:{line}" if line else self.path


def _parts(dotted: str) -> KeyPath:
    out = []
    for raw in _SPLIT.findall(dotted):
        out.append(raw[1:-1] if raw[:1] in "\"'" else raw)
    return tuple(out)


def _strip_strings(line: str) -> str:
    """The line with string contents removed (so brackets inside strings do not count)."""
    return re.sub(_QUOTED, '""', line)


def key_lines(text: str) -> dict[KeyPath, int]:
    """Map each key path to the 1-based line it is defined on."""
    return _scan(text)[0]


def header_lines(text: str) -> dict[KeyPath, int]:
    """Map each ``[table]`` header to its 1-based line."""
    return _scan(text)[1]


def _scan(text: str) -> tuple[dict[KeyPath, int], dict[KeyPath, int]]:
    lines: dict[KeyPath, int] = {}
    headers: dict[KeyPath, int] = {}
    table: KeyPath = ()
    depth = 0  # open brackets/braces of a multi-line value
    multiline: str | None = None  # the open triple quote of a multi-line string
    for number, raw in enumerate(text.splitlines(), start=1):
        if multiline is not None:
            if multiline in raw:
                multiline = None
            continue
        if depth == 0:
            table = _scan_key(raw, number, table, lines, headers)
        body = raw
        for quote in ('"""', "'''"):
            if raw.count(quote) % 2 == 1:
                multiline = quote
                body = raw.split(quote, 1)[0]
        body = _strip_strings(body).split("#", 1)[0]
        opened = body.count("[") + body.count("{")
        depth = max(0, depth + opened - body.count("]") - body.count("}"))
        if headers.get(table) == number:
            depth = 0
    return lines, headers


def _scan_key(
    raw: str,
    number: int,
    table: KeyPath,
    lines: dict[KeyPath, int],
    headers: dict[KeyPath, int],
) -> KeyPath:
    m = _ARRAY_TABLE.match(raw) or _TABLE.match(raw)
    if m:
        path = _parts(m.group(1))
        lines.setdefault(path, number)
        headers.setdefault(path, number)
        return path
    m = _ASSIGN.match(raw)
    if m:
        path = table + _parts(m.group(1))
        for n in range(len(table) + 1, len(path) + 1):
            lines.setdefault(path[:n], number)
    return table


_CACHE: dict[str, tuple[tuple[int, int], ConfigFile]] = {}


def load(path: str) -> ConfigFile | None:
    """The parsed file, or None when it does not exist. Bad TOML is ``CONFIG_INVALID``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise invalid(
            path, None, f"cannot read it: {exc.strerror}", "check its permissions"
        ) from None
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _CACHE.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise invalid(
            path, None, f"cannot read it: {exc.strerror}", "check its permissions"
        ) from None
    except UnicodeDecodeError:
        raise invalid(path, None, "it is not UTF-8 text", "save it as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = _error_line(str(exc)) or (len(text.splitlines()) or None)
        raise invalid(path, line, f"not valid TOML ({exc})", "fix the syntax") from None
    parsed = ConfigFile(path, data, key_lines(text))
    _CACHE[path] = (stamp, parsed)
    return parsed


def _error_line(message: str) -> int | None:
    m = re.search(r"at line (\d+)", message)
    return int(m.group(1)) if m else None


def invalid(path: str, line: int | None, message: str, fix: str) -> LaneboardError:
    """A refusal naming the file and the line."""
    where = f"{path}:{line}" if line else path
    details: dict[str, Any] = {"file": path}
    if line:
        details["line"] = line
    return LaneboardError("CONFIG_INVALID", f"{where}: {message}", fix, **details)
