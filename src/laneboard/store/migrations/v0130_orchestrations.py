"""Migration 130: orchestrated runs (a goal split by a coordinator into assignments).

``orchestrations``: one row per orchestrated run — its goal, the authorized scope and
checks (``spec``), the budgets and the usage counted against them (never reset by a
resume), the checkout's HEAD and cleanliness at the goal start (``start``), its phase,
the integration directory and HEAD, the stored result, and the coordinator's card.

``assignments``: one row per assignment, keyed by its card (assignments are cards of the
run): its name, owner role, state and current revision, and the whole record (``record``,
JSON: paths, deps, checks, accepted/reported/verified revisions, checkpoint, evidence).

``assignment_revisions``: one row per (assignment, revision): its lane, base commit,
state and evidence — older revisions stay here as unverified evidence.

``orchestration_roles``: one row per role of a run: its agent kind, the native session id
it resumes, and the assignment it last worked on.

``orchestration_turns``: every dispatched turn, recorded before it starts: a turn still
``dispatched`` after a crash is ``uncertain`` and is never replayed.
"""

from __future__ import annotations

from laneboard.store.schema import Index, Table, cols

VERSION = 130
NAME = "orchestrations"

TABLES: tuple[Table, ...] = (
    Table(
        "orchestrations",
        cols(
            "run_id:int! project_id:int! goal:text! spec:text! budgets:text! usage:text! "
            "start:text! phase:text! reason:text result:text integration_dir:text "
            "integration_head:text coordinator_card_id:int created_at:int! updated_at:int! "
            "version:int!"
        ),
        ("run_id",),
    ),
    Table(
        "assignments",
        cols(
            "card_id:int! run_id:int! name:text! owner:text! state:text! revision:int! "
            "record:text! created_at:int! updated_at:int!"
        ),
        ("card_id",),
        (Index("assignments_run_name", ("run_id", "name"), True),),
    ),
    Table(
        "assignment_revisions",
        cols(
            "card_id:int! revision:int! lane_branch:text lane_dir:text base:text state:text! "
            "evidence:text! detail:text created_at:int! updated_at:int!"
        ),
        ("card_id", "revision"),
    ),
    Table(
        "orchestration_roles",
        cols("run_id:int! role:text! kind:text! session_id:text card_id:int updated_at:int!"),
        ("run_id", "role"),
    ),
    Table(
        "orchestration_turns",
        cols(
            "id:int! run_id:int! role:text! assignment:text revision:int purpose:text! "
            "state:text! output_bytes:int! detail:text started_at:int! ended_at:int"
        ),
        ("id",),
        (Index("orchestration_turns_run", ("run_id", "state")),),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE orchestrations (
        run_id {int} NOT NULL PRIMARY KEY, project_id {int} NOT NULL REFERENCES projects (id),
        goal {text} NOT NULL, spec {text} NOT NULL, budgets {text} NOT NULL,
        usage {text} NOT NULL, start {text} NOT NULL, phase {text} NOT NULL, reason {text},
        result {text}, integration_dir {text}, integration_head {text},
        coordinator_card_id {int}, created_at {int} NOT NULL, updated_at {int} NOT NULL,
        version {int} NOT NULL DEFAULT 1)""",
    """CREATE TABLE assignments (
        card_id {int} NOT NULL PRIMARY KEY REFERENCES cards (id), run_id {int} NOT NULL,
        name {text} NOT NULL, owner {text} NOT NULL, state {text} NOT NULL,
        revision {int} NOT NULL, record {text} NOT NULL, created_at {int} NOT NULL,
        updated_at {int} NOT NULL)""",
    "CREATE UNIQUE INDEX assignments_run_name ON assignments (run_id, name)",
    """CREATE TABLE assignment_revisions (
        card_id {int} NOT NULL, revision {int} NOT NULL, lane_branch {text}, lane_dir {text},
        base {text}, state {text} NOT NULL, evidence {text} NOT NULL DEFAULT '[]',
        detail {text}, created_at {int} NOT NULL, updated_at {int} NOT NULL,
        PRIMARY KEY (card_id, revision))""",
    """CREATE TABLE orchestration_roles (
        run_id {int} NOT NULL, role {text} NOT NULL, kind {text} NOT NULL,
        session_id {text}, card_id {int}, updated_at {int} NOT NULL,
        PRIMARY KEY (run_id, role))""",
    """CREATE TABLE orchestration_turns (
        id {pk}, run_id {int} NOT NULL, role {text} NOT NULL, assignment {text},
        revision {int}, purpose {text} NOT NULL, state {text} NOT NULL,
        output_bytes {int} NOT NULL DEFAULT 0, detail {text}, started_at {int} NOT NULL,
        ended_at {int})""",
    "CREATE INDEX orchestration_turns_run ON orchestration_turns (run_id, state)",
)
