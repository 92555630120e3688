"""Migration 1: the board (projects, cards, links, comments, reports, events, tokens, locks)."""

from __future__ import annotations

from laneboard.store.schema import Index, Table, cols

VERSION = 1
NAME = "board"

TABLES: tuple[Table, ...] = (
    Table(
        "projects",
        cols(
            "id:int! key:text! name:text! path:text base_ref:text next_number:int! "
            "config:text! created_at:int!"
        ),
        ("id",),
        (Index("projects_key", ("key",), True), Index("projects_name", ("name",), True)),
    ),
    Table(
        "cards",
        cols(
            "id:int! project_id:int! number:int! ref:text! title:text! description:text! "
            "kind:text! parent_id:int status:text! assignee:text priority:int! labels:text! "
            "acceptance:text! acceptance_mode:text! delivery_round:int! checks:text! "
            "allowed_paths:text! holder:text holder_kind:text session_id:text claimed_at:int "
            "heartbeat_at:int claim_epoch:int! meta:text! idempotency_key:text run_id:int "
            "status_since:int! created_at:int! updated_at:int! version:int!"
        ),
        ("id",),
        (
            Index("cards_ref", ("ref",), True),
            Index("cards_project_number", ("project_id", "number"), True),
            Index("cards_idempotency_key", ("idempotency_key",), True),
            Index("cards_status_assignee", ("status", "assignee")),
            Index("cards_project_status", ("project_id", "status")),
            Index("cards_parent", ("parent_id",)),
            Index("cards_status_heartbeat", ("status", "heartbeat_at")),
            Index("cards_updated", ("updated_at",)),
        ),
    ),
    Table(
        "links",
        cols("card_id:int! depends_on:int! created_at:int!"),
        ("card_id", "depends_on"),
        (Index("links_depends_on", ("depends_on",)),),
    ),
    Table(
        "comments",
        cols(
            "id:int! card_id:int! kind:text! body:text! author:text! author_kind:text! "
            "created_at:int!"
        ),
        ("id",),
        (Index("comments_card", ("card_id", "id")),),
    ),
    Table(
        "reports",
        cols(
            "id:int! card_id:int! round:int! body:text! commit_sha:text evidence:text! "
            "verdict:text author:text! author_kind:text! created_at:int!"
        ),
        ("id",),
        (Index("reports_card_round", ("card_id", "round"), True),),
    ),
    Table(
        "events",
        cols(
            "id:int! at:int! type:text! card_id:int project_id:int run_id:int actor:text! "
            "actor_kind:text! payload:text!"
        ),
        ("id",),
        (Index("events_card", ("card_id", "id")), Index("events_project", ("project_id", "id"))),
    ),
    Table(
        "idempotency",
        cols("key:text! scope:text! card_id:int response:text! created_at:int!"),
        ("key",),
    ),
    Table(
        "tokens",
        cols(
            "id:int! token_hash:text! name:text! kind:text! card_id:int epoch:int "
            "expires_at:int created_at:int! revoked_at:int"
        ),
        ("id",),
        (Index("tokens_hash", ("token_hash",), True),),
    ),
    Table(
        "locks",
        cols("name:text! holder:text! acquired_at:int! expires_at:int!"),
        ("name",),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE projects (
                id {pk}, key {text} NOT NULL, name {text} NOT NULL, path {text},
                base_ref {text}, next_number {int} NOT NULL DEFAULT 1,
                config {text} NOT NULL DEFAULT '{{}}', created_at {int} NOT NULL)""",
    "CREATE UNIQUE INDEX projects_key ON projects (key)",
    "CREATE UNIQUE INDEX projects_name ON projects (name)",
    """CREATE TABLE cards (
                id {pk}, project_id {int} NOT NULL REFERENCES projects (id),
                number {int} NOT NULL, ref {text} NOT NULL, title {text} NOT NULL,
                description {text} NOT NULL DEFAULT '', kind {text} NOT NULL DEFAULT 'task',
                parent_id {int} REFERENCES cards (id), status {text} NOT NULL,
                assignee {text}, priority {int} NOT NULL DEFAULT 2,
                labels {text} NOT NULL DEFAULT '[]', acceptance {text} NOT NULL DEFAULT '[]',
                acceptance_mode {text} NOT NULL DEFAULT 'auto',
                delivery_round {int} NOT NULL DEFAULT 1, checks {text} NOT NULL DEFAULT '[]',
                allowed_paths {text} NOT NULL DEFAULT '[]', holder {text}, holder_kind {text},
                session_id {text}, claimed_at {int}, heartbeat_at {int},
                claim_epoch {int} NOT NULL DEFAULT 0, meta {text} NOT NULL DEFAULT '{{}}',
                idempotency_key {text}, run_id {int}, status_since {int} NOT NULL,
                created_at {int} NOT NULL, updated_at {int} NOT NULL,
                version {int} NOT NULL DEFAULT 1)""",
    "CREATE UNIQUE INDEX cards_ref ON cards (ref)",
    "CREATE UNIQUE INDEX cards_project_number ON cards (project_id, number)",
    "CREATE UNIQUE INDEX cards_idempotency_key ON cards (idempotency_key)",
    "CREATE INDEX cards_status_assignee ON cards (status, assignee)",
    "CREATE INDEX cards_project_status ON cards (project_id, status)",
    "CREATE INDEX cards_parent ON cards (parent_id)",
    "CREATE INDEX cards_status_heartbeat ON cards (status, heartbeat_at)",
    "CREATE INDEX cards_updated ON cards (updated_at)",
    """CREATE TABLE links (
                card_id {int} NOT NULL REFERENCES cards (id),
                depends_on {int} NOT NULL REFERENCES cards (id),
                created_at {int} NOT NULL, PRIMARY KEY (card_id, depends_on))""",
    "CREATE INDEX links_depends_on ON links (depends_on)",
    """CREATE TABLE comments (
                id {pk}, card_id {int} NOT NULL REFERENCES cards (id), kind {text} NOT NULL,
                body {text} NOT NULL, author {text} NOT NULL, author_kind {text} NOT NULL,
                created_at {int} NOT NULL)""",
    "CREATE INDEX comments_card ON comments (card_id, id)",
    """CREATE TABLE reports (
                id {pk}, card_id {int} NOT NULL REFERENCES cards (id), round {int} NOT NULL,
                body {text} NOT NULL, commit_sha {text}, evidence {text} NOT NULL DEFAULT '[]',
                verdict {text}, author {text} NOT NULL, author_kind {text} NOT NULL,
                created_at {int} NOT NULL)""",
    "CREATE UNIQUE INDEX reports_card_round ON reports (card_id, round)",
    """CREATE TABLE events (
                id {pk}, at {int} NOT NULL, type {text} NOT NULL, card_id {int},
                project_id {int}, run_id {int}, actor {text} NOT NULL,
                actor_kind {text} NOT NULL, payload {text} NOT NULL DEFAULT '{{}}')""",
    "CREATE INDEX events_card ON events (card_id, id)",
    "CREATE INDEX events_project ON events (project_id, id)",
    """CREATE TABLE idempotency (
                key {text} NOT NULL PRIMARY KEY, scope {text} NOT NULL, card_id {int},
                response {text} NOT NULL, created_at {int} NOT NULL)""",
    """CREATE TABLE tokens (
                id {pk}, token_hash {text} NOT NULL, name {text} NOT NULL, kind {text} NOT NULL,
                card_id {int}, epoch {int}, expires_at {int}, created_at {int} NOT NULL,
                revoked_at {int})""",
    "CREATE UNIQUE INDEX tokens_hash ON tokens (token_hash)",
    """CREATE TABLE locks (
                name {text} NOT NULL PRIMARY KEY, holder {text} NOT NULL,
                acquired_at {int} NOT NULL, expires_at {int} NOT NULL)""",
)
