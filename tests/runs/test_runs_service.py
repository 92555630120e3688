"""Runs in the board, on both backends: creation, cards joining, guarded transitions,
idempotency keys and races."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tests.runs import run_events as events_of

from laneboard.board import runs as br
from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.domain.runs import TRANSITIONS, RunStatus
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store

ME = human("alice")


def set_status(store: Store, run_id: int, status: str) -> None:
    with store.write() as tx:
        assert tx.update_run(run_id, {"status": status}) is not None


def run_events(board: Board, run_id: int) -> list[dict[str, Any]]:
    return events_of(board.store, run_id)


@pytest.fixture
def web(board: Board) -> Board:
    board.add_project(ME, "WEB")
    board.add_project(ME, "API")
    return board


def test_a_run_is_created_with_its_event_and_cards_join_it(web: Board) -> None:
    run = web.create_run(ME, "WEB", "ship the billing export")
    assert (run["status"], run["project"], run["card_total"]) == ("active", "WEB", 0)
    card = web.create_card(ME, "WEB", "export as CSV", run_id=run["id"])
    web.create_card(ME, "WEB", "not in the run")
    assert card.run_id == run["id"] and card.to_dict()["run_id"] == run["id"]
    assert [c.ref for c in web.list_cards(run_id=run["id"])] == [card.ref]
    assert web.run(run["id"])["cards"] == {"todo": 1}
    types = [e["type"] for e in run_events(web, run["id"])]
    assert types == ["run.created", "card.created"]


def test_a_card_joins_only_a_run_of_its_own_project(web: Board) -> None:
    run = web.create_run(ME, "API", "the api")
    with pytest.raises(LaneboardError) as err:
        web.create_card(ME, "WEB", "wrong project", run_id=run["id"])
    assert err.value.code == "BAD_INPUT"
    with pytest.raises(LaneboardError) as err:
        web.create_card(ME, "WEB", "no such run", run_id=999)
    assert err.value.code == "NOT_FOUND"
    assert web.list_cards() == []


def test_only_a_person_creates_or_changes_runs(web: Board) -> None:
    with pytest.raises(LaneboardError) as err:
        web.create_run(agent("w1"), "WEB", "mine")
    assert err.value.code == "FORBIDDEN"
    run = web.create_run(ME, "WEB", "goal")
    with pytest.raises(LaneboardError) as err:
        web.transition_run(agent("w1"), run["id"], "pause", idempotency_key="k")
    assert err.value.code == "FORBIDDEN"
    assert web.run(run["id"])["status"] == "active"
    assert web.runs(project="WEB")[0]["id"] == run["id"]
    assert web.runs(statuses=["stopped"]) == []


@pytest.mark.parametrize("action", sorted(TRANSITIONS))
def test_every_action_from_every_state_in_the_store(web: Board, store: Store, action: str) -> None:
    allowed, target = TRANSITIONS[action]
    for state in RunStatus:
        run = web.create_run(ME, "WEB", f"{action} from {state.value}")
        set_status(store, run["id"], state.value)
        before = run_events(web, run["id"])
        key = f"{action}-{state.value}"
        if state in allowed:
            out = web.transition_run(ME, run["id"], action, idempotency_key=key)
            assert (out["from"], out["target"], out["status"]) == (
                state.value,
                target.value,
                target.value,
            )
            assert web.run(run["id"])["status"] == target.value
            got = run_events(web, run["id"])[len(before) :]
            assert [e["type"] for e in got] == [f"run.{action.replace('-', '_')}"]
            assert got[0]["payload"]["to"] == target.value
        else:
            with pytest.raises(LaneboardError) as err:
                web.transition_run(ME, run["id"], action, idempotency_key=key)
            assert err.value.code == "ILLEGAL_RUN_TRANSITION"
            assert web.run(run["id"])["status"] == state.value
            assert run_events(web, run["id"]) == before


def test_a_key_replays_its_first_response_and_refuses_another_request(web: Board) -> None:
    run = web.create_run(ME, "WEB", "goal")
    first = web.transition_run(ME, run["id"], "pause", idempotency_key="k1")
    again = web.transition_run(ME, run["id"], "pause", idempotency_key="k1")
    assert again == {**first, "replayed": True}
    assert len(run_events(web, run["id"])) == 2  # created, paused: the replay wrote nothing
    for action, reason in (("resume", None), ("pause", "another body")):
        with pytest.raises(LaneboardError) as err:
            web.transition_run(ME, run["id"], action, idempotency_key="k1", reason=reason)
        assert err.value.code == "IDEMPOTENCY_CONFLICT"
    assert web.run(run["id"])["status"] == "paused-intake"
    for key in (None, "", "   "):
        with pytest.raises(LaneboardError) as err:
            web.transition_run(ME, run["id"], "resume", idempotency_key=key)
        assert err.value.code == "BAD_INPUT"
    with pytest.raises(LaneboardError) as err:
        web.transition_run(ME, run["id"], "restart", idempotency_key="k9")
    assert err.value.code == "BAD_INPUT"


def test_a_transition_from_a_stale_read_changes_nothing(
    web: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conditional update checks its affected row: a run that moved on between the
    read and the write is refused, and neither the event nor the key is kept."""
    run = web.create_run(ME, "WEB", "goal")
    stale = web.run_record(run["id"])
    web.transition_run(ME, run["id"], "pause", idempotency_key="a")
    real = br.load
    monkeypatch.setattr(br, "load", lambda tx, rid, lock=False: stale if lock else real(tx, rid))
    with pytest.raises(LaneboardError) as err:
        web.transition_run(ME, run["id"], "stop", idempotency_key="b")
    assert err.value.code == "ILLEGAL_RUN_TRANSITION"
    assert "meanwhile" in err.value.message
    monkeypatch.setattr(br, "load", real)
    assert web.run(run["id"])["status"] == "paused-intake"
    assert [e["type"] for e in run_events(web, run["id"])] == ["run.created", "run.pause"]
    out = web.transition_run(ME, run["id"], "resume", idempotency_key="b")  # key unused
    assert out["status"] == "active"


def test_two_racing_transitions_one_wins(store_url: str, clock: Any) -> None:
    stores = [open_store(store_url, clock) for _ in range(2)]
    try:
        boards = [Board(s) for s in stores]
        boards[0].add_project(ME, "WEB")
        for round_ in range(5):
            run = boards[0].create_run(ME, "WEB", f"race {round_}")
            gate = threading.Barrier(2)
            got: list[str] = []

            def go(
                i: int, rid: int = run["id"], gate: threading.Barrier = gate, got: list[str] = got
            ) -> None:
                gate.wait(timeout=30)
                action = "pause"  # from active only: the second one cannot follow
                try:
                    boards[i].transition_run(ME, rid, action, idempotency_key=f"{rid}-{i}")
                    got.append("ok")
                except LaneboardError as err:
                    got.append(err.code)

            threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert sorted(got) == ["ILLEGAL_RUN_TRANSITION", "ok"], got
            events = [e for e in run_events(boards[0], run["id"]) if e["type"] != "run.created"]
            assert len(events) == 1
            assert boards[0].run(run["id"])["status"] == events[0]["payload"]["to"]
    finally:
        for s in stores:
            s.close()


def test_stop_with_a_live_turn_drains(web: Board, store: Store) -> None:
    run = web.create_run(ME, "WEB", "goal")
    card = web.create_card(ME, "WEB", "t", run_id=run["id"])
    with store.write() as tx:
        tx.insert_queue_row("work", card.id, "worker", card.project_id, "m", "/tmp", 1, 1, {})
    out = web.transition_run(ME, run["id"], "stop", idempotency_key="s")
    assert (out["target"], out["status"]) == ("stopped", "draining")
    view = web.run(run["id"])
    assert (view["status"], view["stop_mode"], view["ended_at"]) == ("draining", "drain", None)
    out = web.transition_run(ME, run["id"], "force-stop", idempotency_key="f")
    assert out["status"] == "draining" and web.run(run["id"])["stop_mode"] == "force"


def test_candidates_of_a_run_and_of_claiming_runs_only(web: Board) -> None:
    """The supervisor's claims read candidates filtered in the query: other cards never
    crowd a run's cards out of the bounded read, nor a paused run's cards everyone else's."""
    run = web.create_run(ME, "WEB", "mine")
    paused = web.create_run(ME, "WEB", "paused")
    web.transition_run(ME, paused["id"], "pause", idempotency_key="p")
    crowd = [web.create_card(ME, "WEB", f"urgent {i}", priority=0).ref for i in range(30)]
    mine = web.create_card(ME, "WEB", "the run's own", priority=3, run_id=run["id"]).ref
    held = [web.create_card(ME, "WEB", f"paused {i}", priority=0, run_id=paused["id"]).ref
            for i in range(30)]  # fmt: skip
    got = web.candidates(include_unassigned=True, run_id=run["id"], limit=2)
    assert [c.card.ref for c in got] == [mine]
    claiming = ("active", "degraded")
    got = web.candidates(include_unassigned=True, run_statuses=claiming, limit=100)
    refs = {c.card.ref for c in got}
    assert mine in refs and set(crowd) <= refs and not refs & set(held)
