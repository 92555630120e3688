"""``lb serve --port 0`` in tests: the system picks the port (no two workers race for
one), and the server's first line names it."""

from __future__ import annotations

import re
from pathlib import Path

SERVING = re.compile(r"^laneboard serving .* on (http://[^/\s]+)/$", re.M)


def served_url(log: Path) -> str | None:
    """The URL ``lb serve`` announced in its log, once it has."""
    try:
        found = SERVING.search(log.read_text(errors="replace"))
    except FileNotFoundError:
        return None
    return found.group(1) if found else None
