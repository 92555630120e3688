"""Migration 10: the supervisor's durable state (queue, sessions, turns, deferrals, instances)."""

from __future__ import annotations

from laneboard.store.schema import Index, Table, cols

VERSION = 10
NAME = "supervisor"

TABLES: tuple[Table, ...] = (
    Table(
        "queue",
        cols(
            "id:int! kind:text! card_id:int! role:text! project_id:int! machine:text! "
            "target_dir:text! round:int! epoch:int! state:text! attempts:int! recoveries:int! "
            "owner:text pid:int payload:text! last_error:text created_at:int! updated_at:int! "
            "started_at:int finished_at:int"
        ),
        ("id",),
        (
            Index("queue_state_machine", ("state", "machine")),
            Index("queue_card", ("card_id", "id")),
            Index(
                "queue_active_card_role",
                ("card_id", "role", "kind"),
                True,
                "state IN ('pending', 'processing')",
            ),
        ),
    ),
    Table(
        "sessions",
        cols(
            "id:int! agent_kind:text! lane_key:text! card_id:int role:text! cwd:text! "
            "native_id:text round:int! state:text! resumed_by_replay:int! pid:int "
            "last_used_at:int! created_at:int! updated_at:int!"
        ),
        ("id",),
        (Index("sessions_kind_lane", ("agent_kind", "lane_key"), True),),
    ),
    Table(
        "turns",
        cols(
            "id:int! queue_id:int card_id:int! round:int! session_row:int agent_kind:text! "
            "native_id:text prompt:text! final_text:text! outcome:text! error:text "
            "exit_code:int input_tokens:int! output_tokens:int! cost_usd:real duration_ms:int! "
            "started_at:int! finished_at:int"
        ),
        ("id",),
        (Index("turns_card", ("card_id", "id")), Index("turns_session", ("session_row", "id"))),
    ),
    Table(
        "deferrals",
        cols("card_id:int! failures:int! next_at:int! last_error:text! updated_at:int!"),
        ("card_id",),
    ),
    Table(
        "supervisors",
        cols(
            "id:text! machine:text! pid:int! started_at:int! heartbeat_at:int! tick_started_at:int "
            "state:text! info:text!"
        ),
        ("id",),
        (Index("supervisors_machine", ("machine", "state")),),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE queue (
        id {pk}, kind {text} NOT NULL, card_id {int} NOT NULL, role {text} NOT NULL,
        project_id {int} NOT NULL, machine {text} NOT NULL, target_dir {text} NOT NULL,
        round {int} NOT NULL, epoch {int} NOT NULL, state {text} NOT NULL,
        attempts {int} NOT NULL DEFAULT 0, recoveries {int} NOT NULL DEFAULT 0, owner {text},
        pid {int}, payload {text} NOT NULL DEFAULT '{{}}', last_error {text},
        created_at {int} NOT NULL, updated_at {int} NOT NULL, started_at {int},
        finished_at {int})""",
    "CREATE INDEX queue_state_machine ON queue (state, machine)",
    "CREATE INDEX queue_card ON queue (card_id, id)",
    # coalescing: one live row per (card, role, kind) while pending or processing
    "CREATE UNIQUE INDEX queue_active_card_role ON queue (card_id, role, kind) "
    "WHERE state IN ('pending', 'processing')",
    """CREATE TABLE sessions (
        id {pk}, agent_kind {text} NOT NULL, lane_key {text} NOT NULL, card_id {int},
        role {text} NOT NULL, cwd {text} NOT NULL, native_id {text}, round {int} NOT NULL,
        state {text} NOT NULL, resumed_by_replay {int} NOT NULL DEFAULT 0, pid {int},
        last_used_at {int} NOT NULL, created_at {int} NOT NULL, updated_at {int} NOT NULL)""",
    "CREATE UNIQUE INDEX sessions_kind_lane ON sessions (agent_kind, lane_key)",
    """CREATE TABLE turns (
        id {pk}, queue_id {int}, card_id {int} NOT NULL, round {int} NOT NULL,
        session_row {int}, agent_kind {text} NOT NULL, native_id {text},
        prompt {text} NOT NULL, final_text {text} NOT NULL DEFAULT '',
        outcome {text} NOT NULL, error {text}, exit_code {int},
        input_tokens {int} NOT NULL DEFAULT 0, output_tokens {int} NOT NULL DEFAULT 0,
        cost_usd {real}, duration_ms {int} NOT NULL DEFAULT 0, started_at {int} NOT NULL,
        finished_at {int})""",
    "CREATE INDEX turns_card ON turns (card_id, id)",
    "CREATE INDEX turns_session ON turns (session_row, id)",
    """CREATE TABLE deferrals (
        card_id {int} NOT NULL PRIMARY KEY, failures {int} NOT NULL, next_at {int} NOT NULL,
        last_error {text} NOT NULL, updated_at {int} NOT NULL)""",
    """CREATE TABLE supervisors (
        id {text} NOT NULL PRIMARY KEY, machine {text} NOT NULL, pid {int} NOT NULL,
        started_at {int} NOT NULL, heartbeat_at {int} NOT NULL, tick_started_at {int},
        state {text} NOT NULL, info {text} NOT NULL DEFAULT '{{}}')""",
    "CREATE INDEX supervisors_machine ON supervisors (machine, state)",
)
