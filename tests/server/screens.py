"""Screenshots the Playwright tests write: always beside the test (``tmp_path``), and into
the directory ``LANEBOARD_SCREENSHOTS`` names when it is set, which is how the pictures in
docs/dashboard.md are made:

    LANEBOARD_SCREENSHOTS=docs/images python -m pytest tests/server/test_dashboard_views.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.sync_api import Page


def shot(page: Page, tmp_path: Path, name: str, *, full_page: bool = False) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 1000  # something was drawn
    target = os.environ.get("LANEBOARD_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / path.name)
    return path
