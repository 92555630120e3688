"""Runs end to end: the real supervisor (its passes, pool and run clock) with the scripted
agent as real processes — convergence, pause, force-stop, per-run health."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.runs import run_events
from tests.supervisor.helpers import RealNowClock, Running, config, settled, wait_for

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.domain.runs import RunOptions
from laneboard.server.status import health
from laneboard.store import Store, open_store
from laneboard.supervisor import runs as sr
from laneboard.supervisor.status import status_report

ME = human("alice")
FAST = RunOptions(interval_ms=50)


def setup(url: str, tmp: Path) -> tuple[Store, Board, Path]:
    proj = tmp / "proj"
    proj.mkdir(exist_ok=True)
    store = open_store(url, RealNowClock())
    board = Board(store)
    board.add_project(ME, "R", path=str(proj))
    return store, board, proj


def card(board: Board, run_id: int, title: str, script: list[dict[str, Any]]) -> str:
    return board.create_card(
        ME, "R", title, acceptance_mode="off", run_id=run_id, meta={"script": script}
    ).ref


def status_of(board: Board, run_id: int) -> str:
    return str(board.run(run_id)["status"])


def event_types(board: Board, run_id: int) -> list[str]:
    return [e["type"] for e in run_events(board.store, run_id)]


def test_a_run_of_several_cards_converges_to_completed(store_url: str, tmp_path: Path) -> None:
    store, board, _ = setup(store_url, tmp_path)
    run = board.create_run(ME, "R", "three things", FAST)
    refs = [card(board, run["id"], f"part {i}", [{"deliver": f"part {i}"}]) for i in range(3)]
    outsider = board.create_card(ME, "R", "not in the run", status="backlog").ref
    with Running(store_url, config(tmp_path, max_concurrency=2), RealNowClock()):
        wait_for(lambda: status_of(board, run["id"]) == "completed", timeout=120,
                 what="the run completed")  # fmt: skip
    view = board.run(run["id"])
    assert view["convergence"] == {"state": "completed",
                                   "reason": "all_tasks_and_proposals_terminal"}  # fmt: skip
    assert view["cards"] == {"done": 3} and view["ended_at"] is not None
    assert all(board.get(r).status.value == "done" for r in refs)
    assert board.get(outsider).status.value == "backlog"  # the board's other cards do not count
    types = event_types(board, run["id"])
    assert "run.converging" in types and types[-1] == "run.completed"
    store.close()


def test_a_run_whose_remaining_card_is_held_converges_to_blocked(
    store_url: str, tmp_path: Path
) -> None:
    store, board, _ = setup(store_url, tmp_path)
    run = board.create_run(ME, "R", "one done, one held", FAST)
    done = card(board, run["id"], "doable", [{"deliver": "ok"}])
    held = card(board, run["id"], "needs a person", [{"deliver": "never"}])
    board.move(ME, held, "blocked", reason="waiting on credentials")
    with Running(store_url, config(tmp_path), RealNowClock()):
        wait_for(lambda: status_of(board, run["id"]) == "blocked", timeout=120,
                 what="the run blocked")  # fmt: skip
    view = board.run(run["id"])
    assert view["convergence"]["reason"] == "all_remaining_tasks_blocked"
    assert board.get(done).status.value == "done"
    assert "run.blocked" in event_types(board, run["id"])
    store.close()


def test_pausing_mid_run_stops_new_claims_while_the_running_turn_finishes(
    store_url: str, tmp_path: Path
) -> None:
    store, board, proj = setup(store_url, tmp_path)
    run = board.create_run(ME, "R", "two in a row", FAST)
    started = proj / "first-started"
    first = card(board, run["id"], "first", [
        {"run": f"touch {started}"}, {"sleep": 1.5}, {"deliver": "first done"},
    ])  # fmt: skip
    second = card(board, run["id"], "second", [{"deliver": "second done"}])
    board.create_card(
        ME, "R", "outside", acceptance_mode="off", meta={"script": [{"deliver": "x"}]}
    )
    with Running(store_url, config(tmp_path, max_concurrency=1), RealNowClock()):
        wait_for(started.exists, what="the first turn running")
        board.transition_run(ME, run["id"], "pause", idempotency_key="pause-1")
        wait_for(lambda: board.get(first).status.value == "done", timeout=60,
                 what="the running turn finishing")  # fmt: skip
        wait_for(lambda: settled(store), what="its row recorded")
        wait_for(lambda: board.list_cards(statuses=["done"]) and all(
            c.status.value == "done" for c in board.list_cards() if c.run_id is None),
            timeout=60, what="the card outside the run worked meanwhile")  # fmt: skip
        assert board.get(second).status.value == "todo"  # no new claim in the paused run
        assert status_of(board, run["id"]) == "paused-intake"
        board.transition_run(ME, run["id"], "resume", idempotency_key="resume-1")
        wait_for(lambda: status_of(board, run["id"]) == "completed", timeout=120,
                 what="the resumed run completing")  # fmt: skip
    assert board.get(second).status.value == "done"
    store.close()


def test_force_stop_interrupts_a_hanging_agent_and_releases_its_claim(
    store_url: str, tmp_path: Path
) -> None:
    store, board, proj = setup(store_url, tmp_path)
    run = board.create_run(ME, "R", "hangs", FAST)
    hanging = proj / "hanging"
    ref = card(board, run["id"], "hangs", [{"run": f"touch {hanging}"}, {"hang": True}])
    with Running(store_url, config(tmp_path), RealNowClock()):
        wait_for(hanging.exists, what="the agent hanging")
        out = board.transition_run(ME, run["id"], "force-stop", idempotency_key="fs-1")
        assert (out["status"], out["target"]) == ("draining", "stopped")
        wait_for(lambda: status_of(board, run["id"]) == "stopped", timeout=60,
                 what="the run stopped")  # fmt: skip
    c = board.get(ref)
    assert c.status.value == "todo" and c.holder is None  # the claim was released
    with store.read() as tx:
        turns = tx.all("SELECT outcome FROM turns WHERE card_id = ?", (c.id,))
        rows = tx.all("SELECT state FROM queue WHERE card_id = ?", (c.id,))
    assert [t["outcome"] for t in turns] == ["interrupted"]
    assert [r["state"] for r in rows] == ["failed"]  # never requeued
    view = board.run(run["id"])
    assert view["ended_at"] is not None and view["stop_mode"] == "force"
    assert event_types(board, run["id"])[-1] == "run.stopped"
    store.close()


def test_a_failing_run_tick_degrades_that_run_only(store_url: str, tmp_path: Path) -> None:
    store, board, _ = setup(store_url, tmp_path)
    bad = board.create_run(ME, "R", "its ticks fail", FAST)
    good = board.create_run(ME, "R", "its ticks work", FAST)
    cfg = config(tmp_path)
    with Running(store_url, cfg, RealNowClock()) as running:
        assert running.sup.runs is not None

        def step(rt: Any, pool: Any, run_id: int) -> Any:
            if run_id == bad["id"]:
                raise RuntimeError("injected: the pass cannot read its lanes")
            return sr.step(rt, pool, run_id, count=False)

        running.sup.runs.step_fn = step
        wait_for(lambda: status_of(board, bad["id"]) == "degraded", what="the bad run degraded")
        ticks = running.sup.runs.health[good["id"]].ticks
        wait_for(lambda: running.sup.runs.health[good["id"]].ticks > ticks + 3,
                 what="the good run still ticking")  # fmt: skip
        h = running.sup.runs.health[bad["id"]]
        wait_for(lambda: h.failures >= 3, what="retries with backoff")
        assert running.sup.runs.health[good["id"]].failures == 0
        report = status_report(store, store.clock, cfg, machine="test-machine")
        assert report["health"]["state"] == "degraded"
        reasons = report["health"]["reasons"]
        assert len(reasons) == 1 and f"run {bad['id']}" in reasons[0]
        assert "injected" in reasons[0]
        code, body = health(store)
        assert code == 503 and body["status"] == "degraded"
        assert [d["run"] for d in body["runs"]["degraded"]] == [bad["id"]]
        running.sup.runs.step_fn = lambda rt, pool, rid: sr.step(rt, pool, rid, count=False)
        wait_for(lambda: status_of(board, bad["id"]) == "active", what="recovered on success")
        assert health(store)[0] == 200
    assert status_of(board, good["id"]) == "active"
    assert "run.tick_failed" in event_types(board, bad["id"])
    assert "run.recovered" in event_types(board, bad["id"])
    assert "run.tick_failed" not in event_types(board, good["id"])
    store.close()
