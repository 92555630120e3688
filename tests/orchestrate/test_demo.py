"""``lb demo --orchestrate``: the goal-driven mode end to end on a temporary repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_the_orchestrated_demo_publishes_its_patch(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(TMPDIR=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "xdg"))
    out = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "demo", "--orchestrate", "--json"],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["ok"] and not s["kept"] and not Path(s["repo"]).exists()
    assert [(a["name"], a["revision"], a["state"]) for a in s["plan"]] == [
        ("producer", 1, "completed"),
        ("consumer", 2, "completed"),
    ]
    assert [r["state"] for r in s["plan"][1]["revisions"]] == ["superseded", "verified"]
    assert [c["exit_code"] for c in s["checks"]] == [0]
    assert "+    return rec['key']" in s["patch"] and "rec['id']" not in s["patch"]
    assert "consumer asks: which field" in out.stderr  # the plan and its events as it runs
