"""A poll pass reads every project's board settings once and admits all its cards with
them; an edit of a project's settings is seen by the next pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.store.tx import Tx
from laneboard.supervisor import records
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.poll import poll
from laneboard.supervisor.runtime import Runtime

from .helpers import RealNowClock, config


def _targets(rt: Runtime) -> dict[int, str]:
    with rt.store.read() as tx:
        return {r.card_id: r.target_dir for r in records.queue_rows(tx, machine=rt.machine)}


def test_a_pass_reads_settings_once_and_the_next_sees_an_edit(
    store_url: str, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"one": 0, "all": 0}
    per_project, every_project = Tx.project_config, Tx.projects_and_configs

    def one(tx: Tx, project_id: int) -> dict[str, Any]:
        calls["one"] += 1
        return per_project(tx, project_id)

    def every(tx: Tx) -> Any:
        calls["all"] += 1
        return every_project(tx)

    monkeypatch.setattr(Tx, "project_config", one)
    monkeypatch.setattr(Tx, "projects_and_configs", every)
    store = open_store(store_url, RealNowClock())
    board = Board(store)
    me = human("alice")
    board.add_project(me, "S", path=str(repo))
    first = [board.create_card(me, "S", f"lane {n}") for n in range(3)]
    rt = Runtime(
        store, config(tmp_path), "m", LogFile(str(tmp_path / "log")), pool_alive=lambda: True
    )
    calls.update(one=0, all=0)
    assert sorted(poll(rt).claimed) == sorted(c.ref for c in first)
    assert calls == {"one": 0, "all": 1}  # three admissions, one read of the settings
    targets = _targets(rt)
    assert all(".worktrees" in targets[c.id] for c in first)
    board.set_project_config(me, "S", {"workspace": "shared"})
    late = board.create_card(me, "S", "shared now")
    calls.update(one=0, all=0)
    assert poll(rt).claimed == [late.ref]
    assert calls == {"one": 0, "all": 1}
    assert _targets(rt)[late.id] == str(repo)  # the edit, seen by the next pass
    store.close()
