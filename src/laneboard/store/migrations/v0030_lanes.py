"""Migration 30: lanes (the git worktree and branch each card round runs in).

One row per (card, round): the lane's absolute path, its branch, the base ref it was
created from and the commit that ref named then, its state (``active`` → ``landed`` →
``cleaned``), the merge commit once landed, and timestamps (epoch ms).
"""

from __future__ import annotations

from laneboard.store.schema import Index, Table, cols

VERSION = 30
NAME = "lanes"

TABLES: tuple[Table, ...] = (
    Table(
        "lanes",
        cols(
            "id:int! card_id:int! round:int! project_id:int! repo:text! path:text! "
            "branch:text! base:text! base_commit:text! state:text! merge_commit:text "
            "target_branch:text created_at:int! updated_at:int! landed_at:int cleaned_at:int"
        ),
        ("id",),
        (
            Index("lanes_card_round", ("card_id", "round"), True),
            Index("lanes_state", ("state",)),
        ),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE lanes (
        id {pk}, card_id {int} NOT NULL, round {int} NOT NULL, project_id {int} NOT NULL,
        repo {text} NOT NULL, path {text} NOT NULL, branch {text} NOT NULL,
        base {text} NOT NULL, base_commit {text} NOT NULL, state {text} NOT NULL,
        merge_commit {text}, target_branch {text}, created_at {int} NOT NULL,
        updated_at {int} NOT NULL, landed_at {int}, cleaned_at {int})""",
    "CREATE UNIQUE INDEX lanes_card_round ON lanes (card_id, round)",
    "CREATE INDEX lanes_state ON lanes (state)",
)
