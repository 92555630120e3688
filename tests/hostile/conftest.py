"""The hostile-agent suite reuses the real-CLI kit of the adapter tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from agent_kit import rerun_codex_once

    rerun_codex_once(items)
