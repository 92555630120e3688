"""Supervisor status, doctor and health, read through the supervisor's own reports."""

from __future__ import annotations

from typing import Any

from laneboard.store import Store


def status(store: Store) -> dict[str, Any]:
    """The dashboard's supervisor panel: ``lb status``, under this machine's configuration."""
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor.status import status_report

    return status_report(store, store.clock, load_supervisor_config())


def doctor(store: Store) -> dict[str, Any]:
    """The dashboard's doctor panel: the report ``lb doctor`` and ``GET /doctor`` give."""
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor.doctor import doctor_report

    return doctor_report(store, store.clock, load_supervisor_config())


def health(store: Store) -> tuple[int, dict[str, Any]]:
    """``/healthz``: 200 ``ok`` when the store answers and nothing is degraded; 503
    ``degraded`` with the reasons (a stuck supervisor, a failing pass, a degraded or
    failing run, a project whose cards a machine cannot prepare), or 503 ``down`` when the
    store does not answer."""
    body: dict[str, Any] = {}
    try:
        version = store.schema_version()
        with store.read() as tx:
            tx.max_event_id()
    except Exception as exc:
        body["status"] = "down"
        body["store"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        body["supervisor"] = {"state": "unknown", "detail": "the store is unreachable"}
        return 503, body
    body["store"] = {"ok": True, "schema_version": version}
    reasons: list[str] = []
    try:
        from laneboard.supervisor.status import status_report

        report = status_report(store, store.clock)  # liveness only: no configuration read
        sup = report.get("supervisor", {})
        pool = report.get("pool", {})
        reasons = list(report["health"]["reasons"])
        body["runs"] = report.get("runs")
    except Exception as exc:
        sup = {"state": "unknown", "detail": f"status report failed: {exc}"[:300]}
        pool = {"state": "unknown"}
        reasons = [str(sup["detail"])]
    body["supervisor"] = {"state": sup.get("state"), "detail": sup.get("detail")}
    body["pool"] = {"state": pool.get("state")}
    body["reasons"] = reasons
    body["status"] = "degraded" if reasons else "ok"
    return (503 if reasons else 200), body
