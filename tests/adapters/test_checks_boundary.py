"""Checks inside the boundary: the card's checks are allowed commands for a real-CLI worker
and reviewer (no bypass), both run them, the reviewer's prompt carries the runtime's own
check results, and the review card records the evidence its verdict was given."""

from __future__ import annotations

from model_server import Reply
from test_adapters_supervisor import REVIEWER, WAIT_S, Rig, rig, wait_for  # noqa: F401

CHECK = "test -f feature.txt"


def test_checks_are_allowed_and_run_by_worker_and_reviewer(rig: Rig) -> None:  # noqa: F811
    kind, server, board = rig.kind, rig.server, rig.board
    card = rig.card("Add the feature file", acceptance=["feature.txt exists"], checks=[CHECK])
    ref, lane, review_ref = card.ref, rig.lane(card), "WEB-2"
    server.add(
        Reply(tool_calls=[kind.write(lane, "feature.txt", "checked\n")], expect=(ref,)),
        Reply(tool_calls=[kind.bash(CHECK)]),
        Reply(
            tool_calls=[
                kind.bash(
                    f"lb card report {ref} --body 'feature.txt added' --evidence '0:{CHECK}' "
                    f"&& lb card move {ref} in_review"
                )
            ]
        ),
        Reply(text=f"Delivered {ref}."),
    )
    verdict = (
        f"lb card report {review_ref} --body 'VERDICT: APPROVE' --evidence '0:{CHECK}' "
        f"&& lb card move {review_ref} in_review"
    )
    server.add(
        Reply(
            tool_calls=[kind.bash(CHECK)], expect=(ref, "The runtime's own check results", CHECK)
        ),
        Reply(tool_calls=[kind.bash(verdict)]),
        Reply(text="Approved."),
        route=REVIEWER,
    )
    rig.start()
    rig.wait_landed(card)
    review = board.get(review_ref)
    wait_for(lambda: rig.status(review) == "done", WAIT_S, "the review card closed", rig)
    rig.stop()
    assert server.errors == [], rig.describe()
    # the model saw each check run, not refused: no tool result carries a refusal (the CLIs'
    # own instructions, which describe approvals in general, are not looked at)
    outputs = [out for logged in server.turns() for out in logged.tool_outputs()]
    assert len(outputs) >= 4, rig.describe()  # the write, the two checks, the verdict...
    for text in outputs:
        assert "not in this role's command list" not in text, text
        assert "requires approval" not in text and "permission to use" not in text.lower(), text
        assert "rejected" not in text.lower() and "declined" not in text.lower(), text
    given = board.get(review_ref).meta["review_evidence"]
    assert given["card"] == ref and given["round"] == 1
    assert [e["command"] for e in given["evidence"]][:2] == [CHECK, CHECK]
    assert all(e["exit_code"] == 0 for e in given["evidence"])
    assert [r.body for r in board.reports(review_ref)] == ["VERDICT: APPROVE"]
