"""systemd user units: ``~/.config/systemd/user/laneboard-{supervisor,server}.service``."""

from __future__ import annotations

import getpass
import os
from typing import Any

from laneboard.errors import LaneboardError
from laneboard.service import tools
from laneboard.service.render import MARK, SYSTEMD_NAMES, systemd_unit
from laneboard.service.spec import ServiceSpec
from laneboard.service.state import Outcome, UnitState, read_text, write_text

NAME = "systemd"
PROPERTIES = (
    "LoadState",
    "UnitFileState",
    "ActiveState",
    "SubState",
    "MainPID",
    "ExecMainStatus",
    "ExecMainExitTimestamp",
    "Result",
)


def unit_dir() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "systemd", "user")


def unit_file(unit: str) -> str:
    return os.path.join(unit_dir(), SYSTEMD_NAMES[unit])


def _ctl(*args: str) -> list[str]:
    return ["systemctl", "--user", *args]


def available() -> tuple[bool, str]:
    got = tools.run("systemctl", "--user", "show-environment")
    if got.ok:
        return True, ""
    return False, f"systemctl --user does not answer ({got.text() or f'exit {got.code}'})"


def _show(unit: str) -> dict[str, str]:
    got = tools.run(
        "systemctl", "--user", "show", SYSTEMD_NAMES[unit], "--property=" + ",".join(PROPERTIES)
    )
    if not got.ok:
        return {}
    return dict(line.split("=", 1) for line in got.out.splitlines() if "=" in line)


def status(unit: str, spec: ServiceSpec | None) -> UnitState:
    path = unit_file(unit)
    text = read_text(path)
    st = UnitState(unit, NAME, path=path, installed=text is not None)
    if text is not None and spec is not None:
        st.current = text == systemd_unit(spec)
    props = _show(unit)
    if not props:
        st.detail = "systemctl --user show gave no answer"
        return st
    st.loaded = props.get("UnitFileState") == "enabled"
    st.running = props.get("ActiveState") == "active"
    pid = int(props.get("MainPID") or 0)
    st.pid = pid or None
    if props.get("ExecMainExitTimestamp"):
        st.last_exit = {
            "code": int(props.get("ExecMainStatus") or 0),
            "at": props["ExecMainExitTimestamp"],
        }
    st.detail = f"{props.get('ActiveState', '?')} ({props.get('SubState', '?')})"
    return st


def _ours(text: str | None) -> bool:
    return text is None or MARK in text


def install(spec: ServiceSpec, *, refresh: bool = False) -> Outcome:
    """Write, load and start the unit; ``refresh``: restart it even when the file is the
    same (its environment file changed)."""
    out = Outcome(spec.unit, NAME, "enabled")
    path, name = unit_file(spec.unit), SYSTEMD_NAMES[spec.unit]
    want, have = systemd_unit(spec), read_text(path)
    if not _ours(have):
        raise LaneboardError(
            "CONFLICT",
            f"{path} exists and was not written by laneboard",
            "move it away (or remove it) and enable again",
        )
    changed = have != want
    restart = changed or refresh
    if changed:
        write_text(path, want)
        out.files.append(path)
        _run(out, "daemon-reload")
    props = _show(spec.unit)
    enabled = props.get("UnitFileState") == "enabled"
    active = props.get("ActiveState") == "active"
    if not enabled:
        _run(out, "enable", name)
    if not active:
        _run(out, "start", name)
    elif restart:
        _run(out, "restart", name)  # a loaded unit is only read when it starts
    if have is not None and restart:
        out.action = "reloaded"
    elif have is not None and enabled and active:
        out.action = "already enabled"
    if spec.unit == "supervisor":
        out.warnings.extend(linger_warnings())
    return out


def _run(out: Outcome, *args: str) -> None:
    fix = ""
    if args[0] in ("enable", "start", "restart"):
        fix = f"see why with: journalctl --user -u {args[-1]}; or choose --scheduler cron"
    tools.must("systemctl", "--user", *args, fix=fix)
    out.commands.append(_ctl(*args))


def remove(unit: str) -> Outcome:
    out = Outcome(unit, NAME, "disabled")
    path, name = unit_file(unit), SYSTEMD_NAMES[unit]
    have = read_text(path)
    if have is None:
        out.action = "already disabled"
        return out
    if not _ours(have):
        raise LaneboardError(
            "CONFLICT", f"{path} was not written by laneboard", "remove it by hand if you meant to"
        )
    _run(out, "disable", "--now", name)
    os.remove(path)
    out.files.append(path)
    _run(out, "daemon-reload")
    return out


def linger_warnings() -> list[str]:
    user = os.environ.get("USER") or getpass.getuser()
    got = tools.run("loginctl", "show-user", user, "--property=Linger", "--value")
    if got.ok and got.out.strip() == "yes":
        return []
    why = "is off" if got.ok else "could not be read"
    return [
        f"systemd lingering {why} for {user}: the user manager stops at logout and the "
        f"supervisor with it; to keep it running: loginctl enable-linger {user}"
    ]


def plan(spec: ServiceSpec) -> tuple[dict[str, str], list[list[str]]]:
    name = SYSTEMD_NAMES[spec.unit]
    return {unit_file(spec.unit): systemd_unit(spec)}, [
        _ctl("daemon-reload"),
        _ctl("enable", name),
        _ctl("start", name),
    ]


def describe() -> dict[str, Any]:
    return {"unit_dir": unit_dir()}
