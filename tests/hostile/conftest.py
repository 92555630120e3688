"""The hostile-agent suite reuses the real-CLI kit of the adapter tests."""

from __future__ import annotations

import sys
from pathlib import Path

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))
