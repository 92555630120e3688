"""Migration 45: patrol marks — named timestamps the patrol and the doctor read.

``patrol:<machine>`` is a machine's last successful patrol pass (the inspector-liveness
marker a peer watches); other names are free for the patrol's own bookkeeping.
"""

from __future__ import annotations

from laneboard.store.schema import Table, cols

VERSION = 45
NAME = "patrol"

TABLES: tuple[Table, ...] = (
    Table("patrol_marks", cols("name:text! at:int! info:text!"), ("name",)),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE patrol_marks (
        name {text} NOT NULL PRIMARY KEY, at {int} NOT NULL, info {text} NOT NULL DEFAULT '{{}}')""",
)
