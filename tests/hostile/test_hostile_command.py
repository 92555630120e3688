"""The same escapes by a ``command`` agent from a shell script, through the supervisor;
secrets an agent prints are found nowhere in the database, the log or HTTP responses;
a turn that changes the user's checkout (the sandbox off) holds the card, and so does a
turn whose lane changes leave the card's ``allowed_paths``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile_kit import Targets, checkout_hash
from tests.cli_kit import CONNECT
from tests.supervisor.helpers import RealNowClock, Running, config, settled, wait_for

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.workspace.git import ensure_excluded

SECRET = "sk-ant-api03-very-secret-value-0123456789"


@pytest.fixture
def world(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    home = tmp_path / "home"
    home.mkdir()
    # the board inside the checkout, which the agent may read: only masking hides it (the
    # test's /tmp is replaced by the session's own in the sandbox)
    (repo / ".laneboard").mkdir()
    outside = tmp_path / "beside-the-lane"
    outside.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    ensure_excluded(str(repo))
    return {"home": home, "outside": outside, "repo": repo, "tmp": tmp_path}


def database(world: dict[str, Path]) -> Path:
    return world["repo"] / ".laneboard" / "board.db"


def run_card(
    world: dict[str, Path], script: str, card_kw: dict[str, Any] | None = None, **cfg: object
) -> tuple[Board, str, str]:
    tmp = world["tmp"]
    url = f"sqlite:///{database(world)}"
    (tmp / "bin").mkdir(exist_ok=True)
    agent = tmp / "bin" / "agent.sh"  # the agent's install: readable in its sandbox
    agent.write_text("#!/bin/sh\n" + script)
    agent.chmod(0o755)
    store = open_store(url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "H", path=str(world["repo"]))
    other = board.create_card(human(), "H", "another card", assignee="nobody").ref
    card = board.create_card(
        human(), "H", "hostile", **{"acceptance_mode": "off", **(card_kw or {})}
    ).ref
    settings = config(
        tmp,
        default_agent="command",
        agent_kinds={"command": {"template": f"{agent} {{card}}"}},
        **cfg,
    )
    with Running(url, settings, RealNowClock()):
        wait_for(lambda: _turns(store) >= 1 and settled(store), timeout=90, what="the hostile turn")
    return board, card, other


def _turns(store) -> int:  # type: ignore[no-untyped-def]
    with store.read() as tx:
        return int(tx.scalar("SELECT count(*) AS n FROM turns WHERE outcome <> 'running'") or 0)


def test_a_command_agent_cannot_escape(world: dict[str, Path]) -> None:
    repo, tmp = world["repo"], world["tmp"]
    before = checkout_hash(repo)
    targets = Targets(repo, world["outside"], world["home"], database(world),
                      tmp / "state", other_card="H-1")  # fmt: skip
    board, card, other = run_card(world, targets.script() + "\nexit 0\n")
    assert checkout_hash(repo) == before
    assert subprocess.run(["git", "log", "--format=%s"], cwd=repo, capture_output=True,
                          text=True).stdout.split("\n")[0] == "initial"  # fmt: skip
    assert not (world["outside"] / "outside.txt").exists()
    assert not (world["home"] / ".bashrc").exists()
    assert board.comments(other) == [] and board.get(other).status.value == "todo"
    assert "junk" not in (tmp / "state" / "supervisor.log").read_text().splitlines()
    # nothing reached the checkout (a card that never delivers is held for that alone)
    assert board.get(card).meta.get("hold_cycle") in (None, "no_delivery")
    assert not targets.stole_the_database(repo / ".worktrees" / card)
    with board.store.read() as tx:  # the DELETE never reached the board
        assert tx.scalar("SELECT count(*) AS n FROM cards") == 2


def test_a_secret_printed_by_an_agent_is_stored_nowhere(world: dict[str, Path]) -> None:
    script = (
        'lb card comment "$1" "my key is $ANTHROPIC_API_KEY and my token $LANEBOARD_TOKEN"\n'
        'echo "auth failed for key $ANTHROPIC_API_KEY (token $LANEBOARD_TOKEN)" >&2\nexit 3\n'
    )
    board, card, _ = run_card(world, script)
    tmp = world["tmp"]
    db = database(world).read_bytes()
    for suffix in ("-wal", "-shm"):
        extra = database(world).with_name(f"board.db{suffix}")
        if extra.exists():
            db += extra.read_bytes()
    assert SECRET.encode() not in db
    assert b"lbt_" not in db.replace(b"lbt_***", b"")
    logs = b"".join(p.read_bytes() for p in (tmp / "state").rglob("*.log"))
    assert SECRET.encode() not in logs
    comments = [c.body for c in board.comments(card)]
    assert any("my key is ***" in body for body in comments), comments
    from starlette.testclient import TestClient

    from laneboard.server.app import create_app

    app = create_app(board.store, local_user="alice")
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000)) as http:
        pages = (f"/api/v1/cards/{card}/comments", "/api/v1/events", f"/api/v1/cards/{card}",
                 "/api/v1/status", "/", f"/cards/{card}", f"/ui/cards/{card}")  # fmt: skip
        for path in pages:
            body = http.get(path, params={"follow": "false"} if "events" in path else None)
            assert body.status_code == 200, (path, body.status_code)
            assert SECRET not in body.text, path
            assert "lbt_" not in body.text.replace("lbt_***", ""), path
    # the agent's error was stored and shown, redacted (the check above is not vacuous)
    with board.store.read() as tx:
        errors = [r["error"] or "" for r in tx.all("SELECT error FROM turns")]
    assert any("auth failed for key ***" in e for e in errors), errors


def test_a_turn_that_changes_the_checkout_holds_the_card(world: dict[str, Path]) -> None:
    """Defence in depth: with the sandbox off, the post-turn check still catches it."""
    repo = world["repo"]
    script = f"git -C {repo} -c user.name=x -c user.email=x@y commit -q --allow-empty -m x\n"
    board, card, _ = run_card(
        world, script, sandbox="off", sandbox_reason="proving the post-turn check"
    )
    held = board.get(card)
    assert held.status.value == "blocked"
    assert held.meta["hold_reason"] == "boundary_violation"
    findings = [c.body for c in board.comments(card) if c.kind.value == "finding"]
    assert findings and "BOUNDARY_VIOLATION" in findings[0] and '"before"' in findings[0]
    with board.store.read() as tx:
        alerts = tx.all("SELECT dedup_key FROM alerts")
    assert [a["dedup_key"] for a in alerts] == [f"boundary_violation|{card}|r1"]
    assert os.path.isdir(repo / ".worktrees" / card)  # the lane is kept as evidence


@pytest.mark.parametrize("delivers", [False, True])
def test_a_turn_outside_allowed_paths_holds_the_card(
    world: dict[str, Path], delivers: bool
) -> None:
    """After every turn, not only at delivery: a lane change outside ``allowed_paths`` holds
    the card with a named reason; it is not landed and the lane is kept as evidence."""
    repo = world["repo"]
    script = "mkdir -p src docs && echo ok > src/app.py && echo sneaky > docs/notes.md\n"
    if delivers:
        script += 'lb card report "$1" --body done && lb card move "$1" in_review\n'
    before = subprocess.run(["git", "rev-parse", "main"], cwd=repo, capture_output=True,
                            text=True).stdout  # fmt: skip
    board, card, _ = run_card(
        world, script, card_kw={"allowed_paths": ["src"], "acceptance_mode": "auto"}
    )
    held = board.get(card)
    assert held.status.value == "blocked", held
    assert held.meta["hold_reason"] == "outside_allowed_paths"
    findings = [c.body for c in board.comments(card) if c.kind.value == "finding"]
    assert findings and findings[0].startswith("OUTSIDE_ALLOWED_PATHS")
    assert "docs/notes.md" in findings[0] and "src/app.py" not in findings[0].split("Evidence")[0]
    questions = [c.body for c in board.comments(card) if c.kind.value == "question"]
    assert any("docs/notes.md" in q for q in questions)
    lane = repo / ".worktrees" / card
    assert (lane / "docs" / "notes.md").read_text() == "sneaky\n"  # kept as it is
    after = subprocess.run(["git", "rev-parse", "main"], cwd=repo, capture_output=True,
                           text=True).stdout  # fmt: skip
    assert after == before and "merge_commit" not in held.meta  # never landed


def test_a_turn_inside_allowed_paths_is_not_held(world: dict[str, Path]) -> None:
    script = "mkdir -p src && echo ok > src/app.py\n"
    board, card, _ = run_card(world, script, card_kw={"allowed_paths": ["src"]})
    assert board.get(card).meta.get("hold_cycle") != "scope", board.get(card).meta
    assert [c for c in board.comments(card) if c.kind.value == "finding"] == []


FLOOD = (
    r"""
import os, select, sys, time
path = os.environ["LANEBOARD_URL"].removeprefix("unix:")
"""
    + CONNECT
    + r"""

kids = []
for _ in range(3):  # three processes of one sandbox: still one caller
    pid = os.fork()
    if pid:
        kids.append(pid)
        continue
    socks = [connect() for _ in range(100)]
    refused, until = 0, time.monotonic() + 30
    while socks and time.monotonic() < until:  # until no answer came for 3 s
        ready, _, _ = select.select(socks, [], [], 3.0)
        if not ready:
            break
        for s in ready:
            refused += s.recv(65536).startswith(b"HTTP/1.1 503")
            socks.remove(s)
    os.write(1, f"{refused}\n".encode())
    os._exit(0)
for pid in kids:
    os.waitpid(pid, 0)
"""
)


def test_a_flooding_agent_is_one_caller_of_the_board_socket(world: dict[str, Path]) -> None:
    """Every process of an agent's sandbox is one caller of the supervisor's socket: 300
    connections opened by three of its processes get one share; the rest are refused at
    once, so the supervisor never holds hundreds of threads and files for one agent."""
    from laneboard.supervisor.board_socket import PER_CALLER

    script = (  # the agent's own /tmp is private: the flood comes in on stdin
        f"n=$({sys.executable} - <<'EOF' | awk '{{s += $1}} END {{print s}}'\n{FLOOD}EOF\n)\n"
        'lb card comment "$1" "refused $n"\nlb card deliver "$1" --body done\n'
    )
    board, card, _ = run_card(world, script)
    said = [c.body for c in board.comments(card) if c.body.startswith("refused")]
    assert said and int(said[0].split()[1]) >= 300 - PER_CALLER, said


def test_an_agent_that_floods_its_output_costs_the_supervisor_little(
    world: dict[str, Path],
) -> None:
    """A sandboxed agent writing hundreds of megabytes to stdout and stderr: the supervisor
    keeps the end of each, never the whole, and the turn is recorded as usual."""
    import tracemalloc

    flood = "head -c 209715200 /dev/zero | tr '\\0' x"
    script = f"{flood}\n{flood} >&2\necho; echo the end\n"
    tracemalloc.start()
    try:
        board, _, _ = run_card(world, script)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 << 20, f"the supervisor held {peak >> 20} MB"
    with board.store.read() as tx:
        turns = tx.all("SELECT outcome, final_text FROM turns ORDER BY id")
    assert turns and all(t["outcome"] == "ok" for t in turns)  # it never delivers: run again
    assert turns[0]["final_text"].endswith("x\nthe end\n")
