"""Project settings: validated, stored with an event, read by lanes and verification."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import agent
from laneboard.errors import LaneboardError


def test_settings_round_trip_and_refusals(board: Board, me) -> None:  # type: ignore[no-untyped-def]
    board.add_project(me, "PC")
    cfg = board.set_project_config(
        me, "PC", {"workspace": "shared", "review_gate": ["make"], "check_timeout": "30"}
    )
    assert cfg == {"workspace": "shared", "review_gate": ["make"], "check_timeout": 30.0}
    assert board.project_config("PC") == cfg
    assert board.events()[-1].type == "project.configured"
    before = len(board.events())
    for bad in ({"workspace": "tmp"}, {"check_timeout": "-1"}, {"nope": 1}):
        with pytest.raises(LaneboardError) as err:
            board.set_project_config(me, "PC", bad)
        assert err.value.code == "BAD_INPUT"
    with pytest.raises(LaneboardError) as err:
        board.set_project_config(agent("worker"), "PC", {"workspace": "lanes"})
    assert err.value.code == "FORBIDDEN"
    assert len(board.events()) == before and board.project_config("PC") == cfg
    assert board.set_project_config(me, "PC", {}, ["workspace"]) == {
        "review_gate": ["make"],
        "check_timeout": 30.0,
    }


def test_cli_project_config(tmp_path: Path) -> None:
    env = {**os.environ, "LANEBOARD_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}"}

    def lb(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "laneboard.cli.main", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert lb("project", "add", "PC").returncode == 0
    out = lb(
        "project",
        "config",
        "PC",
        "--set",
        "review_gate=ruff check",
        "--set",
        "review_gate=pytest -q",
        "--json",
    )
    assert out.returncode == 0 and json.loads(out.stdout) == {
        "review_gate": ["ruff check", "pytest -q"]
    }
    bad = lb("project", "config", "PC", "--set", "workspace")
    assert bad.returncode == 2 and bad.stderr.startswith("error BAD_INPUT: --set 'workspace'")
    assert bad.stderr.count("\n") == 1
