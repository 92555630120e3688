"""A stop signal that arrives while the supervisor's main thread writes a log line.

The signal's handler runs on the main thread between two of its bytecodes: if it took a
lock the interrupted code holds (the log's), the supervisor would wait on itself forever
and ignore every later signal — seen as an ``lb start`` that outlived its SIGTERM.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, signal, sys, time
from laneboard.store import open_store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Supervisor
from laneboard.supervisor.runtime import Runtime
from tests.supervisor.helpers import config

tmp = sys.argv[1]
cfg = config(__import__("pathlib").Path(tmp))
log = LogFile(os.path.join(tmp, "supervisor.log"))
rt = Runtime(open_store("sqlite:///" + os.path.join(tmp, "board.db")), cfg, "m", log)
sup = Supervisor(rt)
sup.install_signals()
with log._lock:  # the main thread is in the middle of a log line
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # bytecodes for the handler to run between
        time.sleep(0.001)
print("stopping" if sup.stop_event.wait(10) else "not stopped", flush=True)
"""


def test_a_stop_signal_during_a_log_line_stops_the_supervisor(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=root,
        env={"PYTHONPATH": f"{root}:{root / 'src'}", "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "stopping", out.stderr[-2000:]
    said = (tmp_path / "supervisor.log").read_text()
    assert "signal 15: shutting down" in said
