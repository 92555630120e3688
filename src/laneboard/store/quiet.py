"""The event types a supervisor's loop never acts on: the turn path's own records.

On PostgreSQL a write whose events are all of these is announced on the board's quiet
channel (``postgres.channel_for(schema, quiet=True)``), which only followers of the whole
log listen to (``lb serve``, ``lb events tail --follow``): a supervisor, which ignores
them, listens to the main channel alone and is not woken by another machine's transcript
flushes, claims and heartbeats. The supervisor's loop reads them as news it skips
(``supervisor.loop.NOISE``).
"""

from __future__ import annotations

QUIET_TYPES = frozenset(
    {
        "turn.output",
        "turn.started",
        "turn.finished",
        "token.created",
        "dispatch.enqueued",
        "card.claimed",
        "card.heartbeat",
    }
)
