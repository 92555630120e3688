"""Operations: supervisor instances, ``status``, ``doctor`` and ``/metrics`` reads."""

from __future__ import annotations

from typing import Any

from laneboard.store.base import Row
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps

ALERT_TYPES = "type LIKE 'alert.%' OR type LIKE 'patrol.alert%'"
# the database server's clock in ms, fixed for the statement
SERVER_NOW = "(extract(epoch FROM statement_timestamp()) * 1000)::bigint"
# a proposed lease row takes the place of one that is the same holder's or has expired;
# any other is left as it is (``acquire_locks``, ``pass_sql.take_and_start``)
LEASE_CONFLICT = (
    "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
    "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at "
    "WHERE locks.holder = excluded.holder OR locks.expires_at <= excluded.acquired_at"
)
PASS_RUNS_PRUNE_EVERY = 256  # a run whose id is a multiple of this prunes the log
PASS_RUNS_KEPT_MS = 86_400_000  # to its last day
PRUNE_PASS_RUNS = "DELETE FROM pass_runs WHERE started_at < ?"


def prune_pass_runs(ids: dict[str, int]) -> bool:
    """Whether the pass runs just started (pass -> id) prune the log now."""
    return any(i % PASS_RUNS_PRUNE_EVERY == 0 for i in ids.values())


class OpsQueries(Queries):
    # -- supervisor instances ------------------------------------------------------------
    def current_supervisor(self, machine: str) -> Row | None:
        """The newest starting or running supervisor of a machine."""
        return self.one(
            "SELECT * FROM supervisors WHERE machine = ? AND state IN "
            "('starting', 'running') ORDER BY started_at DESC LIMIT 1",
            (machine,),
        )

    def latest_supervisor(self, machine: str) -> Row | None:
        return self.one(
            "SELECT * FROM supervisors WHERE machine = ? ORDER BY started_at DESC LIMIT 1",
            (machine,),
        )

    def live_supervisors(self, machine: str) -> list[Row]:
        """Starting or running supervisors of a machine."""
        return self.all(
            "SELECT * FROM supervisors WHERE machine = ? AND state IN ('starting', 'running')",
            (machine,),
        )

    def running_supervisors(self, machine: str) -> list[Row]:
        return self.all(
            "SELECT * FROM supervisors WHERE machine = ? AND state = 'running'", (machine,)
        )

    def database_now_ms(self) -> int | None:
        """The database server's own clock (PostgreSQL); None where the board is a file,
        which every process reads on one machine's clock."""
        if not self.pg:
            return None
        return int(self.scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"))

    def lease_clock(self) -> str | None:
        """The SQL of the time leases and pass runs are stamped in, when that is the
        database server's clock: on PostgreSQL with the wall clock, so machines whose
        clocks disagree agree on when a lease ends. None: the store's own clock (a board
        that is a file, read on one machine's clock, or a test's clock)."""
        from laneboard.domain.clock import SystemClock

        return SERVER_NOW if self.pg and isinstance(self.store.clock, SystemClock) else None

    def lease_now(self) -> int:
        """Now, in the time leases are stamped in (``lease_clock``)."""
        return int(self.scalar(f"SELECT {clock}")) if (clock := self.lease_clock()) else self.now()

    def _stamp(self) -> tuple[str, list[Any]]:
        """A lease statement's now: the server clock's SQL, or a parameter and its value."""
        clock = self.lease_clock()
        return (clock, []) if clock else ("?", [self.now()])

    def live_supervisors_everywhere(self) -> list[Row]:
        """Starting or running supervisors of every machine, oldest first."""
        return self.all(
            "SELECT * FROM supervisors WHERE state IN ('starting', 'running') ORDER BY started_at"
        )

    def supervisors_with_pid(self, machine: str, pid: int) -> list[Row]:
        """The instances a process id of a machine has registered (state, id)."""
        return self.all(
            "SELECT id, state FROM supervisors WHERE machine = ? AND pid = ?", (machine, pid)
        )

    def mark_supervisor_dead(self, iid: str) -> None:
        self.run("UPDATE supervisors SET state = 'dead' WHERE id = ?", (iid,))

    def insert_supervisor(
        self, iid: str, machine: str, pid: int, now: int, info: dict[str, Any]
    ) -> None:
        self.run(
            "INSERT INTO supervisors (id, machine, pid, started_at, heartbeat_at, state, info) "
            "VALUES (?, ?, ?, ?, ?, 'running', ?)",
            (iid, machine, pid, now, now, dumps(info)),
        )

    def supervisor_beat(
        self, iid: str, tick_started_at: int | None, info: dict[str, Any] | None = None
    ) -> None:
        """A heartbeat, with the running tick's start and (when given) fresh info."""
        if info is None:
            self.run(
                "UPDATE supervisors SET heartbeat_at = ?, tick_started_at = ? WHERE id = ?",
                (self.now(), tick_started_at, iid),
            )
        else:
            self.run(
                "UPDATE supervisors SET heartbeat_at = ?, tick_started_at = ?, info = ? "
                "WHERE id = ?",
                (self.now(), tick_started_at, dumps(info), iid),
            )

    def stop_supervisor(self, iid: str) -> None:
        self.run(
            "UPDATE supervisors SET state = 'stopped', heartbeat_at = ? WHERE id = ?",
            (self.now(), iid),
        )

    def supervisor_pulse(self, iid: str, tick_started_at: int | None) -> None:
        """The heartbeat time and the running tick's start (the info is the loop's)."""
        self.run(
            "UPDATE supervisors SET heartbeat_at = ?, tick_started_at = ? WHERE id = ?",
            (self.now(), tick_started_at, iid),
        )

    def supervisor_state(self, iid: str) -> str | None:
        got = self.scalar("SELECT state FROM supervisors WHERE id = ?", (iid,))
        return None if got is None else str(got)

    def fence_supervisor(self, iid: str, beat_before: int) -> bool:
        """Mark a live instance whose last heartbeat is older than ``beat_before`` fenced
        (a compare-and-swap: of several fencers, one wins)."""
        return (
            self.run(
                "UPDATE supervisors SET state = 'fenced' WHERE id = ? "
                "AND state IN ('starting', 'running') AND heartbeat_at < ?",
                (iid, beat_before),
            )
            == 1
        )

    def interrupt_sessions(self, card_ids: list[int]) -> int:
        """The open sessions of these cards end ``interrupted`` (their host is gone)."""
        if not card_ids:
            return 0
        marks = ",".join("?" * len(card_ids))
        return self.run(
            f"UPDATE sessions SET state = 'interrupted', pid = NULL, updated_at = ? "
            f"WHERE card_id IN ({marks}) AND state IN ('open', 'running', 'idle')",
            (self.now(), *card_ids),
        )

    # -- once-per-cluster passes ---------------------------------------------------------
    def release_locks_of(self, holder: str) -> int:
        return self.run("DELETE FROM locks WHERE holder = ?", (holder,))

    def pass_leases(self) -> list[Row]:
        return self.all("SELECT * FROM locks WHERE name LIKE 'pass:%' ORDER BY name")

    def acquire_locks(self, names: list[str], holder: str, ttl_ms: int) -> set[str]:
        """Take or renew leases in one statement; the names taken. A free lease is
        inserted, one of the same holder or expired is updated, any other is left as it
        is. Stamped and compared in ``lease_clock``'s time."""
        if not names:
            return set()
        now, at = self._stamp()
        params: list[Any] = []
        for name in names:
            params += [name, holder, *at, *at, ttl_ms]
        got = self.all(
            "INSERT INTO locks (name, holder, acquired_at, expires_at) VALUES "
            + ", ".join(f"(?, ?, {now}, {now} + ?)" for _ in names)
            + f" {LEASE_CONFLICT} RETURNING name",
            params,
        )
        return {str(r["name"]) for r in got}

    def lease_rows(self, names: list[str]) -> dict[str, Row]:
        """Lease name -> its row (holder, expires_at, and ``now_ms``: now in the leases'
        time, ``lease_clock``), for those of ``names`` that are held."""
        if not names:
            return {}
        now, at = self._stamp()
        got = self.all(
            f"SELECT name, holder, expires_at, {now} AS now_ms FROM locks WHERE name IN ("
            + ",".join("?" * len(names))
            + ")",
            [*at, *names],
        )
        return {str(r["name"]): r for r in got}

    def lock_holders(self, names: list[str]) -> dict[str, str]:
        """Lease name -> its holder, for those of ``names`` that are held."""
        return {name: str(r["holder"]) for name, r in self.lease_rows(names).items()}

    def release_locks(self, holder: str, names: list[str]) -> int:
        if not names:
            return 0
        marks = ",".join("?" * len(names))
        return self.run(
            f"DELETE FROM locks WHERE holder = ? AND name IN ({marks})", (holder, *names)
        )

    def start_pass_runs(self, names: list[str], holder: str, machine: str) -> dict[str, int]:
        """One ``pass_runs`` row per pass (one statement), stamped as leases are; the log
        is pruned to a day now and then (``prune_pass_runs``)."""
        if not names:
            return {}
        now, at = self._stamp()
        params: list[Any] = []
        for name in names:
            params += [name, holder, machine, *at]
        got = self.all(
            "INSERT INTO pass_runs (name, holder, machine, started_at) VALUES "
            + ", ".join(f"(?, ?, ?, {now})" for _ in names)
            + " RETURNING id, name, started_at",
            params,
        )
        ids = {str(r["name"]): int(r["id"]) for r in got}
        if got and prune_pass_runs(ids):
            since = int(got[0]["started_at"]) - PASS_RUNS_KEPT_MS
            self.run(PRUNE_PASS_RUNS, (since,))
        return ids

    def finish_pass_runs(self, ids: list[int]) -> None:
        marks = ",".join("?" * len(ids))
        now, at = self._stamp()
        self.run(f"UPDATE pass_runs SET finished_at = {now} WHERE id IN ({marks})", (*at, *ids))

    def pass_runs(self, name: str | None = None, limit: int = 1000) -> list[Row]:
        """Runs of once-per-cluster passes, oldest first (of the newest ``limit``)."""
        where, params = ("WHERE name = ? ", [name]) if name else ("", [])
        got = self.all(f"SELECT * FROM pass_runs {where}ORDER BY id DESC LIMIT ?", [*params, limit])
        return list(reversed(got))

    def last_pass_runs(self) -> list[Row]:
        """The newest run of each pass."""
        return self.all(
            "SELECT p.* FROM pass_runs p JOIN (SELECT name, max(id) AS id FROM pass_runs "
            "GROUP BY name) m ON p.id = m.id ORDER BY p.name"
        )

    # -- doctor --------------------------------------------------------------------------
    def has_migration(self, version: int) -> bool:
        got = self.one("SELECT version FROM schema_migrations WHERE version = ?", (version,))
        return got is not None

    def handoffs_since(self, since: int) -> list[Row]:
        """Handoff rows (card_id, state, created_at) created at or after ``since``."""
        return self.all(
            "SELECT card_id, state, created_at FROM queue WHERE kind = 'handoff' "
            "AND created_at >= ?",
            (since,),
        )

    def failed_director_rows(self, since: int) -> list[Row]:
        """Question and route rows that failed at or after ``since``."""
        return self.all(
            "SELECT * FROM queue WHERE kind IN ('question', 'route') AND state = 'failed' "
            "AND updated_at >= ?",
            (since,),
        )

    def failed_turn_counts(self, since: int) -> list[Row]:
        """Per card: turns started since ``since`` that failed, timed out or were lost."""
        return self.all(
            "SELECT card_id, count(*) AS n FROM turns WHERE outcome IN "
            "('failed', 'timed_out', 'lost', 'interrupted') AND started_at >= ? "
            "GROUP BY card_id",
            (since,),
        )

    def deferrals_failing(self, failures: int) -> list[Row]:
        """Deferrals with at least ``failures`` failures."""
        return self.all("SELECT * FROM deferrals WHERE failures >= ?", (failures,))

    def processing_handoffs_with_pid(self) -> list[Row]:
        return self.all(
            "SELECT * FROM queue WHERE kind = 'handoff' AND state = 'processing' AND pid IS NOT NULL"
        )

    # -- metrics -------------------------------------------------------------------------
    def newest_live_supervisor_info(self) -> Row | None:
        """The info column of the live supervisor with the freshest heartbeat."""
        return self.one(
            "SELECT info FROM supervisors WHERE state IN ('starting', 'running') "
            "ORDER BY heartbeat_at DESC LIMIT 1"
        )

    def metric_counts(self) -> dict[str, Any]:
        """Everything ``/metrics`` counts, in one snapshot (rows or numbers per family)."""
        return {
            "cards": self.all(
                "SELECT p.key AS project, c.status AS status, count(*) AS n FROM cards c "
                "JOIN projects p ON p.id = c.project_id GROUP BY p.key, c.status"
            ),
            "claimed": self.scalar(
                "SELECT count(*) FROM cards WHERE status = 'in_progress' AND holder IS NOT NULL"
            ),
            "claims": self.scalar("SELECT count(*) FROM events WHERE type = 'card.claimed'"),
            "turns": self.all(
                "SELECT outcome, count(*) AS n, sum(duration_ms) AS ms FROM turns GROUP BY outcome"
            ),
            "tokens": self.one(
                "SELECT coalesce(sum(input_tokens), 0) AS i, coalesce(sum(output_tokens), 0) AS o "
                "FROM turns"
            ),
            "queue": self.all(
                "SELECT kind, state, count(*) AS n FROM queue "
                "WHERE state IN ('pending', 'processing') GROUP BY kind, state"
            ),
            "sessions": self.all("SELECT state, count(*) AS n FROM sessions GROUP BY state"),
            "alerts": self.scalar(f"SELECT count(*) FROM events WHERE {ALERT_TYPES}"),
        }
