"""The assignment rules: one owner per path, existing deps, depth, revisions, completion."""

from __future__ import annotations

from dataclasses import replace

import pytest

from laneboard.domain import assignments as asg
from laneboard.domain.assignments import Assignment, AState
from laneboard.domain.budgets import Budgets, Usage, exhausted
from laneboard.errors import LaneboardError

ALLOWED = ("src/producer", "src/consumer", "src/shared")


def new(name: str, owner: str, *paths: str, deps: tuple[str, ...] = ()) -> Assignment:
    return Assignment(name, owner, f"do {name}", tuple(paths), deps)


def plan_of(*items: Assignment) -> dict[str, Assignment]:
    plan: dict[str, Assignment] = {}
    for a in items:
        plan[a.name] = asg.assign(plan, a, allowed=ALLOWED)
    return plan


def code(exc: pytest.ExceptionInfo[LaneboardError]) -> str:
    return exc.value.code


def base_plan() -> dict[str, Assignment]:
    return plan_of(
        new("producer", "specialist-a", "src/producer"),
        new("consumer", "specialist-b", "src/consumer", deps=("producer",)),
    )


def test_an_assign_starts_queued_at_revision_one() -> None:
    plan = base_plan()
    assert [(a.name, a.revision, a.state) for a in plan.values()] == [
        ("producer", 1, AState.QUEUED),
        ("consumer", 1, AState.QUEUED),
    ]
    assert [a.name for a in asg.ready(plan)] == ["producer"]  # the consumer waits


@pytest.mark.parametrize("path", ["src/producer", "src/producer/api.py", "src"])
def test_overlapping_owned_paths_are_refused(path: str) -> None:
    plan = base_plan()
    with pytest.raises(LaneboardError) as err:
        asg.assign(plan, new("other", "specialist-c", path), allowed=("src",))
    assert code(err) == "PATH_OVERLAP" and "producer" in err.value.message


def test_a_cancelled_assignment_frees_its_paths() -> None:
    plan = base_plan()
    plan.update(asg.cancel(plan, "consumer"))
    again = asg.assign(plan, new("consumer2", "specialist-b", "src/consumer"), allowed=ALLOWED)
    assert again.paths == ("src/consumer",)


def test_a_path_outside_the_goal_is_refused() -> None:
    with pytest.raises(LaneboardError) as err:
        asg.assign({}, new("x", "specialist-a", "docs"), allowed=ALLOWED)
    assert code(err) == "OUT_OF_SCOPE"


def test_a_dependency_on_a_missing_assignment_is_refused() -> None:
    with pytest.raises(LaneboardError) as err:
        asg.assign({}, new("consumer", "specialist-b", "src/consumer", deps=("producer",)))
    assert code(err) == "UNKNOWN_DEPENDENCY" and "does not exist yet" in err.value.message
    with pytest.raises(LaneboardError) as err:
        asg.assign({}, new("self", "specialist-b", "src/consumer", deps=("self",)))
    assert code(err) == "UNKNOWN_DEPENDENCY"


def test_the_dependency_depth_is_bounded() -> None:
    plan: dict[str, Assignment] = {}
    prev: tuple[str, ...] = ()
    for i in range(3):
        plan[f"a{i}"] = asg.assign(
            plan, new(f"a{i}", "specialist-a", f"p{i}", deps=prev), max_depth=3
        )
        prev = (f"a{i}",)
    with pytest.raises(LaneboardError) as err:
        asg.assign(plan, new("a3", "specialist-a", "p3", deps=prev), max_depth=3)
    assert code(err) == "DEPTH_LIMIT"


def test_live_duplicate_names_and_a_seventeenth_role_are_refused() -> None:
    plan = base_plan()
    with pytest.raises(LaneboardError) as err:
        asg.assign(plan, new("producer", "specialist-a", "src/shared"), allowed=ALLOWED)
    assert code(err) == "DUPLICATE_ASSIGNMENT"
    many: dict[str, Assignment] = {}
    for i in range(15):
        many[f"w{i}"] = asg.assign(many, new(f"w{i}", f"role-{i}", f"p{i}"))
    with pytest.raises(LaneboardError) as err:
        asg.assign(many, new("w15", "role-15", "p15"))
    assert code(err) == "ROLE_LIMIT"
    assert asg.assign(many, new("w15", "role-3", "p15")).owner == "role-3"  # an existing role


def test_a_report_before_accept_is_refused_and_does_not_complete() -> None:
    a = base_plan()["producer"]
    with pytest.raises(LaneboardError) as err:
        asg.report(a, "specialist-a", 1)
    assert code(err) == "NOT_ACCEPTED"
    a = asg.report(asg.accept(a, "specialist-a", 1), "specialist-a", 1)
    assert a.state is AState.RUNNING and a.reported == 1 and a.verified == 0


def test_only_the_owner_acts_on_an_assignment() -> None:
    a = base_plan()["producer"]
    with pytest.raises(LaneboardError) as err:
        asg.accept(a, "specialist-b", 1)
    assert code(err) == "FORBIDDEN"


def test_a_report_for_an_old_revision_is_refused() -> None:
    plan = base_plan()
    plan["consumer"] = asg.accept(plan["consumer"], "specialist-b", 1)
    plan["consumer"] = asg.checkpoint(plan["consumer"], "specialist-b", 1, "halfway")
    plan.update(asg.revise(plan, "consumer", {"brief": "the field is called id"}))
    assert plan["consumer"].revision == 2 and plan["consumer"].state is AState.QUEUED
    with pytest.raises(LaneboardError) as err:
        asg.report(plan["consumer"], "specialist-b", 1)
    assert code(err) == "STALE_REVISION"
    with pytest.raises(LaneboardError) as err:
        asg.verified(plan["consumer"], 1, [])
    assert code(err) == "STALE_REVISION"  # stale evidence is not accepted


def test_revising_a_producer_bumps_its_dependents_only() -> None:
    plan = plan_of(
        new("producer", "specialist-a", "src/producer"),
        new("consumer", "specialist-b", "src/consumer", deps=("producer",)),
        new("shared", "specialist-c", "src/shared"),
    )
    plan["shared"] = replace(plan["shared"], state=AState.RUNNING, accepted=1, checkpoint="x")
    changed = asg.revise(plan, "producer", {"brief": "add a field"})
    assert {n: a.revision for n, a in changed.items()} == {"producer": 2, "consumer": 2}
    assert "shared" not in changed


def test_a_material_change_to_active_work_needs_a_checkpoint_and_an_ended_turn() -> None:
    plan = base_plan()
    plan["producer"] = asg.accept(plan["producer"], "specialist-a", 1)
    with pytest.raises(LaneboardError) as err:
        asg.revise(plan, "producer", {"brief": "new"})
    assert code(err) == "CHECKPOINT_REQUIRED"
    plan["producer"] = asg.checkpoint(plan["producer"], "specialist-a", 1, "saved")
    with pytest.raises(LaneboardError) as err:
        asg.revise(plan, "producer", {"brief": "new"}, active=["producer"])
    assert code(err) == "TURN_ACTIVE"
    assert asg.revise(plan, "producer", {"brief": "new"})["producer"].revision == 2


def test_complete_needs_every_assignment_verified_and_no_active_turn() -> None:
    plan = base_plan()
    with pytest.raises(LaneboardError) as err:
        asg.check_complete(plan, [])
    assert code(err) == "UNVERIFIED_ASSIGNMENTS" and "producer (revision 1" in err.value.message
    for n, owner in (("producer", "specialist-a"), ("consumer", "specialist-b")):
        a = asg.report(asg.accept(plan[n], owner, 1), owner, 1)
        plan[n] = asg.verified(a, 1, [{"command": "true", "exit_code": 0}])
    with pytest.raises(LaneboardError) as err:
        asg.check_complete(plan, ["consumer"])
    assert code(err) == "TURN_ACTIVE"
    asg.check_complete(plan, [])
    plan.update(asg.revise(plan, "producer", {"brief": "again"}))
    with pytest.raises(LaneboardError) as err:
        asg.check_complete(plan, [])
    assert code(err) == "UNVERIFIED_ASSIGNMENTS"  # the revision invalidated both


def test_verified_producers_release_their_dependents() -> None:
    plan = base_plan()
    a = asg.report(asg.accept(plan["producer"], "specialist-a", 1), "specialist-a", 1)
    plan["producer"] = replace(a, dispatched=1)
    assert asg.ready(plan) == []  # a report releases nothing
    plan["producer"] = asg.verified(plan["producer"], 1, [])
    assert [x.name for x in asg.ready(plan)] == ["consumer"]


def test_recover_decides_interrupted_work_without_replaying_it() -> None:
    a = replace(base_plan()["producer"], state=AState.RUNNING, accepted=1, dispatched=1)
    with pytest.raises(LaneboardError):
        asg.recover(a, "retry")  # not uncertain
    a = replace(a, uncertain=True)
    assert asg.ready({"producer": replace(a, state=AState.QUEUED)}) == []
    retry = asg.recover(a, "retry")
    assert (retry.revision, retry.state, retry.uncertain) == (2, AState.QUEUED, False)
    kept = asg.recover(a, "keep")
    assert (kept.revision, kept.reported, kept.uncertain) == (1, 1, False)
    assert asg.recover(a, "cancel").state is AState.CANCELLED
    with pytest.raises(LaneboardError) as err:
        asg.recover(a, "replay")
    assert code(err) == "BAD_INPUT"


def test_the_state_table_maps_onto_card_statuses() -> None:
    assert {s.value: asg.CARD_STATUS[s].value for s in AState} == {
        "queued": "todo",
        "running": "in_progress",
        "waiting_for_input": "awaiting",
        "completed": "done",
        "failed": "blocked",
        "cancelled": "canceled",
    }


def test_an_assignment_round_trips_through_its_stored_form() -> None:
    a = replace(base_plan()["consumer"], evidence=({"command": "true", "exit_code": 0},))
    assert Assignment.from_dict(a.to_dict()) == a


def test_budgets_default_to_the_seed_and_each_one_exhausts() -> None:
    b = Budgets()
    assert b.to_dict() == {
        "max_active_specialists": 2, "max_model_calls": 64, "max_output_bytes": 1048576,
        "max_elapsed_secs": 3600, "max_depth": 8, "check_timeout_secs": 120, "debounce_ms": 1000,
    }  # fmt: skip
    assert exhausted(b, Usage()) is None
    assert exhausted(b, Usage(model_calls=64)) == "model_calls"
    assert exhausted(b, Usage(output_bytes=1048576)) == "output_bytes"
    assert exhausted(b, Usage(elapsed_ms=3600_000)) == "elapsed_secs"
    assert Budgets.from_dict({"max_model_calls": 3}).max_model_calls == 3
    for bad in ({"max_calls": 1}, {"max_model_calls": -1}, {"max_depth": 0}):
        with pytest.raises(LaneboardError) as err:
            Budgets.from_dict(bad)
        assert code(err) == "BAD_INPUT"


def test_updates_queue_for_the_next_turn_and_are_bounded() -> None:
    a = base_plan()["producer"]
    for i in range(asg.MAX_MESSAGES):
        a = asg.update(a, f"m{i}")
    assert a.messages[0] == "m0" and len(a.messages) == asg.MAX_MESSAGES
    with pytest.raises(LaneboardError) as err:
        asg.update(a, "one more")
    assert code(err) == "PLAN_LIMIT"
    with pytest.raises(LaneboardError) as err:
        asg.update(replace(a, state=AState.CANCELLED), "late")
    assert code(err) == "ILLEGAL_TRANSITION"
