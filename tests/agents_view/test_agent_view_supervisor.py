"""The agent view against the real supervisor and the scripted agent: a running turn's
transcript grows as it happens, a person stops it (the card is held, and releasing the
hold continues the same session), and a follow-up reaches the worker's next turn."""

from __future__ import annotations

from pathlib import Path

from tests.supervisor.helpers import RealNowClock, Running, config, settled, wait_for

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store

ME = human("alice")
# acceptance_mode off: the workflow may accept a delivery before a poll sees in_review
DELIVERED = ("in_review", "done")


def test_a_running_turn_streams_its_transcript_and_a_person_stops_it(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(ME, "T", path=str(proj))
    ref = board.create_card(ME, "T", "long job", acceptance_mode="off", meta={"script": [
        {"say": "starting the long job", "attempt": 1},
        {"run": "echo step one", "attempt": 1},
        {"hang": True, "attempt": 1},
        {"deliver": "finished after the stop", "attempt": 2},
    ]}).ref  # fmt: skip
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: any(e["type"] == "command" for e in board.transcript(ref)["entries"]),
                 what="the command entry of the running turn")  # fmt: skip
        live = board.transcript(ref)
        assert live["running"] is not None
        kinds = [e["type"] for e in live["entries"]]
        assert kinds[:4] == ["prompt", "lb", "message", "command"]  # lb: it reads its card
        assert live["entries"][1]["text"].startswith("lb card get")
        assert live["entries"][3]["output"] == "step one\n"
        board.stop_turn(ME, ref)
        wait_for(lambda: board.get(ref).status.value == "blocked", what="the stopped card held")
        stopped = board.transcript(ref)
        assert stopped["running"] is None and stopped["turns"][0]["outcome"] == "stopped"
        assert stopped["turns"][0]["stop_requested_by"] == "alice"
        assert "interrupt" in [e["type"] for e in stopped["entries"]]
        assert board.get(ref).meta["hold_cycle"] == "stop"
        board.move(ME, ref, "todo", note="hold released")
        wait_for(lambda: board.get(ref).status.value in DELIVERED, what="delivered after")
        wait_for(lambda: settled(store), what="turns recorded")
    turns = board.transcript(ref)["turns"]
    assert [t["outcome"] for t in turns] == ["stopped", "ok"]
    assert turns[0]["session"] == turns[1]["session"]  # the same session continued
    store.close()


def test_a_follow_up_reaches_the_next_turn_in_the_same_session(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(ME, "F", path=str(proj))
    ref = board.create_card(ME, "F", "two turns", acceptance_mode="off", meta={"script": [
        {"say": "waiting for advice", "attempt": 1},
        {"run": "sleep 2", "attempt": 1},
        {"deliver": "took the advice", "attempt": 2},
    ]}).ref  # fmt: skip
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.transcript(ref)["running"] is not None, what="the first turn")
        board.tell(ME, ref, "please mention the changelog")
        wait_for(lambda: board.get(ref).status.value in DELIVERED, what="delivered")
        wait_for(lambda: settled(store), what="turns recorded")
    got = board.transcript(ref)
    first, second = got["turns"]
    assert first["session"] == second["session"]
    prompts = [e for e in got["entries"] if e["type"] == "prompt"]
    assert "please mention the changelog" not in prompts[0]["text"]
    assert "from alice: please mention the changelog" in prompts[1]["text"]
    assert got["followups"][0]["turn"] == second["id"]
    assert got["followups"][0]["steered_at"] is None  # the scripted kind cannot be steered
    store.close()


def test_the_runtimes_check_runs_join_the_turns_transcript(
    sqlite_store_url: str, repo: Path, tmp_path: Path
) -> None:
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(ME, "C", path=str(repo))
    ref = board.create_card(
        ME, "C", "checked", acceptance_mode="off", allowed_paths=["app.py"],
        checks=["python3 -c 'import app; print(\"checked\", app.VALUE)'"],
        meta={"script": [{"write": "app.py", "content": "VALUE = 7\n"},
                         {"deliver": "app.py added"}]},
    ).ref  # fmt: skip
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value == "done", what="landed")
        wait_for(lambda: settled(store), what="turns recorded")
    got = board.transcript(ref)["entries"]
    check = next(e for e in got if e["type"] == "check")
    assert check["text"].startswith("python3 -c 'import app") and check["exit_code"] == 0
    assert "checked 7" in (check["output"] or "") and check["paths"][0].endswith(".log")
    assert check["seq"] == 0 and not check["is_error"]
    kinds = [e["type"] for e in got]
    assert kinds.index("check") < kinds.index("result")  # during the turn, before its end
    store.close()
