"""laneboard's git never asks anything and never leaves a process behind.

A supervisor started from a terminal ran git (and the ssh git runs for a remote) in its own
session: ssh could ask on the terminal (an unknown host key, a key's passphrase), and the
supervisor waited for an answer nobody was asked for until git's timeout. The remote check
of ``lb project add --remote`` set its own ssh command, which replaced the user's own
``core.sshCommand`` (a deploy key, say) and refused a remote that works. A git that timed out
was killed alone, leaving its ssh running.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from laneboard.workspace import git as g
from laneboard.workspace import remote as rm

URL = "ssh://git@example.invalid/project.git"


def fake_ssh(tmp: Path, body: str) -> Path:
    """An ssh command (a shell script) that records what it saw into ``tmp/seen``."""
    script = tmp / "fake-ssh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_the_ssh_git_runs_has_no_terminal_to_ask_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "seen"
    ssh = fake_ssh(
        tmp_path,
        f'python3 -c "import os; print(os.getsid(0))" > {seen}\n'
        f'echo "$SSH_ASKPASS_REQUIRE" >> {seen}\nexit 255',
    )
    monkeypatch.setenv("GIT_SSH_COMMAND", str(ssh))
    got = g.git(str(tmp_path), "ls-remote", URL, check=False)
    assert not got.ok
    sid, ask = seen.read_text().split()
    assert int(sid) != os.getsid(0), "ssh ran in laneboard's session, with its terminal"
    assert ask == "never"


def test_the_remote_check_uses_the_users_own_ssh_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "seen"
    ssh = fake_ssh(tmp_path, f"echo used > {seen}\nexit 255")
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\tsshCommand = {ssh}\n")
    monkeypatch.delenv("GIT_SSH_COMMAND", raising=False)
    monkeypatch.delenv("GIT_SSH", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    problem = rm.check_remote(URL)
    assert problem is not None and problem.code == "REMOTE_UNREACHABLE"
    assert seen.read_text().strip() == "used", "the user's core.sshCommand was not used"


def test_a_git_that_times_out_takes_its_ssh_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    ssh = fake_ssh(tmp_path, f"sleep 300 &\necho $! > {pids}\nwait")
    monkeypatch.setenv("GIT_SSH_COMMAND", str(ssh))
    with pytest.raises(g.GitError, match="timed out"):  # long enough on a loaded machine
        g.git(str(tmp_path), "ls-remote", URL, timeout=5.0)  # for the ssh to start its child
    assert pids.exists(), "the ssh had not started its child when git timed out"
    child = int(pids.read_text())
    deadline = time.monotonic() + 30  # a killed process ends once it is scheduled again
    while _alive(child):
        assert time.monotonic() < deadline, f"the ssh git started still runs (pid {child})"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its parent's wait is left)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
