"""Supervisor status, doctor and health, read through the supervisor's own reports.

The supervisor package provides ``laneboard.supervisor.status.status_report`` and, once
installed, ``laneboard.supervisor.doctor.doctor_report``. Both are imported lazily; when
a module is missing the supervisor is reported ``absent`` (no supervisor is running
that this server could describe).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from laneboard.errors import LaneboardError
from laneboard.store import Store

DEGRADED = frozenset({"wedged", "unresponsive"})


def _function(module: str, name: str) -> Any:
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except ModuleNotFoundError:
        return None
    return getattr(importlib.import_module(module), name, None)


def absent() -> dict[str, Any]:
    return {
        "supervisor": {
            "state": "absent",
            "detail": "the supervisor status report is not installed",
        },
        "pool": {"state": "absent"},
        "queue": {"counts": {}, "live": []},
        "sessions": [],
    }


def status(store: Store) -> dict[str, Any]:
    fn = _function("laneboard.supervisor.status", "status_report")
    if fn is None:
        return absent()
    report: dict[str, Any] = fn(store, store.clock)
    return report


def doctor(store: Store) -> dict[str, Any]:
    fn = _function("laneboard.supervisor.doctor", "doctor_report")
    if fn is None:
        raise LaneboardError(
            "NOT_FOUND",
            "the doctor report is not available in this installation",
            "use GET /api/v1/status for the supervisor and pool verdicts",
        )
    report: dict[str, Any] = fn(store, store.clock)
    return report


def health(store: Store) -> tuple[int, dict[str, Any]]:
    """``/healthz``: 200 when the store answers and the supervisor is not degraded."""
    body: dict[str, Any] = {}
    try:
        version = store.schema_version()
        with store.read() as tx:
            tx.max_event_id()
    except Exception as exc:
        body["status"] = "unavailable"
        body["store"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        body["supervisor"] = {"state": "unknown", "detail": "the store is unreachable"}
        return 503, body
    body["store"] = {"ok": True, "schema_version": version}
    try:
        report = status(store)
        sup = report.get("supervisor", {})
        pool = report.get("pool", {})
    except Exception as exc:
        sup = {"state": "unknown", "detail": f"status report failed: {exc}"[:300]}
        pool = {"state": "unknown"}
    body["supervisor"] = {"state": sup.get("state"), "detail": sup.get("detail")}
    body["pool"] = {"state": pool.get("state")}
    degraded = sup.get("state") in DEGRADED or sup.get("state") == "unknown"
    body["status"] = "degraded" if degraded else "ok"
    return (503 if degraded else 200), body
