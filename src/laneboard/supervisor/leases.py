"""Leases held by a dead holder are taken over; the ones that block a pass are named.

A lease (the ``locks`` table: ``tick:<machine>`` is a machine's single-flight tick lease,
``pass:<name>`` a once-per-cluster pass's, see ``cluster``) names its holder
as ``machine:pid:tag``. Its TTL (``max(turn timeout, 60 s)``) bounds how long a holder that
died without releasing it could block every pass; the next tick does not wait for that:
a holder that is a dead process on this machine, or whose supervisor instance is already
marked dead or stopped, is broken at once. ``lb status`` and ``lb doctor`` list every held
lease with its holder and whether that holder is alive.
"""

from __future__ import annotations

from typing import Any

from laneboard.agents.procs import pid_alive
from laneboard.domain.clock import iso
from laneboard.store.base import Row
from laneboard.store.tx import Tx


def parse_holder(holder: str) -> tuple[str, int] | None:
    """(machine, pid) of a ``machine:pid:tag`` holder; None when it names no process."""
    parts = holder.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def dead_reason(tx: Tx, holder: str, machine: str) -> str | None:
    """Why ``holder`` is certainly dead, or None while it may be alive."""
    parsed = parse_holder(holder)
    if parsed is None:
        return None
    where, pid = parsed
    if where == machine and not pid_alive(pid):
        return f"process {pid} on {machine} is gone"
    states = {str(r["state"]) for r in tx.supervisors_with_pid(where, pid)}
    if states and states <= {"dead", "stopped", "fenced"}:
        return f"its supervisor (pid {pid} on {where}) is marked {'/'.join(sorted(states))}"
    return None


def acquire(tx: Tx, name: str, holder: str, ttl_ms: int, machine: str) -> tuple[bool, str]:
    """Take the lease, breaking it first when its holder is dead. Returns (taken, note)."""
    taken, note, _ = take(tx, name, holder, ttl_ms, machine)
    return taken, note


def take(tx: Tx, name: str, holder: str, ttl_ms: int, machine: str) -> tuple[bool, str, str | None]:
    """``acquire``, and who holds the lease when it was not taken (None: nobody now)."""
    if tx.acquire_lock(name, holder, ttl_ms):
        return True, "", None
    row = tx.lock_row(name)
    if row is None:
        return tx.acquire_lock(name, holder, ttl_ms), "", None
    other = str(row["holder"])
    why = dead_reason(tx, other, machine)
    if why is None:
        return False, f"{name} lock held by {other}", other
    tx.release_lock(name, other)
    if not tx.acquire_lock(name, holder, ttl_ms):
        return False, f"{name} lock held by {other}", other
    return True, f"took over the {name} lease of {other} ({why})", None


def describe(tx: Tx, now: int, machine: str) -> list[dict[str, Any]]:
    """Every held lease: its holder, since when, until when, and whether it blocks."""
    out = []
    for r in tx.lock_rows():
        out.append(_line(tx, r, now, machine))
    return out


def _line(tx: Tx, r: Row, now: int, machine: str) -> dict[str, Any]:
    holder = str(r["holder"])
    dead = dead_reason(tx, holder, machine)
    expires = int(r["expires_at"])
    return {
        "name": r["name"],
        "holder": holder,
        "acquired_at": iso(int(r["acquired_at"])),
        "expires_at": iso(expires),
        "held_s": round((now - int(r["acquired_at"])) / 1000, 1),
        "expired": expires <= now,
        "holder_dead": dead,
        # a live lease of a dead holder blocks every pass until a tick breaks it
        "blocking": expires > now and dead is not None,
    }
