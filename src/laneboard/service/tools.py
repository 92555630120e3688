"""The schedulers' own commands (``systemctl``, ``loginctl``, ``launchctl``, ``crontab``).

``LANEBOARD_SERVICE_TOOLS`` names a directory to take them from instead of ``PATH``
(only from there: a missing tool is then "not available", never the machine's real one),
and ``LANEBOARD_CRONTAB_FILE`` a file that stands in for the user's crontab. Both exist
so the enable/disable/status paths can be exercised without touching this machine's
scheduler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from laneboard.errors import LaneboardError

TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def text(self) -> str:
        return " ".join((self.err or self.out).split())[:300]


def find(name: str) -> str | None:
    override = os.environ.get("LANEBOARD_SERVICE_TOOLS")
    if override:
        path = os.path.join(override, name)
        return path if os.access(path, os.X_OK) else None
    return shutil.which(name)


def run(name: str, *args: str, stdin: str | None = None) -> Result:
    path = find(name)
    if path is None:
        return Result(127, "", f"{name}: command not found")
    try:
        done = subprocess.run(
            [path, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Result(126, "", f"{name}: {exc}")
    return Result(done.returncode, done.stdout, done.stderr)


def must(name: str, *args: str, stdin: str | None = None, fix: str = "") -> Result:
    got = run(name, *args, stdin=stdin)
    if not got.ok:
        raise LaneboardError(
            "SERVICE_FAILED",
            f"{name} {' '.join(args)} failed (exit {got.code}): {got.text()}",
            fix or f"run it by hand to see why: {name} {' '.join(args)}",
        )
    return got


# -- the crontab -------------------------------------------------------------------------------
def crontab_file() -> str | None:
    return os.environ.get("LANEBOARD_CRONTAB_FILE") or None


def crontab_available() -> bool:
    return crontab_file() is not None or find("crontab") is not None


def read_crontab() -> str:
    path = crontab_file()
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""
    got = run("crontab", "-l")
    if got.ok:
        return got.out
    if "no crontab" in (got.err + got.out).lower():
        return ""  # no crontab yet: an empty one
    raise LaneboardError(
        "SERVICE_FAILED",
        f"crontab -l failed (exit {got.code}): {got.text()}",
        "check that cron is installed, or choose --scheduler systemd|launchd",
    )


def write_crontab(text: str) -> None:
    path = crontab_file()
    if path is not None:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
        return
    must("crontab", "-", stdin=text)
