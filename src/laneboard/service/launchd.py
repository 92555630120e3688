"""launchd agents: ``~/Library/LaunchAgents/local.laneboard.{supervisor,server}.plist``."""

from __future__ import annotations

import os
import re
import sys

from laneboard.errors import LaneboardError
from laneboard.service import tools
from laneboard.service.render import LAUNCHD_LABELS, launchd_plist
from laneboard.service.spec import ServiceSpec
from laneboard.service.state import Outcome, UnitState

NAME = "launchd"


def agent_dir() -> str:
    return os.path.join(os.path.expanduser("~"), "Library", "LaunchAgents")


def plist_file(unit: str) -> str:
    return os.path.join(agent_dir(), LAUNCHD_LABELS[unit] + ".plist")


def domain() -> str:
    return f"gui/{os.getuid()}"


def target(unit: str) -> str:
    return f"{domain()}/{LAUNCHD_LABELS[unit]}"


def available() -> tuple[bool, str]:
    if sys.platform != "darwin" and not os.environ.get("LANEBOARD_SERVICE_TOOLS"):
        return False, "launchd runs on macOS only"
    if tools.find("launchctl") is None:
        return False, "launchctl is not available"
    return True, ""


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _print(unit: str) -> dict[str, str] | None:
    """``launchctl print``'s top-level ``key = value`` lines; None when not loaded."""
    got = tools.run("launchctl", "print", target(unit))
    if not got.ok:
        return None
    found: dict[str, str] = {}
    for line in got.out.splitlines():
        m = re.match(r"^\t?(\w[\w ]*?) = (.*)$", line)
        if m and m.group(1) not in found:
            found[m.group(1)] = m.group(2).strip()
    return found


def status(unit: str, spec: ServiceSpec | None) -> UnitState:
    path = plist_file(unit)
    have = _read(path)
    st = UnitState(unit, NAME, path=path, installed=have is not None)
    if have is not None and spec is not None:
        st.current = have == launchd_plist(spec)
    info = _print(unit)
    st.loaded = info is not None
    if info is None:
        st.running, st.detail = False, "not loaded"
        return st
    st.running = info.get("state") == "running"
    pid = info.get("pid", "")
    st.pid = int(pid) if pid.isdigit() else None
    code = info.get("last exit code", "")
    if code.lstrip("-").isdigit():
        st.last_exit = {"code": int(code), "at": None}
    st.detail = info.get("state", "loaded")
    return st


def _run(out: Outcome, *args: str) -> None:
    got = tools.run("launchctl", *args)
    if not got.ok:
        fix = "run it from a GUI login session, or choose --scheduler cron"
        if "Bootstrap failed: 5" not in got.text() and "Input/output error" not in got.text():
            fix = f"run it by hand to see why: launchctl {' '.join(args)}"
        raise LaneboardError(
            "SERVICE_FAILED", f"launchctl {' '.join(args)} failed: {got.text()}", fix
        )
    out.commands.append(["launchctl", *args])


def install(spec: ServiceSpec, *, refresh: bool = False) -> Outcome:
    """Write and bootstrap the agent; ``refresh``: reload it even when the plist is the
    same (its environment file changed)."""
    out = Outcome(spec.unit, NAME, "enabled")
    path = plist_file(spec.unit)
    want, have = launchd_plist(spec), _read(path)
    changed = have != want
    if changed:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "wb") as fh:
            fh.write(want)
        os.replace(path + ".tmp", path)
        out.files.append(path)
    loaded = _print(spec.unit) is not None
    if loaded and (changed or refresh):  # a loaded job keeps what it was bootstrapped with
        _run(out, "bootout", target(spec.unit))
        loaded = False
        out.action = "reloaded"
    if not loaded:
        _run(out, "bootstrap", domain(), path)
    else:
        out.action = "already enabled"
    return out


def remove(unit: str) -> Outcome:
    out = Outcome(unit, NAME, "disabled")
    path = plist_file(unit)
    loaded = _print(unit) is not None
    if loaded:
        _run(out, "bootout", target(unit))
    if os.path.exists(path):
        os.remove(path)
        out.files.append(path)
    if not loaded and not out.files:
        out.action = "already disabled"
    return out


def plan(spec: ServiceSpec) -> tuple[dict[str, str], list[list[str]]]:
    path = plist_file(spec.unit)
    return {path: launchd_plist(spec).decode()}, [["launchctl", "bootstrap", domain(), path]]
