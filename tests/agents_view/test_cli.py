"""``lb card transcript [--follow]``, ``lb card stop|tell|answer|reject`` and ``lb inbox``
as real subprocesses, in local mode and in remote mode (lb serve, a board socket)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli_kit import LB, MODES, Cli

from laneboard.domain.clock import FakeClock
from laneboard.domain.transcript import entry
from laneboard.store import open_store


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


def start_turn(c: Cli, ref: str) -> int:
    store = open_store(c.url, FakeClock())
    try:
        with store.write() as tx:
            card = tx.card_by_ref(ref)
            assert card is not None
            return tx.start_turn(None, card.id, 1, None, "scripted", "s-1", "go")
    finally:
        store.close()


def write_and_finish(c: Cli, ref: str, turn: int) -> None:
    store = open_store(c.url, FakeClock())
    try:
        with store.write() as tx:
            card = tx.card_by_ref(ref)
            assert card is not None
            tx.append_transcript(turn, card.id, [(1, tx.now(), entry("message", "working on it")),
                                                 (2, tx.now(), entry("lb", "lb card get WEB-1"))])  # fmt: skip
            tx.finish_turn(turn, "ok", "done", None, 0, {})
    finally:
        store.close()


def test_transcript_follow_prints_a_running_turn_until_it_ends(cli: Cli) -> None:
    ref = cli.ok("card", "add", "WEB", "watch me")["ref"]
    assert cli.run("card", "transcript", ref).out == f"no transcript for {ref} yet\n"
    turn = start_turn(cli, ref)
    follow = subprocess.Popen(
        [*LB, "card", "transcript", ref, "--follow", "--json", "--interval", "0.1"],
        env=cli.environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        write_and_finish(cli, ref, turn)
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert [(x["type"], x["text"]) for x in lines] == [
        ("message", "working on it"), ("lb", "lb card get WEB-1")]  # fmt: skip
    text = cli.run("card", "transcript", ref).out
    assert text == "[turn 1] message: working on it\n[turn 1] lb: lb card get WEB-1\n"
    got = cli.ok("card", "transcript", ref, "--after", str(lines[0]["id"]))
    assert [e["text"] for e in got["entries"]] == ["lb card get WEB-1"]
    assert got["turns"][0]["outcome"] == "ok" and got["running"] is None


def test_stop_tell_answer_reject_and_the_inbox(cli: Cli) -> None:
    card = cli.ok("card", "add", "WEB", "ask me", "--acceptance-mode", "human")
    ref = card["ref"]
    assert cli.run("inbox").out == "nothing needs you\n"
    cli.refuse("CONFLICT", 1, "card", "stop", ref)
    worker = cli.token("w1", card["id"], 1)
    cli.ok("card", "claim", ref, LANEBOARD_TOKEN=worker)
    turn = start_turn(cli, ref)
    assert cli.ok("card", "stop", ref) == {"card": ref, "turn": turn, "requested_by": "alice"}
    told = cli.ok("card", "tell", ref, "mind the docs")
    assert told["body"] == "mind the docs" and told["turn"] is None
    cli.refuse("FORBIDDEN", 1, "card", "tell", ref, "mine", LANEBOARD_TOKEN=worker)
    cli.ok("card", "ask", ref, "which port?", LANEBOARD_TOKEN=worker)
    items = cli.ok("inbox")
    assert [(i["kind"], i["card"], i["detail"]) for i in items] == [
        ("question", ref, "which port?")]  # fmt: skip
    assert "answer: POST /api/v1/cards/" in cli.run("inbox").out
    assert cli.ok("card", "answer", ref, "8080")["status"] == "todo"
    cli.ok("card", "claim", ref)
    cli.ok("card", "deliver", ref, "--body", "made")
    assert [i["kind"] for i in cli.ok("inbox", "--kind", "acceptance")] == ["acceptance"]
    cli.refuse("BAD_INPUT", 2, "card", "answer", ref, "")
    got = cli.ok("card", "reject", ref, "--must-fix", "say why", "--must-fix", "add a test")
    assert got["status"] == "todo" and got["delivery_round"] == 2
    assert [a["id"] for a in got["acceptance"]] == ["R1.1", "R1.2"]
    assert cli.ok("inbox") == []
