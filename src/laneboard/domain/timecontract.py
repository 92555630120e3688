"""The time contract: every clock of the supervisor and the bounds between them."""

from __future__ import annotations

from dataclasses import dataclass, fields

from laneboard.errors import LaneboardError

MIN = 60
HOUR = 3600


@dataclass(frozen=True)
class TimeContract:
    """All values in seconds."""

    heartbeat_fresh: int = 10 * MIN
    stale_same_holder: int = 30 * MIN
    stale_anyone: int = 6 * HOUR
    turn_timeout: int = 30 * MIN
    worker_heartbeat_interval: int = 4 * MIN
    tick_interval: int = 600
    ping_interval: int = 60
    patrol_period: int = 300
    pool_heartbeat: int = 15
    pool_stale: int = 60
    ledger_reap: int = 2 * HOUR
    project_idle: int = 5 * MIN  # an idle session's process is closed after this
    session_max_age: int = 24 * HOUR
    subprocess_bound: int = 120

    MIN_TURN = MIN
    MAX_TURN = 2 * HOUR
    MAX_FRESH = 10 * MIN  # the pool pulses a running turn's heartbeat every 4 minutes
    TICK_SPAN = 20 * MIN  # the fallback tick runs well inside max(turn timeout, this)

    def violations(self) -> list[str]:
        out: list[str] = []
        for f in fields(self):
            if getattr(self, f.name) <= 0:
                out.append(f"{f.name} must be positive")
        if not self.heartbeat_fresh < self.stale_same_holder < self.stale_anyone:
            out.append("heartbeat_fresh < stale_same_holder < stale_anyone must hold")
        if not self.MIN_TURN <= self.turn_timeout < self.MAX_TURN:
            out.append(f"turn_timeout must be in [{self.MIN_TURN}, {self.MAX_TURN}) seconds")
        if not self.heartbeat_fresh <= self.MAX_FRESH:
            out.append(f"heartbeat_fresh must not exceed {self.MAX_FRESH} seconds")
        if not self.worker_heartbeat_interval <= self.heartbeat_fresh:
            out.append("worker_heartbeat_interval must not exceed heartbeat_fresh")
        if not self.turn_timeout < self.ledger_reap:
            out.append("turn_timeout must be shorter than ledger_reap")
        if not self.tick_interval < max(self.turn_timeout, self.TICK_SPAN):
            out.append(
                f"tick_interval must be shorter than turn_timeout (or {self.TICK_SPAN} "
                "seconds, whichever is longer)"
            )
        if not self.pool_heartbeat < self.pool_stale:
            out.append("pool_heartbeat must be shorter than pool_stale")
        return out

    def validate(self) -> TimeContract:
        problems = self.violations()
        if problems:
            raise LaneboardError(
                "CONFIG_INVALID",
                "time contract violated: " + "; ".join(problems),
                "fix the clock settings in the config file or flags",
            )
        return self
