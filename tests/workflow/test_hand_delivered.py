"""A round a person delivered by hand in a git project gets a review that can run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from laneboard.board.service import Board
from laneboard.store import Store
from laneboard.supervisor import poll

from .helpers import ME, review_card, run, runtime


def test_a_hand_delivered_round_is_reviewed_in_a_lane_of_the_current_branch(
    board: Board, store: Store, repo: Path, tmp_path: Path
) -> None:
    board.add_project(ME, "H", path=str(repo))
    card = board.create_card(ME, "H", "done by hand", acceptance_mode="auto")
    board.claim(ME, card.ref)
    (repo / "manual.txt").write_text("by hand\n")  # the person's work, on the branch
    subprocess.run(["git", "add", "manual.txt"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "manual work"], cwd=repo, check=True)
    board.report(ME, card.ref, "did it by hand")
    board.move(ME, card.ref, "in_review")
    rt = runtime(store, tmp_path)
    run(rt)
    rev = review_card(board, board.get(card.ref))
    with store.read() as tx:
        project = tx.project(id=rev.project_id)
    target = poll.review_target(rt, rev, project)  # no longer "the workspace … is missing"
    assert os.path.isdir(target) and os.path.realpath(target) != os.path.realpath(repo)
    assert (Path(target) / "manual.txt").read_text() == "by hand\n"  # what was delivered
