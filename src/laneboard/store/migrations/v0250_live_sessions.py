"""Migration 250: the session records that may still have a process, by an index of their
own.

A supervisor that starts reads the sessions that are open, running or idle (under the
write lock, to say which of them lost their process), and ``lb status`` reads them on
every call. The table keeps a record per card and role for good, so that read walked
every session the board ever had; this partial index holds only the live ones, which its
one reader names in the same words (``QueueQueries.live_session_rows``).
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0010_supervisor
from laneboard.store.schema import Index, Table

VERSION = 250
NAME = "live_sessions"

LIVE = "state IN ('open', 'running', 'idle')"
INDEX = Index("sessions_live", ("state", "id"), where=LIVE)

_sessions = next(t for t in v0010_supervisor.TABLES if t.name == "sessions")

TABLES: tuple[Table, ...] = (replace(_sessions, indexes=(*_sessions.indexes, INDEX)),)

STATEMENTS: tuple[str, ...] = (f"CREATE INDEX sessions_live ON sessions (state, id) WHERE {LIVE}",)
