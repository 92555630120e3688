"""One ping: supervisor liveness on this machine, wedged pools, orphaned rows."""

from __future__ import annotations

import os
import signal
from typing import Any

from laneboard.agents.procs import pid_alive
from laneboard.supervisor import instances, records
from laneboard.supervisor.runtime import Runtime


def ping_once(rt: Runtime, *, dry_run: bool = False) -> dict[str, Any]:
    """Read-mostly: marks dead instances, SIGTERMs a wedged local pool (not in dry run)."""
    actions: list[str] = []
    with rt.store.read() as tx:
        rows = tx.live_supervisors(rt.machine)
        now = tx.now()
        processing = records.queue_rows(tx, machine=rt.machine, states=("processing",))
    verdicts = []
    for row in rows:
        v = instances.verdict(row, now, rt.config.time)
        verdicts.append(v.to_dict())
        if v.state == "absent" and not dry_run:
            with rt.store.write() as tx:
                tx.mark_supervisor_dead(row["id"])
            actions.append(f"marked {row['id']} dead (process gone)")
        elif v.state == "wedged" and v.pid and not dry_run:
            try:
                os.kill(v.pid, signal.SIGTERM)
                actions.append(f"sent SIGTERM to wedged supervisor {v.pid}")
            except ProcessLookupError:
                pass
    orphans = [
        {"queue": r.id, "card_id": r.card_id, "pid": r.pid, "agent_alive": pid_alive(r.pid)}
        for r in processing
    ]
    return {
        "machine": rt.machine,
        "supervisors": verdicts,
        "processing": orphans,
        "actions": actions,
        "dry_run": dry_run,
    }
