"""Which kind runs a role, through the real supervisor: fake ``claude``, ``codex`` and ``pi``
binaries on PATH record their argv (inside the session's sandbox, into its agent home), so
each rule of the one precedence is seen by what was started — and by what was not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.supervisor.helpers import RealNowClock, wait_for

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store

FAKES = ("claude", "codex", "pi")
# each fake records that it was started (argv.log) and its whole argv (argv-<name>), in the
# agent home of its session, and fails
FAKE = (
    "#!/bin/sh\n"
    'name=$(basename "$0")\n'
    'echo "$name card=$LANEBOARD_CARD" >> "$HOME/argv.log"\n'
    'printf "%s\\0" "$@" > "$HOME/argv-$name"\n'
    "exit 1\n"
)
# how each kind's adapter starts its CLI (the first argument it passes)
FIRST_ARG = {"claude": "-p", "codex": "app-server", "pi": "--mode"}


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake agent CLIs first on PATH (``pi`` left out by tests that want it missing)."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    for name in FAKES:
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return bin_dir


def started(tmp_path: Path) -> dict[str, list[str]]:
    """Session home name → the argv lines its fake agent recorded."""
    homes = tmp_path / "state" / "agents" / "homes"
    out: dict[str, list[str]] = {}
    for log in sorted(homes.glob("*/argv.log")) if homes.is_dir() else []:
        out[log.parent.name] = log.read_text().splitlines()
    return out


def project_role(repo: Path, role_id: str, **fields: Any) -> None:
    roles = repo / ".laneboard" / "roles"
    roles.mkdir(parents=True, exist_ok=True)
    doc = {"schema": "laneboard.role/1", "id": role_id, "lanes": ["worker"], **fields}
    (roles / f"{role_id}.json").write_text(json.dumps(doc))


def lb_start(
    tmp_path: Path, url: str, settings: dict[str, Any], *args: str
) -> subprocess.Popen[bytes]:
    """The real ``lb start`` with ``settings`` in the user's config file."""
    cfg = tmp_path / "xdg-config" / "laneboard"
    cfg.mkdir(parents=True, exist_ok=True)
    lines = ["[supervisor]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items() if isinstance(v, str)]
    for key, table in settings.items():
        if isinstance(table, dict):
            lines += [f"[supervisor.{key}]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    (cfg / "config.toml").write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(
        LANEBOARD_DATABASE_URL=url,
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "start", "--state-dir",
         str(tmp_path / "state"), "--for-seconds", "120", *args],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def run_until_started(
    tmp_path: Path, repo: Path, card_kw: dict[str, Any], *args: str, **settings: Any
) -> tuple[dict[str, list[str]], list[str]]:
    """One card through ``lb start`` until a fake agent was started; returns what was
    started and the roles the queue dispatched for."""
    url = f"sqlite:///{tmp_path / 'board.db'}"
    store = open_store(url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "SEL", path=str(repo))
    board.create_card(human(), "SEL", "pick a kind", **card_kw)
    proc = lb_start(tmp_path, url, settings, *args)
    try:
        wait_for(lambda: bool(started(tmp_path)), timeout=90, what="a fake agent started")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    with store.read() as tx:
        roles = sorted({r["role"] for r in tx.all("SELECT role FROM queue")})
    store.close()
    return started(tmp_path), roles


def kinds(got: dict[str, list[str]], tmp_path: Path) -> set[str]:
    """The kinds started, each checked to have been started as its adapter starts it."""
    out = set()
    for name, lines in got.items():
        for kind in {line.split()[0] for line in lines}:
            raw = (tmp_path / "state" / "agents" / "homes" / name / f"argv-{kind}").read_bytes()
            argv = raw.decode().split("\0")
            assert argv[0] == FIRST_ARG[kind], argv
            assert name.startswith(f"{kind}-")  # the session home is the kind's
            out.add(kind)
    return out


def test_force_agent_puts_every_role_on_that_kind(fakes: Path, tmp_path: Path, repo: Path) -> None:
    project_role(repo, "builder", agent="claude")
    got, roles = run_until_started(
        tmp_path, repo, {"assignee": "builder"}, "--agent", "codex",
        role_agents={"builder": "pi"}, default_agent="claude",
    )  # fmt: skip
    assert kinds(got, tmp_path) == {"codex"}, got
    assert roles == ["builder"]
    assert all(name.startswith("codex-worker-SEL-1") for name in got)


def test_role_agents_overrides_a_shipped_role(fakes: Path, tmp_path: Path, repo: Path) -> None:
    got, roles = run_until_started(
        tmp_path, repo, {}, role_agents={"worker": "pi"}, default_agent="claude"
    )
    assert kinds(got, tmp_path) == {"pi"}, got
    assert roles == ["worker"]


def test_a_project_role_runs_on_the_kind_it_names(fakes: Path, tmp_path: Path, repo: Path) -> None:
    project_role(repo, "builder", agent="codex")
    got, roles = run_until_started(tmp_path, repo, {"assignee": "builder"}, default_agent="claude")
    assert kinds(got, tmp_path) == {"codex"}, got
    assert roles == ["builder"]  # the project's own role, from .laneboard/roles/


def test_a_role_whose_kind_is_missing_falls_to_default_agent(
    fakes: Path, tmp_path: Path, repo: Path
) -> None:
    (fakes / "pi").unlink()
    project_role(repo, "builder", agent="pi")
    got, _ = run_until_started(tmp_path, repo, {"assignee": "builder"}, default_agent="claude")
    assert kinds(got, tmp_path) == {"claude"}, got


def test_a_shipped_role_runs_on_default_agent(fakes: Path, tmp_path: Path, repo: Path) -> None:
    got, roles = run_until_started(tmp_path, repo, {}, default_agent="pi")
    assert kinds(got, tmp_path) == {"pi"}, got
    assert roles == ["worker"]
    line = next(iter(got.values()))[0]
    assert "card=SEL-1" in line  # the session was started for the card


@pytest.mark.parametrize("unassigned", ["", "builder"])
def test_the_role_that_claims_unassigned_cards_is_explicit(
    fakes: Path, tmp_path: Path, repo: Path, unassigned: str
) -> None:
    """A worker-lane role of the project's own does not take unassigned cards unless it is
    named ``unassigned_role``."""
    project_role(repo, "builder", agent="codex")
    got, roles = run_until_started(
        tmp_path, repo, {}, default_agent="claude", unassigned_role=unassigned
    )
    assert roles == [unassigned or "worker"]
    assert kinds(got, tmp_path) == ({"codex"} if unassigned else {"claude"}), got


def test_lb_start_agent_scripted_never_starts_another_kind(
    fakes: Path, tmp_path: Path, repo: Path
) -> None:
    """A rehearsal: every configured and found kind is ignored; the scripted agent delivers."""
    url = f"sqlite:///{tmp_path / 'board.db'}"
    store = open_store(url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "SEL", path=str(repo))
    project_role(repo, "builder", agent="codex")
    board.create_card(human(), "SEL", "unassigned", acceptance_mode="off")
    board.create_card(human(), "SEL", "a builder's", assignee="builder", acceptance_mode="off")
    store.close()
    proc = lb_start(
        tmp_path, url, {"default_agent": "claude", "role_agents": {"worker": "pi"}},
        "--agent", "scripted",
    )  # fmt: skip
    store = open_store(url, RealNowClock())
    board = Board(store)
    try:
        wait_for(
            lambda: all(board.get(r).status.value == "in_review" or board.get(r).status.value
                        == "done" for r in ("SEL-1", "SEL-2")),
            timeout=90, what="both cards delivered by the scripted agent",
        )  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    with store.read() as tx:
        kinds_run = {r["agent_kind"] for r in tx.all("SELECT agent_kind FROM turns")}
    store.close()
    assert kinds_run == {"scripted"}
    assert started(tmp_path) == {}  # no fake CLI was ever started
    homes = tmp_path / "state" / "agents" / "homes"
    # (a finished card's session files are pruned: only scripted homes can be left)
    leftover = [p.name for p in homes.iterdir()] if homes.exists() else []
    assert all(name.startswith("scripted-") for name in leftover), leftover
