"""Migration 200: a lane record names the machine whose lane it is.

``lanes.machine``: the ``LANEBOARD_MACHINE`` name (default: the host name) of the machine
that made the lane, set when the lane is recorded and when a claim makes it the round's
lane. Machines of a cluster usually keep their clones at the same path, so the path alone
cannot tell whose lane a record is; only that machine removes its tree. ``NULL``: recorded
before machines were (its path decides, as before).
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0030_lanes
from laneboard.store.schema import Column, Table

VERSION = 200
NAME = "lane_machine"

_lanes = next(t for t in v0030_lanes.TABLES if t.name == "lanes")

TABLES: tuple[Table, ...] = (replace(_lanes, columns=(*_lanes.columns, Column("machine", "text"))),)

STATEMENTS: tuple[str, ...] = ("ALTER TABLE lanes ADD COLUMN machine {text}",)
