"""Supervisor instances: one resident supervisor per machine, and the pool's verdicts."""

from __future__ import annotations

import functools
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


@functools.cache
def here() -> str:
    """Where this process's pids mean something: its host name, the kernel's boot and its
    PID namespace (containers on one host share the boot, not the namespace). A row
    registered elsewhere under the same machine name is judged by its beats alone."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = ""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()}|{boot}|{ns}"


def info_of(row: Row) -> dict[str, Any]:
    """What a supervisor declared in its row's info (empty when unreadable)."""
    try:
        info = json.loads(row.get("info") or "{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _where(row: Row) -> str | None:
    """Where a supervisor row was registered (None: a row from before this was kept)."""
    where = info_of(row).get("where")
    return str(where) if where else None


def _host_of(where: str) -> str:
    return where.split("|", 1)[0] or "another host"


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
    local = local and _where(row) in (None, here())  # a pid elsewhere is not looked up
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
        _refuse_live(row, verdict(row, now, time), machine)
        tx.mark_supervisor_dead(row["id"])
    iid = f"{machine}:{os.getpid()}:{now}"
    tx.insert_supervisor(iid, machine, os.getpid(), now, {**info, "where": here()})
    return iid


def _refuse_live(row: Row, v: Verdict, machine: str) -> None:
    """``SUPERVISOR_RUNNING`` when ``row``'s supervisor still runs: here, while its
    process lives; on another host under the same name, while it beats."""
    where = _where(row)
    if where in (None, here()):
        if v.state in ("running", "starting", "wedged", "unresponsive") and pid_alive(v.pid):
            raise LaneboardError(
                "SUPERVISOR_RUNNING",
                f"a supervisor is already running on {machine} (pid {v.pid}, {v.state})",
                "stop it first (kill -TERM its pid) or use lb status",
            )
        return
    if v.state in ("running", "starting", "wedged"):
        raise LaneboardError(
            "SUPERVISOR_RUNNING",
            f"a supervisor on {_host_of(where)} already runs as machine {machine} "
            f"(pid {v.pid} there, last beat {v.heartbeat_age_s:.0f}s ago)",
            "give each machine its own name: LANEBOARD_MACHINE=NAME lb start "
            "(or stop the other one first)",
        )


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
