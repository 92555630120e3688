from laneboard.board.service import Board
from laneboard.domain.model import agent


def test_create_claim_deliver_close(board: Board, me) -> None:  # type: ignore[no-untyped-def]
    board.add_project(me, "WEB", path=None)
    card = board.create_card(
        me, "WEB", "Fix login", acceptance=["login works"], acceptance_mode="off"
    )
    assert card.ref == "WEB-1"
    worker = agent("worker")
    claimed = board.claim(worker, card.ref)
    assert claimed.claim_epoch == 1 and claimed.holder == "worker"
    board.report(worker, card.ref, "done", evidence=[{"command": "pytest", "exit_code": 0}])
    board.move(worker, card.ref, "in_review")
    done = board.move(worker, card.ref, "done")
    assert done.status.value == "done"
    types = [e.type for e in board.events()]
    assert types == [
        "project.added",
        "card.created",
        "card.claimed",
        "report.added",
        "card.moved",
        "card.moved",
    ]
