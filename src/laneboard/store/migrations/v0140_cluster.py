"""Migration 140: the record of once-per-cluster passes.

``pass_runs``: one row per run of a pass that runs on one supervisor of the cluster at a
time (workflow, patrol, lanes, schedules): the pass, the supervisor instance and machine
that ran it, and when it started and finished. The lease in ``locks`` (``pass:<name>``)
is what keeps the runs apart; this table is what shows it afterwards (``lb status``, and
the cluster test's proof that no two runs of one pass overlapped). Rows older than a day
are pruned as new ones are written.
"""

from __future__ import annotations

from laneboard.store.schema import Index, Table, cols

VERSION = 140
NAME = "cluster"

TABLES: tuple[Table, ...] = (
    Table(
        "pass_runs",
        cols("id:int! name:text! holder:text! machine:text! started_at:int! finished_at:int"),
        ("id",),
        (Index("pass_runs_name", ("name", "started_at")),),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE pass_runs (
        id {pk}, name {text} NOT NULL, holder {text} NOT NULL, machine {text} NOT NULL,
        started_at {int} NOT NULL, finished_at {int})""",
    "CREATE INDEX pass_runs_name ON pass_runs (name, started_at)",
)
