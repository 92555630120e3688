"""``lb demo`` shows its three cards as one run and prints the run's final convergence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_lb_demo_prints_its_run_and_convergence(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "demo", "--timeout", "240"],
        capture_output=True, text=True, timeout=280, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("run 1: greet, add and print")
    final = [ln for ln in lines if ln.startswith("run 1 (")]
    assert final == [
        "run 1 (greet, add and print: three cards as one run): completed, convergence "
        "completed / all_tasks_and_proposals_terminal"
    ]
    assert "demo finished: every card landed" in out.stdout
