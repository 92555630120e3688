"""One precedence for every setting, and where each value came from.

flag → environment (``LANEBOARD_*``) → the project's ``.laneboard/config.toml`` → the
board's project settings (``lb project config``) → the user's ``config.toml`` → the
built-in default. Machine keys skip the two project layers. Every file is checked whole
when it is read: an unknown table or key, or a bad value, is refused naming the file and
the line.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from laneboard import config_file
from laneboard.config_file import ConfigFile, KeyPath
from laneboard.config_keys import (
    AGENT_KIND_KEYS,
    BOARD_SETTINGS,
    CHOICES_AGENT,
    OPEN_TABLES,
    PROJECT,
    Bad,
    Key,
    all_keys,
    tables,
    text,
)
from laneboard.errors import LaneboardError

PROJECT_FILE = os.path.join(".laneboard", "config.toml")


@dataclass(frozen=True)
class Origin:
    layer: str  # flag | env | project | board | user | default
    source: str  # the flag, the variable, file:line, "board project KEY" or "default"
    file: str | None = None
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"layer": self.layer, "source": self.source}
        if self.file:
            out["file"] = self.file
        if self.line:
            out["line"] = self.line
        return out


DEFAULT = Origin("default", "default")


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any
    origin: Origin
    shadowed: tuple[Origin, ...] = ()  # lower layers that set it too

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": _plain(self.value), "origin": self.origin.to_dict()}
        if self.shadowed:
            out["shadowed"] = [o.to_dict() for o in self.shadowed]
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass
class Settings:
    items: dict[str, Setting] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # layer -> path read

    def value(self, key: str) -> Any:
        return self.items[key].value

    def section(self, table: str) -> dict[str, Any]:
        """The keys directly under ``table`` by short name (open tables excluded)."""
        pre = table + "."
        return {
            k[len(pre) :]: s.value
            for k, s in self.items.items()
            if k.startswith(pre) and "." not in k[len(pre) :]
        }

    def entries(self, table: str) -> dict[str, Setting]:
        pre = table + "."
        return {k[len(pre) :]: s for k, s in self.items.items() if k.startswith(pre)}


# -- files -------------------------------------------------------------------------------------
def user_file_path() -> str:
    from laneboard.config import config_dir

    return os.path.join(config_dir(), "config.toml")


def project_file_path(project_dir: str) -> str:
    return os.path.join(project_dir, PROJECT_FILE)


@dataclass(frozen=True)
class FileValues:
    """A checked file: each key's value and line."""

    path: str
    values: dict[str, tuple[Any, int | None]]


def check_file(cf: ConfigFile, keys: dict[str, Key], *, project: bool) -> FileValues:
    allowed = {"project"} if project else {t.split(".")[0] for t in tables(keys)}
    out: dict[str, tuple[Any, int | None]] = {}
    for top, value in cf.data.items():
        if top not in allowed:
            raise _unknown_table(cf, top, allowed, project)
        if not isinstance(value, dict):
            raise config_file.invalid(
                cf.path, cf.line((top,)), f"{top} must be a table", f"write it as [{top}]"
            )
        _walk(cf, keys, (top,), value, out)
    return FileValues(cf.path, out)


def _unknown_table(cf: ConfigFile, top: str, allowed: set[str], project: bool) -> LaneboardError:
    if project and top in ("supervisor", "patrol"):
        fix = f"[{top}] is a machine setting: move it to {user_file_path()}"
    else:
        fix = f"use {' or '.join(f'[{t}]' for t in sorted(allowed))}" + _near(top, allowed)
    return config_file.invalid(cf.path, cf.line((top,)), f"unknown table or key {top!r}", fix)


def _near(word: str, known: set[str] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _walk(
    cf: ConfigFile,
    keys: dict[str, Key],
    path: KeyPath,
    table: dict[str, Any],
    out: dict[str, tuple[Any, int | None]],
) -> None:
    prefix = ".".join(path)
    if prefix in OPEN_TABLES:
        _open_table(cf, path, table, out)
        return
    subtables = {t for t in tables(keys) if t.startswith(prefix + ".")}
    for name, value in table.items():
        full = f"{prefix}.{name}"
        line = cf.line((*path, name))
        if full in keys:
            out[full] = (_checked(cf, (*path, name), keys[full], value), line)
        elif full in subtables:
            if not isinstance(value, dict):
                raise config_file.invalid(
                    cf.path, line, f"{full} must be a table", f"write it as [{full}]"
                )
            _walk(cf, keys, (*path, name), value, out)
        else:
            known = [k.rsplit(".", 1)[1] for k in keys if k.rsplit(".", 1)[0] == prefix]
            known += [
                t.rsplit(".", 1)[1] for t in subtables if t.count(".") == prefix.count(".") + 1
            ]
            raise config_file.invalid(
                cf.path,
                line,
                f"unknown key {name!r} in [{prefix}]",
                "remove it or fix the spelling"
                + _near(name, known)
                + " (every key is listed in docs/configuration.md)",
            )


def _checked(cf: ConfigFile, spot: KeyPath, key: Key, value: Any) -> Any:
    try:
        return key.check(value)
    except Bad as bad:
        raise _bad(
            cf, spot, key.name, Bad(bad.message, f"{bad.fix} (default {_shown(key)})")
        ) from None


def _shown(key: Key) -> str:
    value = _plain(key.default)
    return repr(value) if value != "" else '""'


def _bad(cf: ConfigFile, spot: KeyPath, name: str, bad: Bad) -> LaneboardError:
    return config_file.invalid(
        cf.path, cf.line(spot), f"bad value for {name}: {bad.message}", bad.fix
    )


def _open_table(
    cf: ConfigFile, path: KeyPath, table: dict[str, Any], out: dict[str, tuple[Any, int | None]]
) -> None:
    prefix = ".".join(path)
    for name, value in table.items():
        where = (*path, name)
        if prefix == "supervisor.role_agents":
            try:
                checked = text(CHOICES_AGENT)(value)
            except Bad as bad:
                raise _bad(cf, where, f"{prefix}.{name}", bad) from None
            out[f"{prefix}.{name}"] = (checked, cf.line(where))
            continue
        if name not in CHOICES_AGENT or not isinstance(value, dict):
            raise config_file.invalid(
                cf.path,
                cf.line(where),
                f"unknown agent kind [{prefix}.{name}]",
                f"use one of {', '.join(CHOICES_AGENT)}" + _near(name, list(CHOICES_AGENT)),
            )
        for inner, raw in value.items():
            spot = (*where, inner)
            check = AGENT_KIND_KEYS.get(inner)
            if check is None:
                raise config_file.invalid(
                    cf.path,
                    cf.line(spot),
                    f"unknown key {inner!r} in [{prefix}.{name}]",
                    f"known: {', '.join(sorted(AGENT_KIND_KEYS))}"
                    + _near(inner, list(AGENT_KIND_KEYS)),
                )
            try:
                checked = check(raw)
            except Bad as bad:
                raise _bad(cf, spot, ".".join(spot), bad) from None
            out[".".join(spot)] = (checked, cf.line(spot))


# (path, project) -> the parsed file and keys it was checked against, and the result:
# ``config_file.load`` answers the same object while the file is unchanged, so a file is
# checked again only when it changed (settings are resolved for every card admitted)
_CHECKED: dict[tuple[str, bool], tuple[ConfigFile, dict[str, Key], FileValues]] = {}


def read_file(path: str, keys: dict[str, Key], *, project: bool) -> FileValues | None:
    cf = config_file.load(path)
    if cf is None:
        return None
    hit = _CHECKED.get((path, project))
    if hit is not None and hit[0] is cf and hit[1] is keys:
        return hit[2]
    checked = check_file(cf, keys, project=project)
    _CHECKED[(path, project)] = (cf, keys, checked)
    return checked


# -- resolution --------------------------------------------------------------------------------
def _from_env(key: Key, env: Mapping[str, str]) -> tuple[Any, Origin] | None:
    if not key.env:
        return None
    raw = env.get(key.env)
    if raw is None or raw == "":
        return None
    try:
        value = key.check(raw)
    except Bad as bad:
        raise LaneboardError(
            "CONFIG_INVALID", f"{key.env}={raw!r}: {bad.message}", f"{bad.fix}, or unset {key.env}"
        ) from None
    return value, Origin("env", key.env)


@dataclass(frozen=True)
class Flag:
    """A value given on the command line, with how it was spelled."""

    value: Any
    label: str


def _from_flag(key: Key, flags: Mapping[str, Any]) -> tuple[Any, Origin] | None:
    raw = flags.get(key.name)
    if raw is None:
        return None
    label = key.flag or "--set " + key.name
    if isinstance(raw, Flag):
        label, raw = raw.label, raw.value
    try:
        value = key.check(raw)
    except Bad as bad:
        raise LaneboardError("CONFIG_INVALID", f"{label} {raw!r}: {bad.message}", bad.fix) from None
    return value, Origin("flag", label)


def _from_file(name: str, layer: str, fv: FileValues | None) -> tuple[Any, Origin] | None:
    if fv is None or name not in fv.values:
        return None
    value, line = fv.values[name]
    source = f"{fv.path}:{line}" if line else fv.path
    return value, Origin(layer, source, fv.path, line)


def _from_board(key: Key, board: Mapping[str, Any] | None, label: str) -> tuple[Any, Origin] | None:
    if board is None or key.scope != PROJECT or key.short not in BOARD_SETTINGS:
        return None
    raw = board.get(key.short)
    if raw is None or raw == "" or raw == []:
        return None
    try:
        value = key.check(raw)
    except Bad as bad:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"the board's setting {key.short} for {label} is bad: {bad.message}",
            f"fix it with: lb project config {label.split()[-1]} --set {key.short}=…",
        ) from None
    return value, Origin("board", label)


@dataclass
class Sources:
    flags: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    project: FileValues | None = None
    board: Mapping[str, Any] | None = None
    board_label: str = "board"
    user: FileValues | None = None


def resolve_key(key: Key, src: Sources) -> Setting:
    found: list[tuple[Any, Origin]] = []
    for got in (
        _from_flag(key, src.flags),
        _from_env(key, src.env),
        _from_file(key.name, "project", src.project) if key.scope == PROJECT else None,
        _from_board(key, src.board, src.board_label),
        _from_file(key.name, "user", src.user),
    ):
        if got is not None:
            found.append(got)
    if not found:
        return Setting(key.name, key.default, DEFAULT)
    value, origin = found[0]
    return Setting(key.name, value, origin, tuple(o for _, o in found[1:]))


def resolve(
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    user_file: str | None = None,
    project_dir: str | None = None,
    board: Mapping[str, Any] | None = None,
    board_label: str = "board",
    prefixes: tuple[str, ...] = (),
) -> Settings:
    """Resolve every key (or those under ``prefixes``), checking each file read."""
    keys = all_keys()
    user_path = user_file or user_file_path()
    src = Sources(
        flags=flags or {},
        env=dict(os.environ) if env is None else env,
        user=read_file(user_path, keys, project=False),
        board=board,
        board_label=board_label,
    )
    out = Settings()
    out.files["user"] = user_path
    if project_dir:
        ppath = project_file_path(project_dir)
        src.project = read_file(ppath, keys, project=True)
        out.files["project"] = ppath
    for key in keys.values():
        if prefixes and not key.name.startswith(prefixes):
            continue
        out.items[key.name] = resolve_key(key, src)
    if src.user is not None:  # the open tables come from the user's file only
        for name, (value, line) in src.user.values.items():
            if name.startswith(OPEN_TABLES) and (not prefixes or name.startswith(prefixes)):
                source = f"{src.user.path}:{line}" if line else src.user.path
                out.items[name] = Setting(name, value, Origin("user", source, src.user.path, line))
    return out
