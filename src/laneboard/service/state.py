"""What enable, disable and status report, the same for every scheduler."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class UnitState:
    unit: str
    scheduler: str
    path: str | None = None  # the file enable writes
    installed: bool = False  # that file (or the cron block) is there
    current: bool | None = None  # it matches what enable would write now
    loaded: bool | None = None  # the scheduler will run it (enabled / bootstrapped)
    running: bool | None = None  # a process of it runs now (None: cron has none)
    pid: int | None = None
    last_exit: dict[str, Any] | None = None  # {"code": int, "at": str | None}
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Outcome:
    unit: str
    scheduler: str
    action: str  # enabled | already enabled | reloaded | disabled | already disabled | print
    files: list[str] = field(default_factory=list)  # written or removed
    commands: list[list[str]] = field(default_factory=list)  # scheduler commands run
    warnings: list[str] = field(default_factory=list)
    preview: dict[str, str] = field(default_factory=dict)  # --print: path -> content
    status: UnitState | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.to_dict() if self.status else None
        return out


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def write_text(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
