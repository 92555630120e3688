"""``lb holds release`` in a subprocess, locally and remotely; the fix in the inbox and doctor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli_kit import MODES, Cli

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import system
from laneboard.store import open_store

FIX = "install claude or set [supervisor.agent_kinds.claude] binary"


@pytest.fixture(params=MODES)
def cli(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cli]:
    c = Cli(tmp_path, str(request.param))
    r = c.local("init", "--project", "WEB", "--path", str(tmp_path), "--json")
    assert r.code == 0, r.err
    c.start()
    try:
        yield c
    finally:
        c.stop()


def hold(cli: Cli, ref: str, fix: str) -> None:
    store = open_store(cli.url, FakeClock())
    try:
        board = Board(store)
        with store.write() as tx:
            card = tx.card(board.get(ref).id, lock=True)
            assert card is not None
            h = board.hold(tx, system(), card, "dispatch", 3, "no binary.", reason="configuration")
            tx.update_card(h.id, h.version, {"meta": {**h.meta, "hold_fix": fix}})
    finally:
        store.close()


def test_holds_release_frees_the_configuration_holds(cli: Cli) -> None:
    ref = cli.ok("card", "add", "WEB", "needs an agent", "--assignee", "worker")["ref"]
    hold(cli, ref, FIX)
    [item] = [i for i in cli.ok("inbox") if i["kind"] == "hold"]
    assert FIX in item["detail"] and "lb holds release" in item["detail"]
    [line] = cli.ok("doctor")["looping"]["held"]
    assert (line["card"], line["reason"], line["fix"]) == (ref, "configuration", FIX)
    out = cli.ok("holds", "release")
    assert out == [{"ref": ref, "cycle": "dispatch", "fix": FIX, "released": True,
                    "skipped": None}]  # fmt: skip
    assert cli.ok("card", "get", ref)["status"] == "todo"
    r = cli.run("holds", "release")
    assert (r.code, r.out, r.err) == (0, "no card is held for that reason: nothing released\n", "")
