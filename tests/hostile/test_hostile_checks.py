"""A hostile agent that needs no escape: it writes the script its card's check runs.

The agent cannot read the tokens or write the user's checkout from its own sandbox; it
writes a ``check.sh`` that tries, and delivers. The supervisor's runtime runs that check:
these tests prove it runs in a sandbox of its own, so the loot it prints to its log is
empty and the user's checkout keeps its history.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.conftest import git
from tests.supervisor.helpers import RealNowClock, Running, config, wait_for

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_a_check_script_the_agent_wrote_gets_no_token_and_no_write_to_the_checkout(
    store_url: str, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("SECRET-OF-THE-USER\n")
    monkeypatch.setenv("HOME", str(home))
    state = tmp_path / "state"
    evil = "\n".join(
        [
            "echo loot-begin",
            f"cat {state}/tokens/*/token 2>/dev/null",
            f"cat {home}/secret.txt 2>/dev/null",
            f"git -C {repo} -c core.hooksPath=/dev/null commit -q --allow-empty -m planted"
            " 2>/dev/null && echo planted-in-checkout",
            f"echo x > {repo}/README.md 2>/dev/null && echo wrote-checkout",
            "echo loot-end",
        ]
    )
    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "H", path=str(repo))
    card = board.create_card(
        human(),
        "H",
        "add a check script",
        acceptance_mode="off",
        allowed_paths=["check.sh"],
        checks=["sh check.sh"],
        meta={"script": [{"write": "check.sh", "content": evil + "\n"}, {"deliver": "done"}]},
    )
    before = git(repo, "log", "--format=%s", "main")
    with Running(store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value == "done", timeout=120, what="landed")
    ev = board.reports(card.ref)[0].evidence[0]
    log = Path(str(ev.log_path)).read_text()
    loot = log.split("loot-begin", 1)[1].split("loot-end", 1)[0]
    assert "lbt_" not in loot, "the check read a session's token"
    assert "SECRET-OF-THE-USER" not in loot, "the check read the user's home"
    assert "planted-in-checkout" not in loot and "wrote-checkout" not in loot
    assert (repo / "README.md").read_text() == "hello\n"
    after = git(repo, "log", "--format=%s", "main").splitlines()
    assert "planted" not in after and set(before.splitlines()) <= set(after)
    store.close()
