"""Supervisor instances: one resident supervisor per machine, and the pool's verdicts."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from laneboard.agents.procs import pid_alive
from laneboard.domain.clock import iso
from laneboard.domain.timecontract import TimeContract
from laneboard.errors import LaneboardError
from laneboard.store.base import Row
from laneboard.store.tx import Tx

MACHINE_LOCK = 7_211_002


def machine_name() -> str:
    return os.environ.get("LANEBOARD_MACHINE") or socket.gethostname()


@dataclass(frozen=True)
class Verdict:
    state: str  # absent | starting | running | unresponsive | wedged | stopped
    instance: str | None
    pid: int | None
    heartbeat_age_s: float | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "instance": self.instance,
            "pid": self.pid,
            "heartbeat_age_s": self.heartbeat_age_s,
            "detail": self.detail,
        }


def verdict(row: Row | None, now: int, time: TimeContract, *, local: bool = True) -> Verdict:
    if row is None:
        return Verdict("absent", None, None, None, "no supervisor has registered on this machine")
    age = (now - int(row["heartbeat_at"])) / 1000
    iid, pid = str(row["id"]), int(row["pid"])
    if row["state"] == "stopped":
        return Verdict("stopped", iid, pid, age, "the supervisor stopped cleanly")
    if local and not pid_alive(pid):
        return Verdict("absent", iid, pid, age, f"process {pid} is gone")
    tick = row["tick_started_at"]
    if tick is not None and now - int(tick) > 2 * time.turn_timeout * 1000:
        return Verdict(
            "wedged",
            iid,
            pid,
            age,
            f"a tick has run for {(now - int(tick)) // 1000}s (> 2 x turn timeout)",
        )
    if age > time.pool_stale:
        return Verdict("unresponsive", iid, pid, age, f"no pool heartbeat for {age:.0f}s")
    if now - int(row["started_at"]) < time.pool_heartbeat * 1000 and row["state"] == "starting":
        return Verdict("starting", iid, pid, age, "starting")
    return Verdict("running", iid, pid, age, "pool heartbeat is fresh")


def current(tx: Tx, machine: str) -> Row | None:
    return tx.current_supervisor(machine)


def latest(tx: Tx, machine: str) -> Row | None:
    return tx.latest_supervisor(machine)


def register(tx: Tx, machine: str, time: TimeContract, info: dict[str, Any]) -> str:
    """Claim the machine's supervisor slot or raise ``SUPERVISOR_RUNNING``."""
    tx.advisory_lock(MACHINE_LOCK)
    now = tx.now()
    row = current(tx, machine)
    if row is not None:
        v = verdict(row, now, time)
        if v.state in ("running", "starting", "wedged", "unresponsive") and pid_alive(v.pid):
            raise LaneboardError(
                "SUPERVISOR_RUNNING",
                f"a supervisor is already running on {machine} (pid {v.pid}, {v.state})",
                "stop it first (kill -TERM its pid) or use lb status",
            )
        tx.mark_supervisor_dead(row["id"])
    iid = f"{machine}:{os.getpid()}:{now}"
    tx.insert_supervisor(iid, machine, os.getpid(), now, info)
    return iid


def beat(
    tx: Tx, iid: str, *, tick_started_at: int | None = None, info: dict[str, Any] | None = None
) -> None:
    tx.supervisor_beat(iid, tick_started_at, info)


def stop(tx: Tx, iid: str) -> None:
    tx.stop_supervisor(iid)


def live_instance_ids(tx: Tx, machine: str, time: TimeContract) -> set[str]:
    now = tx.now()
    out = set()
    for r in tx.running_supervisors(machine):
        if verdict(r, now, time).state in ("running", "starting", "wedged", "unresponsive"):
            out.add(str(r["id"]))
    return out


def describe(row: Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "id": row["id"],
        "machine": row["machine"],
        "pid": row["pid"],
        "started_at": iso(row["started_at"]),
        "heartbeat_at": iso(row["heartbeat_at"]),
        "tick_started_at": iso(row["tick_started_at"]),
        "state": row["state"],
        "info": json.loads(row["info"]),
    }
