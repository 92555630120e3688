"""Every picture docs/dashboard.md shows is one the browser tests write, and is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_picture_in_the_docs_is_written_by_a_test() -> None:
    doc = (ROOT / "docs" / "dashboard.md").read_text()
    shown = set(re.findall(r"images/([a-z0-9-]+)\.png", doc))
    written: set[str] = set()
    for test in (ROOT / "tests" / "server").glob("test_*.py"):
        written |= set(re.findall(r'shot\([^)]*?"([a-z0-9-]+)"', test.read_text(), re.S))
    assert shown, "the page shows no pictures"
    assert shown <= written, f"pictures no test writes: {sorted(shown - written)}"
    for name in shown:
        png = ROOT / "docs" / "images" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
