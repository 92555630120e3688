"""The orchestrator_control verbs on the board, both backends: who may call what, the
refusals the model sees, and the runtime's records (turns, budgets, uncertainty)."""

from __future__ import annotations

from typing import Any

import pytest

from laneboard.board.orchestrate import Orchestrations
from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.domain.assignments import AState
from laneboard.domain.budgets import Budgets
from laneboard.domain.model import Actor, agent, human
from laneboard.errors import LaneboardError

ME = human("alice")
SPEC = {"allow_paths": ["src/producer", "src/consumer", "src/extra"], "checks": ["true"]}


class Run:
    def __init__(self, board: Board, budgets: Budgets | None = None) -> None:
        board.add_project(ME, "P")
        self.board = board
        self.orch = Orchestrations(board)
        self.rt = Runtime(board)
        self.o = self.rt.create(ME, "P", "the contract", SPEC, budgets or Budgets(),
                                {"repo": "/r", "head": "abc"})  # fmt: skip
        self.id = self.o.run_id
        assert self.o.coordinator_card_id is not None
        self.coordinator = agent("coordinator", self.o.coordinator_card_id, 1)

    def call(self, actor: Actor, verb: str, **args: Any) -> dict[str, Any]:
        return self.orch.control(actor, verb, args)

    def specialist(self, name: str) -> Actor:
        a = self.orch.plan(self.id)[name]
        return agent(a.owner, a.card_id, 1)

    def assign_two(self) -> None:
        self.call(self.coordinator, "assign", assignment="producer", owner="specialist-a",
                  brief="write the producer", paths=["src/producer"])  # fmt: skip
        self.call(self.coordinator, "assign", assignment="consumer", owner="specialist-b",
                  brief="write the consumer", paths=["src/consumer"], deps=["producer"])  # fmt: skip

    def refused(self, actor: Actor, verb: str, **args: Any) -> LaneboardError:
        before = self.orch.inspect(self.id)
        with pytest.raises(LaneboardError) as err:
            self.call(actor, verb, **args)
        assert self.orch.inspect(self.id) == before  # nothing changed
        return err.value


def test_assignments_are_cards_of_the_run(board: Board) -> None:
    r = Run(board)
    r.assign_two()
    view = r.call(r.coordinator, "inspect")
    assert [(a["name"], a["owner"], a["revision"], a["status"]) for a in view["assignments"]] == [
        ("producer", "specialist-a", 1, "todo"),
        ("consumer", "specialist-b", 1, "todo"),
    ]
    card = board.get(view["assignments"][1]["card"])
    assert card.run_id == r.id and card.allowed_paths == ("src/consumer",)
    assert card.assignee == "specialist-b" and card.meta["assignment"] == "consumer"
    assert view["ready"] == ["producer"]
    assert view["budgets"]["model_calls"] == {"used": 0, "limit": 64}


def test_overlapping_paths_and_missing_dependencies_are_refused(board: Board) -> None:
    r = Run(board)
    r.assign_two()
    err = r.refused(r.coordinator, "assign", assignment="extra", owner="specialist-c",
                    brief="x", paths=["src/producer/api.py"])  # fmt: skip
    assert err.code == "PATH_OVERLAP"
    err = r.refused(r.coordinator, "assign", assignment="late", owner="specialist-c",
                    brief="x", paths=["src/extra"], deps=["nothing"])  # fmt: skip
    assert err.code == "UNKNOWN_DEPENDENCY"
    err = r.refused(r.coordinator, "assign", assignment="other", owner="specialist-c",
                    brief="x", paths=["docs"])  # fmt: skip
    assert err.code == "OUT_OF_SCOPE"


def test_only_the_coordinator_plans_and_only_owners_act(board: Board) -> None:
    r = Run(board)
    r.assign_two()
    producer, consumer = r.specialist("producer"), r.specialist("consumer")
    assert r.refused(producer, "assign", assignment="x", owner="y", brief="b",
                     paths=["src/consumer/x"]).code == "FORBIDDEN"  # fmt: skip
    assert r.refused(r.coordinator, "accept", assignment="producer", revision=1).code == (
        "FORBIDDEN"
    )
    assert r.refused(consumer, "accept", assignment="producer", revision=1).code == "FORBIDDEN"
    stranger = agent("someone", board.create_card(ME, "P", "unrelated").id, 1)
    assert r.refused(stranger, "inspect").code == "FORBIDDEN"
    assert r.call(consumer, "inspect", assignment="consumer")["assignment"]["name"] == "consumer"


def test_a_report_before_accept_or_for_an_old_revision_is_refused(board: Board) -> None:
    r = Run(board)
    r.assign_two()
    producer, consumer = r.specialist("producer"), r.specialist("consumer")
    assert r.refused(producer, "report", assignment="producer", revision=1).code == ("NOT_ACCEPTED")
    r.call(consumer, "accept", assignment="consumer", revision=1)
    r.call(consumer, "checkpoint", assignment="consumer", revision=1, note="half done")
    out = r.call(r.coordinator, "revise", assignment="consumer", brief="the field is id")
    assert [(a["name"], a["revision"]) for a in out["changed"]] == [("consumer", 2)]
    assert r.refused(consumer, "report", assignment="consumer", revision=1).code == (
        "STALE_REVISION"
    )
    r.call(consumer, "accept", assignment="consumer", revision=2)
    done = r.call(consumer, "report", assignment="consumer", revision=2, note="done")
    assert done["changed"][0]["state"] == "running"  # a report completes nothing
    assert r.orch.plan(r.id)["producer"].revision == 1


def test_complete_is_refused_until_every_assignment_is_verified(board: Board) -> None:
    r = Run(board)
    r.assign_two()
    assert r.refused(r.coordinator, "complete").code == "UNVERIFIED_ASSIGNMENTS"
    for name in ("producer", "consumer"):
        who = r.specialist(name)
        r.call(who, "accept", assignment=name, revision=1)
        r.call(who, "report", assignment=name, revision=1)
    assert r.refused(r.coordinator, "complete").code == "UNVERIFIED_ASSIGNMENTS"
    with pytest.raises(LaneboardError) as err:
        r.rt.verified(r.id, "producer", 2, [], "h1")  # evidence of a revision never reported
    assert err.value.code == "STALE_REVISION"
    r.rt.verified(r.id, "producer", 1, [{"command": "true", "exit_code": 0}], "h1")
    turn = r.rt.dispatch(r.id, "specialist-b", "answer", r.orch.plan(r.id)["consumer"])
    r.rt.verified(r.id, "consumer", 1, [], "h2")
    assert r.refused(r.coordinator, "complete").code == "TURN_ACTIVE"
    r.rt.end_turn(r.id, turn, True, 10, 5)
    r.call(r.coordinator, "complete")
    assert r.orch.get(r.id).phase == "completing"
    assert board.get(r.orch.plan(r.id)["producer"].card_id or 0).status.value == "done"
    assert r.refused(r.coordinator, "assign", assignment="late", owner="x", brief="b",
                     paths=["src/consumer/late"]).code == "ILLEGAL_TRANSITION"  # fmt: skip


def test_each_revision_dispatches_once_and_calls_count_against_the_budget(board: Board) -> None:
    r = Run(board, Budgets(max_model_calls=3))
    r.assign_two()
    producer = r.orch.plan(r.id)["producer"]
    turn = r.rt.dispatch(r.id, "specialist-a", "work", producer)
    with pytest.raises(LaneboardError) as err:
        r.rt.dispatch(r.id, "specialist-a", "work", producer)
    assert err.value.code == "CONFLICT"
    r.rt.end_turn(r.id, turn, False, 100, 1000)  # a failed turn still counted
    r.rt.dispatch(r.id, "coordinator", "coordinate")
    r.rt.count_steer(r.id)
    with pytest.raises(LaneboardError) as err:
        r.rt.dispatch(r.id, "coordinator", "coordinate")
    assert err.value.code == "BUDGET_EXHAUSTED" and "model_calls" in err.value.message
    o = r.orch.get(r.id)
    assert (o.usage.model_calls, o.usage.output_bytes, o.usage.elapsed_ms) == (3, 100, 1000)


def test_interrupted_work_is_uncertain_until_recovered(board: Board) -> None:
    r = Run(board)
    r.assign_two()
    producer = r.specialist("producer")
    r.call(producer, "accept", assignment="producer", revision=1)
    r.rt.dispatch(r.id, "specialist-a", "work", r.orch.plan(r.id)["producer"])
    assert r.rt.interrupted(r.id) == ["producer"]
    a = r.orch.plan(r.id)["producer"]
    assert a.uncertain and a.state is AState.RUNNING
    assert [t["state"] for t in r.rt.turns(r.id)] == ["uncertain"]
    assert r.refused(r.coordinator, "recover", assignment="producer", decision="again").code == (
        "BAD_INPUT"
    )
    r.call(r.coordinator, "recover", assignment="producer", decision="retry")
    a = r.orch.plan(r.id)["producer"]
    assert (a.revision, a.state, a.uncertain) == (2, AState.QUEUED, False)
    assert r.orch.inspect(r.id)["ready"] == ["producer"]


def test_questions_wait_for_the_coordinator_s_answer(board: Board) -> None:
    r = Run(board)
    r.assign_two()
    consumer = r.specialist("consumer")
    r.call(consumer, "accept", assignment="consumer", revision=1)
    assert r.refused(r.coordinator, "answer", assignment="consumer", note="x").code == (
        "ILLEGAL_TRANSITION"
    )
    r.rt.waiting(r.id, "consumer", "which field holds the id?")
    card_id = r.orch.plan(r.id)["consumer"].card_id
    assert board.get(card_id or 0).status.value == "awaiting"
    r.call(r.coordinator, "answer", assignment="consumer", note="the field is `id`")
    view = r.call(consumer, "inspect", assignment="consumer")
    assert view["assignment"]["state"] == "running"
    assert view["questions"][-1]["body"] == "the field is `id`"


def test_a_person_steers_as_the_coordinator(board: Board) -> None:
    r = Run(board)
    with pytest.raises(LaneboardError) as err:
        r.orch.control(ME, "inspect", {})
    assert err.value.code == "BAD_INPUT"
    r.call(ME, "assign", run=r.id, assignment="producer", owner="specialist-a", brief="b",
           paths=["src/producer"])  # fmt: skip
    assert list(r.orch.plan(r.id)) == ["producer"]
