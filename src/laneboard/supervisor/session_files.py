"""The files a card's agent sessions leave in the state directory, pruned when it ends.

Each worker or reviewer session of a card writes, under ``<state>/agents/``, its stderr
(``stderr/<lane>-<card>-r<round>.log``), its agent home (``homes/<kind>-<lane>-<card>``) and
its private temporary directory (``tmp/<kind>-<lane>-<card>``); the card's token lives in
``<state>/tokens/<card>/``. Once the card is done or canceled and nothing of it is queued,
the lanes pass removes them with the card's sessions (whose records are closed): a finished
card leaves no agent files behind. The director's files are its own and are kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from laneboard.supervisor.runtime import Runtime

CHUNK = 500  # card references looked up per statement
LANES = "(?:worker|reviewer)"
REF = r"(?P<ref>[A-Za-z][A-Za-z0-9_]*-\d+)"
PATTERNS = {
    ("agents", "stderr"): re.compile(rf"^{LANES}-{REF}-r\d+\.log$"),
    ("agents", "homes"): re.compile(rf"^[a-z]+-{LANES}-{REF}$"),
    # a check's temporary directory of one run ends in ``.<run>`` (``agents.check_sandbox``),
    # and a session's resolver file lies beside its directory (``agents.netns``)
    ("agents", "tmp"): re.compile(
        rf"^[a-z]+-{LANES}-{REF}(?:\.[A-Za-z0-9_]+)?(?:\.resolv\.conf)?$"
    ),
    ("tokens",): re.compile(rf"^{REF}$"),
}


def session_files(state_dir: str) -> dict[str, list[str]]:
    """Card reference → the session files and directories named for it."""
    out: dict[str, list[str]] = {}
    for parts, pattern in PATTERNS.items():
        folder = os.path.join(state_dir, *parts)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            m = pattern.match(name)
            if m:
                out.setdefault(m.group("ref"), []).append(os.path.join(folder, name))
    return out


def prune(rt: Runtime) -> list[str]:
    """Remove the session files of cards that ended; returns the references pruned."""
    files = session_files(rt.config.state_path())
    if not files:
        return []
    pruned = []
    refs = sorted(files)
    ended: list[str] = []
    with rt.store.autocommit() as tx:  # a reference of no card here: someone else's files
        for at in range(0, len(refs), CHUNK):
            ended += tx.ended_unqueued_refs(refs[at : at + CHUNK])
    for ref in ended:
        for path in files[ref]:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        pruned.append(ref)
    return pruned
