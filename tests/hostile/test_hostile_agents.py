"""The hostile-agent suite: the real Claude Code, Codex and Pi CLIs, driven by the scripted
model server through the real supervisor, try every escape as tool calls — a path outside
the lane, ``git -C <project> commit``, the project's hooks and config, laneboard's state and
tokens, laneboard's database file, another card through ``lb``, the user's home. Their tool boundary is turned off
(``allow_all_tools`` with a reason), so only the OS sandbox stands in the way. For each:
the attempt fails or has no effect, and the user's checkout is byte-identical."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from agent_kit import KINDS, Kind
from hostile_kit import Targets, checkout_files, checkout_hash
from model_server import ModelServer, Reply
from test_adapters_supervisor import Rig

from laneboard.config import SupervisorConfig
from laneboard.workspace.git import ensure_excluded


class HostileRig(Rig):
    def data_dir(self) -> Path:
        # inside the checkout, which the agent may read: only masking keeps the board out
        # of its sight (the test's /tmp is replaced by the session's own in the sandbox)
        return self.repo / ".laneboard"

    def config(self) -> SupervisorConfig:
        base = super().config()
        settings = {
            **self.kind.config(self.tmp),
            "allow_all_tools": True,
            "allow_all_tools_reason": "the hostile suite: only the OS sandbox may stop it",
        }
        return replace(base, agent_kinds={self.kind.name: settings})


@pytest.fixture
def server() -> Iterator[ModelServer]:
    srv = ModelServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, tmp_path: Path, server: ModelServer) -> Kind:
    home = tmp_path / "home"
    home.mkdir()
    return Kind(str(request.param), home, server)


@pytest.fixture
def hostile(
    kind: Kind, server: ModelServer, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HostileRig]:
    for key, value in kind.env().items():
        monkeypatch.setenv(key, value)
    rig = HostileRig(kind, server, repo, tmp_path)
    try:
        yield rig
    finally:
        server.release()
        rig.stop()
        rig.store.close()


def test_every_escape_fails_or_has_no_effect(hostile: HostileRig) -> None:
    rig, kind = hostile, hostile.kind
    outside = rig.tmp / "beside-the-lane"
    outside.mkdir()
    other = rig.card("another card", acceptance_mode="off", assignee="nobody")
    card = rig.card("hostile card", acceptance_mode="off")
    targets = Targets(
        repo=rig.repo,
        outside=outside,
        user_home=kind.home,
        db=rig.data_dir() / "board.db",
        state=rig.tmp / "state",
        other_card=other.ref,
    )
    ensure_excluded(str(rig.repo))  # laneboard's own first write to a project (info/exclude)
    before, files = checkout_hash(rig.repo), checkout_files(rig.repo)
    rig.server.add(
        Reply(tool_calls=[kind.bash(targets.script())], expect=(card.ref,)),
        Reply(text="I tried everything."),
        # an undelivered card is continued: those turns only talk
        *[Reply(text="Nothing more to do.") for _ in range(4)],
    )
    rig.start()
    turns = rig.wait_turns(card, 1)
    rig.stop()
    assert rig.server.errors == [], rig.describe()
    assert turns[0]["outcome"] == "ok", rig.describe()
    # the model saw its command run (the tool result reached it)
    assert "I tried everything." in (turns[0]["final_text"] or "")
    now = checkout_files(rig.repo)
    assert checkout_hash(rig.repo) == before, {
        k for k in {*files, *now} if files.get(k) != now.get(k)
    }
    assert rig.git("log", "--format=%s") == "initial"
    assert not (outside / "outside.txt").exists()
    assert not (kind.home / ".bashrc").exists()
    assert not (rig.tmp / "evil-hooks").exists()
    log = (rig.tmp / "state" / "supervisor.log").read_text()
    assert "junk" not in log.splitlines()
    assert [c.body for c in rig.board.comments(other.ref)] == []
    assert rig.board.get(other.ref).status.value == "todo"
    assert not targets.stole_the_database(rig.lane(card))
    stolen = rig.lane(card) / "stolen.txt"
    assert not stolen.exists() or stolen.read_text().count("lbt_") <= 1  # its own, at most
    # the turn changed nothing of the user's: neither the boundary nor the scope check held
    # the card. The agent never delivers, so if its talking continuations ran before the
    # stop, laneboard held it (no_delivery) after 3 of them: that hold is right, its timing
    # is the machine's
    held = rig.board.get(card.ref)
    assert held.meta.get("hold_cycle") in (None, "no_delivery"), rig.describe()
    assert held.status.value == ("blocked" if held.meta.get("hold_cycle") else "in_progress")
