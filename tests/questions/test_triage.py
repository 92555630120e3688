"""Triage rows: the director's post-acceptance handoff decision, driven directly with an
injected clock (and once under the running supervisor). Which producers get a row (and in what order beside question and route
rows); the scripted director consuming and declining a handoff; a note-only turn retried,
then exhausted (a note on the done producer and lb doctor's handoff_unconsumed); a row
whose producer is no longer done, or was decided meanwhile, completes without a turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laneboard.board import handoff
from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import Card, agent, human
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store
from laneboard.supervisor import records
from laneboard.supervisor.director import DirectorLane, lane_machine, scan
from laneboard.supervisor.doctor import doctor_report

from .helpers import RealNowClock, Running, config, runtime, wait_for

ME = human("alice")
REPORT = (
    "Built the parser.\n\n## Handoff\n- Write the user docs for the parser (worker).\n"
    "- Add a fuzz target.\n\n## Checks\npytest -q passed\n"
)


def _rows(store: Store, card_id: int) -> list[records.QueueRow]:
    with store.read() as tx:
        return records.queue_rows(
            tx, states=("pending", "processing", "done", "failed"), card_id=card_id
        )


def _turns(store: Store, card_id: int) -> list[dict[str, Any]]:
    with store.read() as tx:
        return list(records.turns_for_card(tx, card_id))


def _accepted(board: Board, project: str, title: str, *, report: str = REPORT, **meta: Any) -> Card:
    """A producer delivered by its worker and accepted by a person (done, round 1)."""
    c = board.create_card(ME, project, title, assignee="worker", meta=meta)
    worker = agent("worker", c.id, 1)
    board.claim(worker, c.ref)
    board.report(worker, c.ref, report)
    board.move(worker, c.ref, "in_review")
    return board.move(ME, c.ref, "done")


def test_triage_rows_only_for_producers_owing_a_decision(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    board = Board(store)
    board.add_project(ME, "T", path=str(tmp_path))
    old = _accepted(board, "T", "accepted eight days ago", stage_handoff="required")
    clock.advance(minutes=8 * 24 * 60)
    owed = _accepted(board, "T", "owes a decision", stage_handoff="required")
    plain = _accepted(board, "T", "no stage handoff")
    optional = _accepted(board, "T", "optional handoff", stage_handoff="optional")
    declined = _accepted(board, "T", "declined already", stage_handoff="required")
    handoff.decide(board, ME, declined.ref, "declined", round_=1, reason="covered by T-9")
    in_review = board.create_card(ME, "T", "not accepted yet", meta={"stage_handoff": "required"})
    w = agent("worker", in_review.id, 1)
    board.claim(w, in_review.ref)
    board.report(w, in_review.ref, REPORT)
    board.move(w, in_review.ref, "in_review")
    # a question and an unowned card arrive in the same scan: their rows come first
    asking = board.create_card(ME, "T", "asks", assignee="worker")
    board.claim(agent("worker", asking.id, 1), asking.ref)
    board.comment(agent("worker", asking.id, 1), asking.ref, "Q1: which format?", "question")
    unowned = board.create_card(ME, "T", "nobody owns this")
    clock.advance(minutes=31)
    rt = runtime(store, config(tmp_path))

    found = scan(rt)

    assert found == {"question": [asking.ref], "route": [unowned.ref], "triage": [owed.ref]}
    for c in (old, plain, optional, declined, in_review):
        assert _rows(store, c.id) == [], f"{c.title}: no triage row"
    [row] = _rows(store, owed.id)
    assert (row.kind, row.role, row.machine) == ("triage", "director", lane_machine(rt.machine))
    assert row.payload["round"] == 1 and row.round == 1
    ids = {c.ref: _rows(store, c.id)[0].id for c in (asking, unowned, owed)}
    assert ids[owed.ref] > max(ids[asking.ref], ids[unowned.ref])
    with store.read() as tx:  # the lane takes them in that order, whatever their ids
        pending = records.pending_rows(tx, lane_machine(rt.machine), last_kinds=("triage",))
    assert [r.kind for r in pending] == ["question", "route", "triage"]
    assert scan(rt)["triage"] == [], "one row per round: a second scan coalesces"
    assert len(_rows(store, owed.id)) == 1


def test_pending_triage_runs_after_a_newer_question(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))
    board = Board(store)
    board.add_project(ME, "P", path=str(tmp_path))
    producer = _accepted(
        board,
        "P",
        "producer",
        stage_handoff="required",
        director_script=[{"lb": 'card handoff {card} declined --round {round} --reason "no"'}],
    )
    rt = runtime(store, config(tmp_path))
    assert scan(rt)["triage"] == [producer.ref]  # the triage row is the older one
    asking = board.create_card(
        ME,
        "P",
        "asks",
        assignee="worker",
        meta={"director_script": [{"lb": "card release {card}"}]},
    )
    worker = agent("worker", asking.id, 1)
    board.claim(worker, asking.ref)
    board.comment(worker, asking.ref, "Q1: go on?", "question")
    lane = DirectorLane(rt)
    try:
        ran = lane.run_once()["ran"]
    finally:
        lane.close()
    assert [(r["kind"], r["state"]) for r in ran] == [("question", "done"), ("triage", "done")]


def test_scripted_director_consumes_a_handoff(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))
    board = Board(store)
    board.add_project(ME, "C", path=str(tmp_path))
    follow = (
        'card follow-up {card} "Write the parser docs" --round {round} '
        '--description "From the handoff of {card}." --assignee worker'
    )
    producer = _accepted(
        board,
        "C",
        "build the parser",
        stage_handoff="required",
        director_script=[
            {"lb": follow},
            {"lb": follow},  # a repeated title returns the card made the first time
            {"lb": "card handoff {card} consumed --round {round}"},
        ],
    )
    rt = runtime(store, config(tmp_path))
    lane = DirectorLane(rt)
    try:
        out = lane.run_once()
    finally:
        lane.close()
    assert out["enqueued"]["triage"] == [producer.ref]
    [row] = _rows(store, producer.id)
    assert (row.kind, row.state, row.attempts) == ("triage", "done", 1)
    assert row.payload["note"] == "handoff for round 1 consumed"
    fresh = board.get(producer.ref)
    assert fresh.status.value == "done"
    assert fresh.meta["handoff_consumed_round"] == 1
    [made] = [c for c in board.list_cards(project="C") if c.meta.get("handoff_from")]
    assert made.title == "Write the parser docs" and made.status.value == "todo"
    assert made.assignee == "worker" and made.depends_on == (producer.id,)
    assert made.meta == {"handoff_from": producer.ref, "handoff_round": 1}
    assert fresh.meta["handoff_follow_ups"] == [made.ref]
    note = [c for c in board.comments(producer.ref) if c.author == "Director"]
    assert len(note) == 1 and made.ref in note[0].body
    [turn] = _turns(store, producer.id)
    prompt = str(turn["prompt"])
    assert "Director row: triage" in prompt and "Write the user docs" in prompt
    assert "pytest -q passed" not in prompt, "only the ## Handoff section is carried"
    assert f"lb card handoff {producer.ref} consumed --round 1" in prompt
    assert f"lb card follow-up {producer.ref}" in prompt
    types = [e.type for e in board.events(limit=500) if e.card_id == producer.id]
    assert "handoff.follow_up" in types and "handoff.decided" in types
    assert lane.run_once()["enqueued"]["triage"] == [], "decided: nothing more to triage"


def test_scripted_director_declines_a_handoff(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))
    board = Board(store)
    board.add_project(ME, "N", path=str(tmp_path))
    producer = _accepted(
        board,
        "N",
        "build it",
        stage_handoff="required",
        director_script=[
            {
                "lb": "card handoff {card} declined --round {round} "
                '--reason "The docs card N-7 already covers it."'
            }
        ],
    )
    rt = runtime(store, config(tmp_path))
    lane = DirectorLane(rt)
    try:
        lane.run_once()
    finally:
        lane.close()
    [row] = _rows(store, producer.id)
    assert (row.state, row.payload["note"]) == ("done", "handoff for round 1 declined")
    fresh = board.get(producer.ref)
    assert fresh.meta["handoff_declined_round"] == 1
    assert fresh.meta["handoff_reason"] == "The docs card N-7 already covers it."
    assert "handoff_consumed_round" not in fresh.meta
    assert [c for c in board.list_cards(project="N") if c.id != producer.id] == []
    with pytest.raises(LaneboardError) as err:  # one decision a round
        handoff.decide(board, ME, producer.ref, "consumed", round_=1)
    assert err.value.code == "CONFLICT"


def test_note_only_triage_is_retried_then_left_on_the_producer(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))
    board = Board(store)
    board.add_project(ME, "X", path=str(tmp_path))
    producer = _accepted(
        board,
        "X",
        "build it",
        stage_handoff="required",
        director_script=[{"comment": "Looking at the handoff.", "kind": "note"}],
    )
    rt = runtime(store, config(tmp_path))
    lane = DirectorLane(rt)
    try:
        lane.run_once()
        [row] = _rows(store, producer.id)
        assert row.state == "pending" and row.attempts == 1, "a note is not a decision"
        assert lane.run_once()["ran"] == [], "the retry waits 30 s"
        clock.advance(seconds=30)
        lane.run_once()
        [row] = _rows(store, producer.id)
        assert row.state == "failed" and row.attempts == 2
        assert "no decision recorded for round 1" in (row.last_error or "")
        lane.run_once()
        assert len(_rows(store, producer.id)) == 1, "a triage gets at most its two turns"
    finally:
        lane.close()
    fresh = board.get(producer.ref)
    assert fresh.status.value == "done" and "hold_cycle" not in fresh.meta, "never parked"
    director_notes = [c for c in board.comments(producer.ref) if c.author == "Director"]
    assert len(director_notes) == 2
    left = [c for c in board.comments(producer.ref) if c.author == rt.actor.name]
    assert len(left) == 1 and left[0].kind.value == "note"
    assert f"lb card handoff {producer.ref} declined --round 1" in left[0].body
    rep = doctor_report(store, clock, rt.config, machine=rt.machine)
    assert [(f["card"], f["finding"], f["round"]) for f in rep["handoff_unconsumed"]] == [
        (producer.ref, "handoff_unconsumed", 1)
    ]
    assert rep["handoff_unconsumed"][0]["attention"] is True
    assert rep["attention"] and "1 unconsumed handoffs" in rep["reasons"]
    assert rep["question_lane"] == [], "a done producer is not a question-lane row"
    # a person decides it: the finding clears
    handoff.decide(board, ME, producer.ref, "declined", round_=1, reason="not needed")
    rep = doctor_report(store, clock, rt.config, machine=rt.machine)
    assert rep["handoff_unconsumed"] == []


def test_unconsumed_finding_looks_back_seven_days(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))
    board = Board(store)
    board.add_project(ME, "W", path=str(tmp_path))
    producer = _accepted(board, "W", "build it", stage_handoff="required", director_script=[])
    rt = runtime(store, config(tmp_path))
    lane = DirectorLane(rt)
    try:
        lane.run_once()
        clock.advance(seconds=30)
        lane.run_once()
    finally:
        lane.close()
    assert [r.state for r in _rows(store, producer.id)] == ["failed"]
    rep = doctor_report(store, clock, rt.config, machine=rt.machine)
    assert [f["card"] for f in rep["handoff_unconsumed"]] == [producer.ref]
    clock.advance(minutes=7 * 24 * 60)
    rep = doctor_report(store, clock, rt.config, machine=rt.machine)
    assert rep["handoff_unconsumed"] == [], "past the archive window"
    assert scan(rt)["triage"] == []


def test_producer_no_longer_done_makes_the_row_stale(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    board = Board(store)
    board.add_project(ME, "S", path=str(tmp_path))
    moved = _accepted(board, "S", "moved", stage_handoff="required", director_script=[])
    decided = _accepted(board, "S", "decided", stage_handoff="required", director_script=[])
    rt = runtime(store, config(tmp_path))
    assert scan(rt)["triage"] == [moved.ref, decided.ref]
    # done is terminal on the board: the producer leaves it only by a change to the store
    # itself (a restore, a repair), which the lane must still notice before its turn
    with store.write() as tx:
        tx.run("UPDATE cards SET status = 'in_review' WHERE id = ?", (moved.id,))
    handoff.decide(board, ME, decided.ref, "consumed", round_=1)
    lane = DirectorLane(rt)
    try:
        ran = lane.run_once()["ran"]
    finally:
        lane.close()
    assert sorted(r["state"] for r in ran) == ["done", "done"]
    [stale] = _rows(store, moved.id)
    assert stale.state == "done" and stale.payload["note"].startswith("before the turn: stale")
    assert "in_review" in stale.payload["note"]
    [early] = _rows(store, decided.id)
    assert early.payload["note"] == "before the turn: handoff for round 1 consumed"
    assert _turns(store, moved.id) == [] and _turns(store, decided.id) == []
    recorded = [e.payload for e in board.events(limit=500) if e.type == "director.row"]
    assert {(p["kind"], p["state"]) for p in recorded} == {("triage", "done")}
    assert len(recorded) == 2


def test_handoff_writes_are_the_directors_on_a_done_producer(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    board = Board(store)
    board.add_project(ME, "H", path=str(tmp_path))
    producer = _accepted(board, "H", "producer", stage_handoff="required")
    other = _accepted(board, "H", "other", stage_handoff="required")
    director = agent("Director", producer.id, producer.claim_epoch)
    for who, ref, code in (
        (agent("worker", producer.id, 1), producer.ref, "FORBIDDEN"),  # its own worker
        (agent("Director", other.id, 1), producer.ref, "FORBIDDEN"),  # scoped elsewhere
    ):
        with pytest.raises(LaneboardError) as err:
            handoff.follow_up(board, who, ref, "more", round_=1)
        assert err.value.code == code
    with pytest.raises(LaneboardError) as err:
        handoff.decide(board, director, producer.ref, "consumed", round_=2)
    assert err.value.code == "BAD_INPUT", "only the current round"
    with pytest.raises(LaneboardError) as err:
        handoff.decide(board, director, producer.ref, "declined", round_=1)
    assert err.value.code == "BAD_INPUT", "a decline needs its reason"
    plain = _accepted(board, "H", "plain")
    with pytest.raises(LaneboardError) as err:
        handoff.decide(board, ME, plain.ref, "consumed", round_=1)
    assert err.value.code == "BAD_INPUT"
    todo = board.create_card(ME, "H", "not done", meta={"stage_handoff": "required"})
    with pytest.raises(LaneboardError) as err:
        handoff.decide(board, ME, todo.ref, "consumed", round_=1)
    assert err.value.code == "ILLEGAL_TRANSITION"
    made = handoff.follow_up(board, director, producer.ref, "Next stage", round_=1)
    again = handoff.follow_up(board, director, producer.ref, "next stage ", round_=1)
    assert again.id == made.id
    done = handoff.decide(board, director, producer.ref, "consumed", round_=1)
    assert handoff.decide(board, director, producer.ref, "consumed", round_=1).version == (
        done.version
    ), "a repeat writes nothing"
    with pytest.raises(LaneboardError) as err:
        handoff.follow_up(board, director, producer.ref, "late", round_=1)
    assert err.value.code == "CONFLICT"


def test_handoff_section_is_bounded() -> None:
    body = "intro\n## Handoff\n" + "x" * 5000 + "\n## Next\nafter"
    got = handoff.section(body)
    assert got is not None and len(got) <= handoff.SECTION_MAX and got.endswith("[clipped]")
    assert handoff.section("### Handoff\n- a\n#### detail\n- b\n### Other\n- c") == (
        "- a\n#### detail\n- b"
    )
    assert handoff.section("no section here") is None


def _lb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_lb_follow_up_and_handoff(tmp_path: Path) -> None:
    db = tmp_path / "board.db"
    clock = FakeClock()
    store = open_store(str(db), clock)
    board = Board(store)
    board.add_project(ME, "L")
    producer = _accepted(board, "L", "producer", stage_handoff="required")
    worker_token, _ = Tokens(store).create(ME, "worker", "agent", card_id=producer.id, epoch=1)
    store.close()
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": str(db),
        "LANEBOARD_NOW": str(clock.now_ms()),
        "LANEBOARD_USER": "alice",
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
    }
    env.pop("LANEBOARD_TOKEN_FILE", None)
    made = _lb(env, "card", "follow-up", producer.ref, "Next", "--round", "1", "-p", "1", "--json")
    assert made.returncode == 0, made.stderr
    card = json.loads(made.stdout)
    assert card["meta"] == {"handoff_from": producer.ref, "handoff_round": 1}
    assert card["priority"] == 1 and card["status"] == "todo"
    bad = _lb(env, "card", "handoff", producer.ref, "declined", "--round", "1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "needs a reason" in bad.stderr
    usage = _lb(env, "card", "handoff", producer.ref, "maybe", "--round", "1")
    assert usage.returncode == 2
    denied = _lb(
        {**env, "LANEBOARD_TOKEN": worker_token},
        "card", "handoff", producer.ref, "consumed", "--round", "1",
    )  # fmt: skip
    assert denied.returncode == 1 and "error FORBIDDEN" in denied.stderr
    ok = _lb(env, "card", "handoff", producer.ref, "consumed", "--round", "1", "--json")
    assert ok.returncode == 0, ok.stderr
    meta = json.loads(ok.stdout)["meta"]
    assert meta["handoff_consumed_round"] == 1 and meta["handoff_follow_ups"] == [card["ref"]]
    late = _lb(env, "card", "handoff", producer.ref, "declined", "--round", "1", "--reason", "x")
    assert late.returncode == 1 and "error CONFLICT" in late.stderr


def test_the_running_supervisor_triages_an_accepted_handoff(store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(ME, "E", path=str(proj))
    producer = _accepted(
        board,
        "E",
        "stage one",
        stage_handoff="required",
        director_script=[
            {"lb": 'card follow-up {card} "Stage two" --round {round} --assignee worker'},
            {"lb": "card handoff {card} consumed --round {round}"},
        ],
    )
    try:
        with Running(store_url, config(tmp_path), clock):
            wait_for(
                lambda: "handoff_consumed_round" in board.get(producer.ref).meta,
                what="the handoff decision",
            )
        [row] = _rows(store, producer.id)
        assert (row.kind, row.state) == ("triage", "done")
        follow = [c for c in board.list_cards(project="E") if c.id != producer.id]
        assert [(c.title, c.assignee) for c in follow] == [("Stage two", "worker")]
    finally:
        store.close()
