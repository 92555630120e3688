"""The SLA patrol: notify-only. It measures, alerts and never moves a card.

The rows and the plan of alerts due now are in ``patrol_rows``. Alerts are
de-duplicated in the alert ledger keyed by state (a tier promotion always re-notifies),
re-checked against a fresh read before they are sent, then appended to the event stream
and piped as JSON to the notify command. Each completed pass records its time as the
``patrol:<machine>`` mark.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from laneboard.domain.model import system
from laneboard.store.tx import Tx
from laneboard.supervisor.patrol_rows import (
    ROWS,
    Alert,
    PatrolSettings,
    _recheck,
    elapsed_ms,
    plan,
)

__all__ = [
    "ROWS",
    "Alert",
    "PatrolResult",
    "PatrolSettings",
    "elapsed_ms",
    "load_settings",
    "mark",
    "marks",
    "notify",
    "patrol_pass",
    "plan",
    "run_patrol",
    "settings_of",
]

PATROL_ACTOR = system("Patrol")


def load_settings(path: str | None = None, **overrides: Any) -> PatrolSettings:
    """``[patrol]``: flags, then ``LANEBOARD_NOTIFY_COMMAND``, then the user's config file."""
    from laneboard.config import patrol_values

    return replace(PatrolSettings(), **patrol_values(path, overrides)).validate()


def settings_of(rt: Any) -> PatrolSettings:
    """The runtime's ``[patrol]`` settings, read once per runtime (``lb start`` reads them
    at start with its flags), not again at every tick."""
    settings = getattr(rt, "patrol_settings", None)
    if settings is None:
        settings = load_settings()
        rt.patrol_settings = settings
    return settings


# -- the ledger -------------------------------------------------------------------------
Ledger = Callable[[Tx, str, str, str, dict[str, Any], int | None], bool]


def _ledger() -> Ledger:
    """The shared alert ledger (``supervisor.alerts``) when installed, else a local one."""
    try:
        from laneboard.supervisor import alerts
    except ImportError:
        return _local_raise

    def shared(
        tx: Tx, key: str, state: str, severity: str, body: dict[str, Any], card_id: int | None
    ) -> bool:
        return alerts.raise_alert(
            tx, key, state, severity, body, actor=PATROL_ACTOR, card_id=card_id
        )

    return shared


def _local_raise(
    tx: Tx, key: str, state: str, severity: str, body: dict[str, Any], card_id: int | None
) -> bool:
    """Fallback ledger in ``patrol_marks``: send when the key is new or its state changed."""
    name = "alert:" + key
    r = tx.patrol_mark(name)
    if r is not None and json.loads(r["info"]).get("state") == state:
        return False
    mark(tx, name, {"state": state, "severity": severity})
    tx.append_event(
        "alert",
        PATROL_ACTOR,
        card_id=card_id,
        payload={**body, "key": key, "state": state, "severity": severity},
    )
    return True


def mark(tx: Tx, name: str, info: dict[str, Any]) -> None:
    tx.set_patrol_mark(name, info)


def marks(tx: Tx, prefix: str) -> list[dict[str, Any]]:
    return [
        {"name": r["name"], "at": int(r["at"]), "info": json.loads(r["info"])}
        for r in tx.patrol_marks_like(prefix)
    ]


# -- the pass -------------------------------------------------------------------------------
@dataclass
class PatrolResult:
    planned: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)
    suppressed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    notify_errors: list[str] = field(default_factory=list)
    dry_run: bool = False
    plan: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "sent": self.sent,
            "suppressed": self.suppressed,
            "dropped": self.dropped,
            "notify_errors": self.notify_errors,
            "dry_run": self.dry_run,
            "plan": self.plan,
        }


def notify(command: str, alert: dict[str, Any], timeout_s: float = 120) -> str | None:
    """Pipe one alert as JSON to the notify command; returns an error line or None."""
    try:
        out = subprocess.run(
            command,
            shell=True,
            input=json.dumps(alert, sort_keys=True) + "\n",
            text=True,
            capture_output=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"notify command failed: {exc}"
    if out.returncode != 0:
        return f"notify command exited {out.returncode}: {out.stderr.strip()[:300]}"
    return None


def run_patrol(
    store: Any,
    settings: PatrolSettings,
    machine: str,
    *,
    dry_run: bool = False,
    log: Any = None,
    subprocess_bound: float = 120,
) -> PatrolResult:
    res = PatrolResult(dry_run=dry_run)
    now = store.clock.now_ms()
    with store.read() as tx:
        alerts = plan(tx, now, settings)
    res.planned = len(alerts)
    if dry_run:
        res.plan = [a.to_dict(now) for a in alerts]
        return res
    raise_alert = _ledger()
    for alert in alerts:
        with store.write() as tx:
            now = tx.now()
            if not _recheck(tx, alert, now, settings):
                res.dropped.append(alert.dedup_key)
                if log is not None:
                    log.info("patrol", "alert dropped by its re-check", key=alert.dedup_key)
                continue
            body = alert.to_dict(now)
            if not raise_alert(
                tx, alert.dedup_key, alert.tier, alert.severity, body, alert.card_id
            ):
                res.suppressed.append(alert.dedup_key)
                continue
        res.sent.append(body)
        if log is not None:
            log.warn("patrol", f"{alert.row} {alert.tier}", card=alert.card, key=alert.dedup_key)
        if settings.notify_command:
            err = notify(settings.notify_command, body, subprocess_bound)
            if err:
                res.notify_errors.append(err)
                if log is not None:
                    log.error("patrol", err, key=alert.dedup_key)
    with store.write() as tx:
        mark(
            tx,
            f"patrol:{machine}",
            {"planned": res.planned, "sent": len(res.sent), "suppressed": len(res.suppressed)},
        )
    return res


def patrol_pass(rt: Any, dry_run: bool) -> dict[str, Any]:
    """The tick's patrol pass (registered as ``PASSES["patrol"]``)."""
    settings = settings_of(rt)
    return run_patrol(
        rt.store,
        settings,
        rt.machine,
        dry_run=dry_run,
        log=rt.log,
        subprocess_bound=rt.config.time.subprocess_bound,
    ).to_dict()
