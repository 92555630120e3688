"""A card's checks run the agent's code: they run in the OS sandbox, not as the user.

A hostile agent needs no escape from its own sandbox when the runtime runs its code for
it: a ``conftest.py`` or a test script in the lane runs when the check does. These tests
deliver a card whose check tries what such code would — read the user's home, laneboard's
state and tokens, the SQLite board; write the user's checkout; reach a service on this
machine's loopback — and read what it managed from the check's log.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.workspace.helpers import claimed, deliver, project

from laneboard.agents.check_sandbox import for_config
from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.model import agent
from laneboard.errors import LaneboardError
from laneboard.store import Store
from laneboard.workspace.hooks import install

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not sys.platform.startswith("linux"),
    reason="needs bubblewrap",
)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP service on this machine's loopback; its port."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        yield int(srv.getsockname()[1])


def probe_check(
    *, secret: Path, token: Path, repo: Path, db: str | None, port: int, host_tmp: Path
) -> str:
    """One check that tries each thing and prints ``what=exit-status`` for each."""
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), 3)"
    parts = [
        f"cat {secret} >/dev/null 2>&1; echo home=$?",
        f"cat {token} >/dev/null 2>&1; echo token=$?",
        f"touch {repo}/planted 2>/dev/null; echo checkout=$?",
        "echo made > made-by-check.txt; echo lane=$?",
        f'{sys.executable} -c "{connect}" 2>/dev/null; echo loopback=$?',
        f"test -e {host_tmp}; echo host_tmp=$?",
        "echo lbvars=$(env | grep -c '^LANEBOARD_')",
    ]
    if db is not None:
        parts.append(f"test -s {db}; echo db=$?")
    return "; ".join(parts)


def results(log_path: str) -> dict[str, str]:
    text = Path(log_path).read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and " " not in line)


def setting(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A user's home with a secret, a state directory with a token, and LANEBOARD_ names
    in the environment: what a check must not see."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("the user's secret\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LANEBOARD_TOKEN", "lbt_should_not_reach_checks")
    state = tmp_path / "state"
    token = state / "tokens" / "P-9" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("lbt_another_sessions_token\n")
    return {"home": home, "secret": home / "secret.txt", "state": state, "token": token}


def sandboxed_board(store: Store, state: Path, **config: object) -> Board:
    cfg = SupervisorConfig(state_dir=str(state), **config)  # type: ignore[arg-type]
    return install(Board(store), checks=for_config(cfg, store.url))


def test_a_check_runs_in_the_sandbox_not_as_the_user(
    store: Store, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: int
) -> None:
    paths = setting(store, tmp_path, monkeypatch)
    board = sandboxed_board(store, paths["state"])
    project(board, repo)
    db = store.url.removeprefix("sqlite:///") if store.url.startswith("sqlite:///") else None
    host_tmp = tmp_path / "a-file-in-the-hosts-tmp"
    host_tmp.write_text("x\n")
    check = probe_check(
        secret=paths["secret"],
        token=paths["token"],
        repo=repo,
        db=db,
        port=listener,
        host_tmp=host_tmp,
    )
    card, lane = claimed(board, checks=[check])
    done = deliver(board, card)
    assert done.status.value == "in_review"
    ev = board.reports(card.ref)[0].evidence[0]
    seen = results(str(ev.log_path))
    assert seen["home"] != "0", "the check read the user's home"
    assert seen["token"] != "0", "the check read another session's token"
    assert seen["checkout"] != "0" and not (repo / "planted").exists()
    assert seen["lane"] == "0" and Path(lane, "made-by-check.txt").read_text() == "made\n"
    assert seen["host_tmp"] != "0", "the check's /tmp is the host's"
    if shutil.which("slirp4netns"):
        assert seen["loopback"] != "0", "the check reached a service on the host's loopback"
    if db is not None:
        assert seen["db"] != "0", "the check read the SQLite board"
    assert seen["lbvars"] == "0", "the check was given laneboard's settings"
    # its temporary directory is gone; its home is kept under the state directory
    assert os.listdir(paths["state"] / "agents" / "tmp") == []
    assert (paths["state"] / "agents" / "homes" / f"check-worker-{card.ref}").is_dir()


def test_a_variable_kept_from_agents_is_kept_from_checks(
    store: Store, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEPLOY_KEY", "kept-from-agents")
    monkeypatch.setenv("HARMLESS", "given")
    kinds = {"claude": {"secret_env": ["DEPLOY_KEY"]}}
    board = sandboxed_board(store, tmp_path / "state", agent_kinds=kinds)
    project(board, repo)
    card, _ = claimed(board, checks=['test -z "$DEPLOY_KEY" && test "$HARMLESS" = given'])
    assert deliver(board, card).status.value == "in_review"


def test_a_port_of_the_hosts_loopback_can_be_relayed_to_the_checks(
    store: Store, repo: Path, tmp_path: Path, listener: int
) -> None:
    if not shutil.which("slirp4netns"):
        pytest.skip("needs slirp4netns for a network of the check's own")
    board = sandboxed_board(store, tmp_path / "state", check_host_ports=(listener,))
    project(board, repo)
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), 3)"
    card, _ = claimed(board, checks=[f'{sys.executable} -c "{connect}"'])
    assert deliver(board, card).status.value == "in_review"


def test_checks_share_the_hosts_network_when_told(
    store: Store, repo: Path, tmp_path: Path, listener: int
) -> None:
    board = sandboxed_board(store, tmp_path / "state", check_network="host")
    project(board, repo)
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), 3)"
    card, _ = claimed(board, checks=[f'{sys.executable} -c "{connect}"'])
    assert deliver(board, card).status.value == "in_review"


def test_a_check_that_runs_too_long_in_the_sandbox_is_killed_with_what_it_started(
    store: Store, repo: Path, tmp_path: Path
) -> None:
    board = install(
        Board(store),
        checks=for_config(SupervisorConfig(state_dir=str(tmp_path / "state")), store.url),
    )
    project(board, repo, check_timeout=1)
    card, _ = claimed(board, checks=["sleep 60 & sleep 60; echo never"])
    worker = agent("worker", card.id, card.claim_epoch)
    board.report(worker, card.ref, "delivered")
    with pytest.raises(LaneboardError) as err:
        board.move(worker, card.ref, "in_review")
    assert err.value.code == "VERIFICATION_FAILED" and err.value.details["exit_code"] == 124
    assert os.listdir(tmp_path / "state" / "agents" / "tmp") == []


def test_no_sandbox_to_be_had_refuses_the_delivery_and_changes_nothing(
    store: Store, repo: Path, tmp_path: Path
) -> None:
    # sandbox-exec is macOS's: on Linux it is not installed
    board = sandboxed_board(store, tmp_path / "state", sandbox="sandbox-exec")
    project(board, repo)
    card, lane = claimed(board, checks=["touch ran.txt"])
    worker = agent("worker", card.id, card.claim_epoch)
    board.report(worker, card.ref, "delivered")
    before = board.get(card.ref)
    with pytest.raises(LaneboardError) as err:
        board.move(worker, card.ref, "in_review")
    assert err.value.code == "SANDBOX_UNAVAILABLE"
    assert "sandbox-exec is not installed" in err.value.message
    assert 'sandbox = "off"' in err.value.fix
    after = board.get(card.ref)
    assert after.status.value == "in_progress" and after.version == before.version
    assert not Path(lane, "ran.txt").exists()


def test_the_users_configuration_decides_and_off_runs_checks_as_the_user(
    store: Store, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config" / "laneboard"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        '[supervisor]\nsandbox = "off"\nsandbox_reason = "checks in a container already"\n'
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    outside = tmp_path / "outside.txt"
    board = install(Board(store))  # the gate reads the user's configuration
    project(board, repo)
    card, _ = claimed(board, checks=[f"touch {outside}"])
    assert deliver(board, card).status.value == "in_review"
    assert outside.exists()  # off: as the user, as the configuration says


def test_with_the_sandbox_on_by_default_a_check_cannot_write_outside_its_lane(
    store: Store, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no file: defaults
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    board = install(Board(store))
    project(board, repo)
    card, _ = claimed(board, checks=[f"touch {repo}/planted"])
    worker = agent("worker", card.id, card.claim_epoch)
    board.report(worker, card.ref, "delivered")
    with pytest.raises(LaneboardError) as err:
        board.move(worker, card.ref, "in_review")
    assert err.value.code == "VERIFICATION_FAILED"
    assert "checks run in the sandbox" in err.value.fix and "check_host_ports" in err.value.fix
    assert not (repo / "planted").exists()
    homes = tmp_path / "state" / "laneboard" / "agents" / "homes"
    assert (homes / f"check-worker-{card.ref}").is_dir()
