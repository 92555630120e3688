"""``LineProcess.kill`` stops the whole process group, with real processes.

An agent is started with a grandchild in its process group (a CLI's helper, a shell a
tool ran). SIGTERM goes to the group; ``kill`` returns only once nothing of the group
runs, and SIGKILLs whatever ignored SIGTERM for longer than the grace.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from tests.supervisor.helpers import wait_for

from laneboard.agents.procs import LineProcess, group_running, pid_alive

# the grandchild: installs its SIGTERM behaviour, says so to its parent, then waits
GRAND = """
import os, signal, sys, time
mode, mark = sys.argv[1], sys.argv[2]
def on_term(*_):
    open(mark, "w").write("terminated")
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore" else on_term)
print("ready", flush=True)
time.sleep(120)
"""

# the agent: the same for itself, then starts the grandchild (same process group) and
# prints both pids once the grandchild is ready
AGENT = """
import os, signal, subprocess, sys, time
mode, grand_mode, mark, grand_mark, grand = sys.argv[1:6]
def on_term(*_):
    open(mark, "w").write("terminated")
    os._exit(0)
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "graceful":
    signal.signal(signal.SIGTERM, on_term)
child = subprocess.Popen(
    [sys.executable, "-c", grand, grand_mode, grand_mark], stdout=subprocess.PIPE
)
assert child.stdout is not None and child.stdout.readline() == b"ready\\n"
print(os.getpid(), child.pid, flush=True)
time.sleep(120)
"""


def _start(tmp_path: Path, mode: str, grand_mode: str) -> tuple[LineProcess, int, int]:
    proc = LineProcess(
        [
            sys.executable,
            "-c",
            AGENT,
            mode,
            grand_mode,
            str(tmp_path / "agent.mark"),
            str(tmp_path / "grand.mark"),
            GRAND,
        ],
        cwd=str(tmp_path),
        env={"PATH": "/usr/bin:/bin"},
        stderr_path=str(tmp_path / "stderr.log"),
    )
    line = proc.lines.get(timeout=60)
    assert line is not None, (tmp_path / "stderr.log").read_text()
    agent, grand = (int(x) for x in line.split())
    assert agent == proc.pid and pid_alive(grand) and group_running(proc.pid)
    return proc, agent, grand


CASES = {
    # agent mode, grandchild mode, the agent's exit, which of them exited on SIGTERM
    "agent and grandchild ignore SIGTERM: both are SIGKILLed": (
        "ignore", "ignore", -signal.SIGKILL, set(),
    ),
    "the agent exits on SIGTERM, its grandchild ignores it: the grandchild is SIGKILLed": (
        "default", "ignore", -signal.SIGTERM, set(),
    ),
    "the agent ignores SIGTERM, its grandchild exits on it": (
        "ignore", "graceful", -signal.SIGKILL, {"grand"},
    ),
    "both end on SIGTERM: nothing is SIGKILLed": ("graceful", "graceful", 0, {"agent", "grand"}),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_kill_waits_for_the_whole_group(
    tmp_path: Path, case: tuple[str, str, int, set[str]]
) -> None:
    mode, grand_mode, exit_code, terminated = case
    proc, agent, grand = _start(tmp_path, mode, grand_mode)
    try:
        proc.kill(grace_s=0.5 if terminated != {"agent", "grand"} else 60)
        # kill has returned: nothing of the group may still run
        assert not group_running(proc.pid)
        assert not pid_alive(agent) and not pid_alive(grand)
        assert proc.proc.returncode == exit_code
        marks = {n for n in ("agent", "grand") if (tmp_path / f"{n}.mark").exists()}
        assert marks == terminated
    finally:
        if group_running(proc.pid):  # only after a failed assertion
            proc.kill(grace_s=0)


def test_kill_after_the_agent_is_gone_still_stops_its_grandchild(tmp_path: Path) -> None:
    """The agent died on its own (SIGKILL): kill() still ends what it left running."""
    import os

    proc, agent, grand = _start(tmp_path, "ignore", "graceful")
    os.kill(agent, signal.SIGKILL)
    assert proc.proc.wait(timeout=60) == -signal.SIGKILL
    assert pid_alive(grand)
    proc.kill(grace_s=60)
    assert not pid_alive(grand) and not group_running(proc.pid)
    assert (tmp_path / "grand.mark").read_text() == "terminated"  # SIGTERM, not SIGKILL


def test_close_ends_what_an_agent_left_running_when_it_exits(tmp_path: Path) -> None:
    """A session closed by EOF: the agent exits, the grandchild it left is terminated."""
    agent_src = AGENT.replace("time.sleep(120)", "sys.stdin.read()")  # exits at EOF
    proc = LineProcess(
        [sys.executable, "-c", agent_src, "default", "graceful", "-", str(tmp_path / "g"), GRAND],
        cwd=str(tmp_path),
        env={"PATH": "/usr/bin:/bin"},
        stderr_path=None,
    )
    line = proc.lines.get(timeout=60)
    assert line is not None
    _agent, grand = (int(x) for x in line.split())
    proc.close()
    assert proc.proc.returncode == 0  # it exited on its own
    assert not pid_alive(grand) and not group_running(proc.pid)
    assert (tmp_path / "g").read_text() == "terminated"


def test_a_process_that_wrote_more_than_was_read_is_let_go_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines are read only a few ahead of the turn; an agent that wrote many more before
    it was stopped does not keep its reader, or the stop, waiting for someone to read
    them (were the stop to wait for the reader, it would wait out ``READER_JOIN_S``)."""
    import threading

    from laneboard.agents import procs

    monkeypatch.setattr(procs, "READER_JOIN_S", 3600.0)
    script = "import sys\nfor i in range(1000): print(i, flush=True)\nimport time; time.sleep(600)"
    proc = LineProcess([sys.executable, "-c", script], cwd=str(tmp_path),
                       env={"PATH": "/usr/bin:/bin"}, stderr_path=None)  # fmt: skip
    wait_for(lambda: proc.lines.full(), what="the read-ahead full")
    stop = threading.Thread(target=proc.kill, kwargs={"grace_s": 5})
    stop.start()
    stop.join(60)
    assert not stop.is_alive(), "the stop waited for its reader"
    assert not proc._reader.is_alive()


def test_the_end_of_the_output_reaches_a_turn_still_reading_after_a_stop(
    tmp_path: Path,
) -> None:
    """A turn stopped by a person reads on until the output's end: that end (``None``) is
    queued even when the output closes only after the stop let the process go (here a
    process of another session holds it two seconds more)."""
    script = (
        "import subprocess, sys\n"
        "subprocess.Popen(['sleep', '2'], start_new_session=True)\n"
        "print('ready', flush=True)\nimport time; time.sleep(600)"
    )
    proc = LineProcess([sys.executable, "-c", script], cwd=str(tmp_path),
                       env={"PATH": "/usr/bin:/bin"}, stderr_path=None)  # fmt: skip
    assert proc.lines.get(timeout=30) == "ready\n"
    proc.kill(grace_s=5)
    assert proc.lines.get(timeout=30) is None  # the turn reading it learns the output ended
