"""Supervisor status, doctor and health, read through the supervisor's own reports."""

from __future__ import annotations

from typing import Any

from laneboard.store import Store

DEGRADED = frozenset({"wedged", "unresponsive"})


def status(store: Store) -> dict[str, Any]:
    from laneboard.supervisor.status import status_report

    return status_report(store, store.clock)


def doctor(store: Store) -> dict[str, Any]:
    from laneboard.supervisor.doctor import doctor_report

    return doctor_report(store, store.clock)


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
