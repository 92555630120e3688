"""Specialist turns run side by side up to --max-active-specialists, one per role."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.orchestrate.scripts import control
from tests.orchestrate.test_refusals_e2e import run

from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.store import open_store


def two_independent() -> Any:
    def work(name: str) -> dict[str, Any]:
        return {"r1": [
            control("accept", "--assignment", name, "--revision", "1"),
            {"write": f"src/producer/{name}/out.txt", "content": f"{name}\n"},
            {"sleep": 1.5},
            control("report", "--assignment", name, "--revision", "1"),
        ]}  # fmt: skip

    return {
        "coordinator": [
            {"turn": 1, **control("assign", "--assignment", "left", "--owner", "specialist-a",
                                  "--brief", "the left half", "--path", "src/producer/left")},
            {"turn": 1, **control("assign", "--assignment", "right", "--owner", "specialist-b",
                                  "--brief", "the right half", "--path", "src/producer/right")},
            {"turn": 2, **control("complete", check=False)},
            {"turn": 3, **control("complete", check=False)},
        ],
        "left": work("left"),
        "right": work("right"),
    }  # fmt: skip


@pytest.mark.parametrize(("active", "overlap"), [("2", True), ("1", False)])
def test_specialist_turns_overlap_only_within_the_active_limit(
    tmp_path: Path, repo: Path, active: str, overlap: bool
) -> None:
    code, doc, err = run(tmp_path, repo, two_independent(), "--max-active-specialists", active)
    assert code == 0 and doc["phase"] == "completed", err
    assert (repo / "src/producer/left/out.txt").exists()
    assert (repo / "src/producer/right/out.txt").exists()
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    (rid,) = [r["id"] for r in board.runs()]
    work = [t for t in Runtime(board).turns(rid) if t["purpose"] == "work"]
    assert sorted(t["assignment"] for t in work) == ["left", "right"]
    a, b = work
    assert (a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"]) is overlap


def test_work_past_its_deadline_wakes_the_coordinator(tmp_path: Path, repo: Path) -> None:
    script = two_independent()
    script["coordinator"][1] = {"turn": 1, **control(  # right waits while left runs
        "assign", "--assignment", "right", "--owner", "specialist-b", "--brief", "the right half",
        "--path", "src/producer/right", "--deadline-secs", "1")}  # fmt: skip
    code, doc, err = run(tmp_path, repo, script, "--max-active-specialists", "1")
    assert code == 0 and doc["phase"] == "completed", err
    assert err.count("right revision 1 is past its deadline") == 1


def test_a_completed_specialist_answers_a_clarification_in_a_read_only_turn(
    tmp_path: Path, repo: Path
) -> None:
    script = {
        "coordinator": [
            {"turn": 1, **control("assign", "--assignment", "producer", "--owner",
                                  "specialist-a", "--brief", "the record",
                                  "--path", "src/producer")},
            {"turn": 2, **control("update", "--assignment", "producer",
                                  "--note", "which field is the key?")},
            {"turn": 3, **control("complete")},
        ],
        "producer": {"r1": [
            {"turn": 1, **control("accept", "--assignment", "producer", "--revision", "1")},
            {"turn": 1, "write": "src/producer/api.txt", "content": "id key\n"},
            {"turn": 1, **control("report", "--assignment", "producer", "--revision", "1")},
            {"turn": 2, "write": "src/producer/api.txt", "content": "changed in a read-only turn\n"},
            {"turn": 2, "say": "the key field is key"},
        ]},
    }  # fmt: skip
    code, doc, err = run(tmp_path, repo, script)
    assert code == 0 and doc["phase"] == "completed", err
    assert "producer's owner specialist-a answers: the key field is key" in err
    assert "(the files it changed were discarded)" in err
    assert (repo / "src/producer/api.txt").read_text() == "id key\n"  # the verified revision
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    (rid,) = [r["id"] for r in board.runs()]
    purposes = [t["purpose"] for t in Runtime(board).turns(rid) if t["role"] != "coordinator"]
    assert purposes == ["work", "clarify"]
    sessions = {t["role"] for t in Runtime(board).turns(rid)}
    assert sessions == {"coordinator", "specialist-a"}


def test_a_specialist_waiting_for_input_releases_its_slot(tmp_path: Path, repo: Path) -> None:
    script = two_independent()
    script["coordinator"] = [
        script["coordinator"][0],
        script["coordinator"][1],
        # turn 2 (left asks) leaves the question open; right runs in the freed slot
        {"turn": 3, **control("answer", "--assignment", "left", "--note", "use out.txt")},
        {"turn": 5, **control("complete")},
    ]
    script["left"] = {"r1": [
        {"turn": 1, **control("accept", "--assignment", "left", "--revision", "1")},
        {"turn": 1, "lb": ["card", "ask", "{card}", "which file?"]},
        {"turn": 2, "write": "src/producer/left/out.txt", "content": "left\n"},
        {"turn": 2, **control("report", "--assignment", "left", "--revision", "1")},
    ]}  # fmt: skip
    code, doc, err = run(tmp_path, repo, script, "--max-active-specialists", "1")
    assert code == 0 and doc["phase"] == "completed", err
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    (rid,) = [r["id"] for r in board.runs()]
    order = [(t["assignment"], t["purpose"]) for t in Runtime(board).turns(rid)
             if t["role"] != "coordinator"]  # fmt: skip
    assert order == [("left", "work"), ("right", "work"), ("left", "answer")]
