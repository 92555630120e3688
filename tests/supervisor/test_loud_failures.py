"""Loud failure, through the real ``lb``: ``allow_all_tools`` without a written reason stops
``lb start`` before any agent runs; a role no available kind can run is one rate-limited log
line, a line in ``lb status``, an ``lb doctor`` attention reason and an alert to
``--notify``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.supervisor.helpers import RealNowClock, wait_for

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store

LB = [sys.executable, "-m", "laneboard.cli.main"]


def lb_env(tmp_path: Path, url: str, config: str, path: str) -> dict[str, str]:
    cfg = tmp_path / "xdg-config" / "laneboard"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.toml").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(
        PATH=path,
        HOME=str(tmp_path / "home"),
        LANEBOARD_DATABASE_URL=url,
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
    )
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def spawn_start(env: dict[str, str]) -> subprocess.Popen[str]:
    """``lb start --agent scripted`` ticking every second, its stderr kept to assert on."""
    return subprocess.Popen(
        [*LB, "start", "--agent", "scripted", "--tick-interval", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def a_board(tmp_path: Path, repo: Path) -> str:
    url = f"sqlite:///{tmp_path / 'board.db'}"
    store = open_store(url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "LOUD", path=str(repo))
    board.create_card(human(), "LOUD", "waits for a kind")
    store.close()
    return url


def bare_path() -> str:
    """This PATH without any directory holding an agent CLI."""
    dirs = os.environ["PATH"].split(os.pathsep)
    kinds = ("claude", "codex", "pi")
    return os.pathsep.join(
        d for d in dirs if not any(os.path.exists(os.path.join(d, k)) for k in kinds)
    )


def test_allow_all_tools_without_a_reason_stops_lb_start(tmp_path: Path, repo: Path) -> None:
    url = a_board(tmp_path, repo)
    config = "[supervisor.agent_kinds.claude]\nallow_all_tools = true\n"
    env = lb_env(tmp_path, url, config, os.environ["PATH"])
    state = tmp_path / "state"
    out = subprocess.run(
        [*LB, "start", "--state-dir", str(state), "--agent", "scripted", "--for-seconds", "30"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error CONFIG_INVALID"), out.stderr
    assert "claude" in lines[0] and "allow_all_tools_reason" in out.stderr
    assert not (state / "agents" / "homes").exists()  # no agent ever started
    store = open_store(url, RealNowClock())
    with store.read() as tx:
        assert tx.scalar("SELECT count(*) AS n FROM turns") == 0
        assert tx.scalar("SELECT count(*) AS n FROM queue") == 0
    store.close()


def test_a_role_with_no_available_kind_is_loud_everywhere(tmp_path: Path, repo: Path) -> None:
    url = a_board(tmp_path, repo)
    path = bare_path()
    env = lb_env(tmp_path, url, '[supervisor]\ndefault_agent = "claude"\n', path)
    notified = tmp_path / "notified.jsonl"
    notify = tmp_path / "notify.sh"
    notify.write_text(f"#!/bin/sh\ncat >> {notified}\necho >> {notified}\n")
    notify.chmod(0o755)
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [*LB, "start", "--state-dir", str(state), "--for-seconds", "120", "--notify", str(notify),
         "--tick-interval", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    log = state / "supervisor.log"
    assert proc.stderr is not None
    try:
        wait_for(lambda: proc.poll() is None and notified.exists() and "agent_unavailable" in notified.read_text(),
                 timeout=90, what="the alert sent to --notify")  # fmt: skip
        time.sleep(3)  # several more ticks (tick interval 1 s): the log line is not repeated
        status = subprocess.run([*LB, "status"], env=env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        doctor = subprocess.run([*LB, "doctor"], env=env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "SANDBOX" not in err, err
    said = [
        line
        for line in log.read_text().splitlines()
        if "this machine claims none of its cards" in line
    ]
    assert len(said) == 1, said
    assert "role worker cannot run" in said[0] and "level=error" in said[0]
    assert "role worker: NONE" in status.stdout, status.stdout
    assert "role worker has no available agent kind" in doctor.stdout, doctor.stdout
    sent = [json.loads(line) for line in notified.read_text().splitlines() if line.strip()]
    unavailable = [s for s in sent if "agent_unavailable" in json.dumps(s)]
    assert len(unavailable) == 1, sent
    store = open_store(url, RealNowClock())
    with store.read() as tx:
        keys = [r["dedup_key"] for r in tx.all("SELECT dedup_key FROM alerts")]
        assert "agent_unavailable|worker" in keys
        assert tx.scalar("SELECT count(*) AS n FROM turns") == 0
    assert Board(store).get("LOUD-1").status.value == "todo"  # unclaimed, not lost
    store.close()
