"""The agent view's board services on both backends: transcripts written by the
supervisor's sink, stop requests, follow-ups, answers, rejections and the inbox."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from laneboard.agents.base import AgentEvent, TurnResult, Usage
from laneboard.board.inbox import inbox
from laneboard.board.questions import ask
from laneboard.board.service import Board
from laneboard.domain.model import Card, agent, human, system
from laneboard.domain.transcript import entry
from laneboard.errors import LaneboardError
from laneboard.supervisor.transcript_sink import TranscriptSink, stop_requested

ME = human("alice")
BOT = agent("w1")
RUNTIME = system("supervisor")


def refused(code: str, fn: Any, *args: Any, **kw: Any) -> LaneboardError:
    with pytest.raises(LaneboardError) as info:
        fn(*args, **kw)
    assert info.value.code == code, info.value.line()
    return info.value


def types(board: Board, ref: str) -> list[str]:
    return [e.type for e in board.events(card=ref, limit=10_000)]


@pytest.fixture
def web(board: Board) -> Board:
    board.add_project(ME, "WEB", "Website", "/srv/web", "main")
    return board


def runtime(board: Board) -> Any:
    log = SimpleNamespace(warn=lambda *a, **k: None, info=lambda *a, **k: None)
    return SimpleNamespace(store=board.store, actor=RUNTIME, log=log,
                           now=board.store.clock.now_ms)  # fmt: skip


def start_turn(board: Board, card: Card, kind: str = "claude") -> int:
    with board.store.write() as tx:
        return tx.start_turn(None, card.id, card.delivery_round, None, kind, "sess-1", "go")


def claimed(board: Board, title: str = "Fix login", **kw: Any) -> Card:
    c = board.create_card(ME, "WEB", title, **kw)
    return board.claim(BOT, c.ref)


def test_the_sink_writes_one_shape_per_turn_with_an_event_per_flush(
    web: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEB_API_KEY", "sk-very-secret-value")
    card = claimed(web)
    turn = start_turn(web, card)
    sink = TranscriptSink(runtime(web), card, turn, "claude")
    sink.add(entry("prompt", "do the work"))
    sink.on_event(AgentEvent("tool_use", {"name": "Bash", "id": "t1",
                                          "input": {"command": "lb card get WEB-1"}}))  # fmt: skip
    sink.on_event(AgentEvent("text_delta", {"text": "Hel"}))  # left out: the message follows
    sink.flush()
    first = web.transcript(card.ref)
    assert [e["type"] for e in first["entries"]] == ["prompt", "lb"]
    assert first["running"] == turn and first["turns"][0]["outcome"] == "running"
    sink.on_event(AgentEvent("text", {"text": "my key is sk-very-secret-value"}))
    sink.close(TurnResult(True, final_text="done", usage=Usage(10, 5, 0.01)), "ok")
    rest = web.transcript(card.ref, after=first["cursor"])
    assert [e["type"] for e in rest["entries"]] == ["message", "result"]
    assert rest["entries"][0]["text"] == "my key is ***"  # redacted like every stored text
    assert [e["seq"] for e in rest["entries"]] == [3, 4]
    outputs = [e for e in web.events(card=card.ref, limit=100) if e.type == "turn.output"]
    assert sum(e.payload["entries"] for e in outputs) == 4  # each flush says what it wrote
    assert outputs[-1].payload["last"] == rest["entries"][-1]["id"]
    assert web.transcript(card.ref, turn=turn, limit=1)["entries"][0]["type"] == "prompt"
    refused("BAD_INPUT", web.transcript, card.ref, limit=0)
    refused("NOT_FOUND", web.transcript, "WEB-99")


def test_a_command_turn_gets_its_output_as_the_message(web: Board) -> None:
    card = claimed(web)
    sink = TranscriptSink(runtime(web), card, start_turn(web, card, "command"), "command")
    sink.close(TurnResult(False, final_text="ran\n", exit_code=3, error="exit 3: boom"), "failed")
    got = web.transcript(card.ref)["entries"]
    assert [(e["type"], e["text"]) for e in got][:2] == [("message", "ran\n"),
                                                           ("error", "exit 3: boom")]  # fmt: skip
    assert got[2]["type"] == "result" and got[2]["exit_code"] == 3 and got[2]["is_error"]


def test_stopping_a_turn_is_a_persons_request_the_supervisor_reads(web: Board) -> None:
    card = claimed(web)
    refused("CONFLICT", web.stop_turn, ME, card.ref)  # nothing runs yet
    turn = start_turn(web, card)
    refused("FORBIDDEN", web.stop_turn, BOT, card.ref)
    assert stop_requested(runtime(web), turn) is None
    assert web.stop_turn(ME, card.ref) == {"card": card.ref, "turn": turn, "requested_by": "alice"}
    assert stop_requested(runtime(web), turn) == "alice"
    web.stop_turn(ME, card.ref)  # asked twice: one event
    assert types(web, card.ref).count("turn.stop_requested") == 1
    assert web.transcript(card.ref)["turns"][0]["stop_requested_by"] == "alice"


def test_follow_ups_queue_for_the_next_turn(web: Board) -> None:
    card = claimed(web)
    refused("FORBIDDEN", web.tell, BOT, card.ref, "hi")
    refused("BAD_INPUT", web.tell, ME, card.ref, "  ")
    got = web.tell(ME, card.ref, "also update the changelog")
    assert got["body"] == "also update the changelog" and got["turn"] is None
    assert "followup.queued" in types(web, card.ref)
    with web.store.write() as tx:
        pending = tx.pending_followups(card.id)
        turn = tx.start_turn(None, card.id, 1, None, "claude", None, "go")
        tx.deliver_followups([int(r["id"]) for r in pending], turn)
        assert tx.pending_followups(card.id) == []
    assert web.transcript(card.ref)["followups"][0]["turn"] == turn
    done = web.create_card(ME, "WEB", "Old", status="backlog")
    web.move(ME, done.ref, "canceled")
    refused("CONFLICT", web.tell, ME, done.ref, "too late")


def test_answering_releases_the_asking_card_to_todo(web: Board) -> None:
    card = claimed(web)
    ask(web, BOT, card.ref, "which port?")
    refused("FORBIDDEN", web.answer, BOT, card.ref, "8080")
    new = web.answer(ME, card.ref, "8080")
    assert new.status.value == "todo" and new.holder is None
    assert web.comments(card.ref)[-1].kind.value == "answer"
    refused("CONFLICT", web.answer, ME, card.ref, "again")  # todo: no open question
    refused("BAD_INPUT", web.answer, ME, card.ref, "")


def delivered(board: Board, mode: str = "human") -> Card:
    card = claimed(board, "Ship it", acceptance=["it ships"], acceptance_mode=mode)
    board.report(BOT, card.ref, "shipped")
    return board.move(BOT, card.ref, "in_review")


def test_rejecting_names_the_must_fix_items_and_starts_the_next_round(web: Board) -> None:
    card = delivered(web)
    refused("BAD_INPUT", web.reject, ME, card.ref, [])
    refused("FORBIDDEN", web.reject, BOT, card.ref, ["x"])
    new = web.reject(ME, card.ref, ["the form loses input", "add a test"], note="close")
    assert new.status.value == "todo" and new.delivery_round == 2
    assert [c.to_dict() for c in new.acceptance][1:] == [
        {"id": "R1.1", "text": "the form loses input"},
        {"id": "R1.2", "text": "add a test"},
    ]
    change = web.comments(card.ref)[-1]
    assert change.kind.value == "change" and "R1.2: add a test" in change.body
    assert change.body.endswith("close")
    refused("CONFLICT", web.reject, ME, card.ref, ["again"])
    auto = delivered(web, "auto")
    refused("CONFLICT", web.reject, ME, auto.ref, ["x"])


def test_the_inbox_lists_each_kind_with_the_action_that_clears_it(web: Board) -> None:
    asking = claimed(web, "Asks")
    ask(web, BOT, asking.ref, "which port?")
    review = delivered(web)
    held = claimed(web, "Held")
    with web.store.write() as tx:
        current = tx.card(held.id)
        assert current is not None
        web.hold(tx, RUNTIME, current, "stop", 1, "stopped by alice", reason="stopped")
    items = inbox(web)
    assert [(i["kind"], i["card"]) for i in items] == [
        ("question", asking.ref),
        ("acceptance", review.ref),
        ("hold", held.ref),
    ]
    q, acc, hold = items
    assert q["detail"] == "which port?" and q["actions"][0]["input"] == "body"
    assert q["actions"][0]["path"] == f"/api/v1/cards/{asking.ref}/answer"
    assert [a["label"] for a in acc["actions"]] == ["approve", "reject"]
    assert hold["actions"][0]["body"] == {"to": "todo", "note": "hold released"}
    web.answer(ME, asking.ref, "8080")
    web.move(ME, review.ref, "done")
    web.move(ME, held.ref, "todo")
    assert inbox(web) == []
    assert inbox(web, ("schedule",)) == []


def test_the_inbox_names_refused_landings_and_failing_schedules(web: Board) -> None:
    from laneboard.board.schedules import Schedules

    card = web.create_card(ME, "WEB", "Landed?", acceptance_mode="off")
    web.claim(BOT, card.ref)
    web.report(BOT, card.ref, "made")
    web.move(BOT, card.ref, "in_review")
    web.move(ME, card.ref, "done")
    schedules = Schedules(web.store)
    schedules.add(ME, "nightly", "0 3 * * *", {"project": "WEB", "title": "t"}, timezone="UTC")
    with web.store.write() as tx:
        tx.insert_lane(card.id, 1, card.project_id, "/r", "/r/lane", "lb/web-1", "main", "0" * 40)
        tx.append_event("lane.land_blocked", RUNTIME, card_id=card.id, project_id=card.project_id,
                        payload={"ref": card.ref, "reason": "the base moved"})  # fmt: skip
        sid = int(tx.schedule_row("nightly")["id"])
        tx.update_schedule(sid, {"last_outcome": "dispatch-failed", "last_detail": "no project",
                                 "last_outcome_at": tx.now()})  # fmt: skip
    landing, schedule = inbox(web)
    assert (landing["kind"], landing["card"], landing["detail"]) == ("landing", card.ref,
                                                                     "the base moved")  # fmt: skip
    assert landing["actions"][0]["path"] == f"/api/v1/cards/{card.ref}/land"
    assert (schedule["kind"], schedule["detail"]) == ("schedule", "no project")
    assert schedule["actions"][0]["path"] == "/api/v1/schedules/nightly/disable"
    schedules.set_enabled(ME, "nightly", False)
    assert [i["kind"] for i in inbox(web)] == ["landing"]


def test_a_turn_that_breaks_off_keeps_what_its_sink_read(web: Board) -> None:
    card = claimed(web)
    sink = TranscriptSink(runtime(web), card, start_turn(web, card), "pi")
    sink.on_event(AgentEvent("text", {"text": "half a thought"}))
    sink.abandon()
    assert [e["text"] for e in web.transcript(card.ref)["entries"]] == ["half a thought"]
    sink._thread.join(timeout=5)
    assert not sink._thread.is_alive()  # its flushing thread ends with it
