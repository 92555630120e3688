"""Reading the process logs for ``lb logs``: logfmt parsing, a card filter, following.

Files are read oldest first (``supervisor.log.5`` … ``supervisor.log``); lines of several
processes are merged by their time. Following reads what is appended and reopens a file
the writer rotated.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from laneboard.supervisor.logs import PROCESSES, process_log

_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')
CARD_FIELDS = ("card", "ref", "review_of")


def parse(line: str) -> dict[str, str]:
    """The fields of one logfmt line (quoted values unescaped)."""
    out: dict[str, str] = {}
    for key, raw in _PAIR.findall(line):
        if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
            raw = raw[1:-1].replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        out[key] = raw
    return out


def about_card(fields: dict[str, str], ref: str) -> bool:
    if any(fields.get(k) == ref for k in CARD_FIELDS):
        return True
    return re.search(rf"(?<![\w-]){re.escape(ref)}(?![\w-])", fields.get("msg", "")) is not None


@dataclass(frozen=True)
class Line:
    process: str
    text: str
    fields: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"process": self.process, **self.fields}


def files_of(state_dir: str, process: str) -> list[str]:
    """A process's log files, oldest first."""
    live = process_log(state_dir, process)
    rotated = [p for p in glob.glob(live + ".*") if p.rsplit(".", 1)[1].isdigit()]
    rotated.sort(key=lambda p: -int(p.rsplit(".", 1)[1]))
    return [*rotated, live] if os.path.exists(live) else rotated


def _lines(path: str, process: str, upto: int | None = None) -> Iterator[Line]:
    try:
        with open(path, "rb") as fh:
            data = fh.read() if upto is None else fh.read(upto)
    except FileNotFoundError:
        return
    for raw in data.decode("utf-8", "replace").split("\n"):
        if raw:
            yield Line(process, raw, parse(raw))


def read(
    state_dir: str,
    processes: Iterable[str] = PROCESSES,
    *,
    card: str | None = None,
    upto: dict[str, int] | None = None,
) -> list[Line]:
    """Every kept line of ``processes``, merged by time, optionally about one card.

    ``upto`` stops each live file at a byte offset (where a ``Follower`` took over).
    """
    found: list[Line] = []
    for process in processes:
        live = process_log(state_dir, process)
        for path in files_of(state_dir, process):
            limit = (upto or {}).get(process) if path == live else None
            found.extend(_lines(path, process, limit))
    if card:
        found = [line for line in found if about_card(line.fields, card)]
    found.sort(key=lambda line: line.fields.get("time", ""))  # stable: file order within a second
    return found


class Follower:
    """Lines appended to one process's live log since it was opened; survives rotation."""

    def __init__(self, state_dir: str, process: str) -> None:
        self.path = process_log(state_dir, process)
        self.process = process
        self._fh: Any = None
        self._inode: int | None = None
        self._partial = ""
        self._open(at_end=True)
        self.start = self._fh.tell() if self._fh is not None else 0

    def _open(self, *, at_end: bool) -> None:
        try:
            fh = open(self.path, encoding="utf-8", errors="replace")  # noqa: SIM115
        except FileNotFoundError:
            self._fh, self._inode = None, None
            return
        if at_end:
            fh.seek(0, os.SEEK_END)
        self._fh, self._inode = fh, os.fstat(fh.fileno()).st_ino

    def poll(self) -> list[Line]:
        out: list[Line] = []
        if self._fh is not None:
            out.extend(self._drain())
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            return out
        if inode != self._inode:  # rotated (or created): read the new file from its start
            if self._fh is not None:
                self._fh.close()
            self._partial = ""
            self._open(at_end=False)
            out.extend(self._drain())
        return out

    def _drain(self) -> list[Line]:
        chunk = self._fh.read()
        if not chunk:
            return []
        text = self._partial + chunk
        *complete, self._partial = text.split("\n")
        return [Line(self.process, t, parse(t)) for t in complete if t]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def followers(state_dir: str, processes: Iterable[str]) -> list[Follower]:
    return [Follower(state_dir, p) for p in processes]


def follow(
    followers: list[Follower],
    emit: Callable[[Line], None],
    *,
    card: str | None = None,
    stop: Callable[[], bool],
    wait: Callable[[float], object],
    interval: float = 0.25,
) -> None:
    """Call ``emit`` for each new line until ``stop()``; ``wait`` sleeps between reads."""
    try:
        while not stop():
            for f in followers:
                for line in f.poll():
                    if card is None or about_card(line.fields, card):
                        emit(line)
            wait(interval)
    finally:
        for f in followers:
            f.close()


def agent_logs(state_dir: str, card: str) -> list[str]:
    """The agent sessions' own stderr files for ``card`` (raw output, not logfmt)."""
    pattern = os.path.join(state_dir, "agents", "stderr", f"*{card}*.log")
    return sorted(
        p
        for p in glob.glob(pattern)
        if re.search(rf"(?<![\w]){re.escape(card)}(?![\w])", os.path.basename(p))
    )
