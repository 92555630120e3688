"""The alert of a project whose cards this machine cannot admit, for the project's own
reason (its remote cannot be fetched, its settings file is broken), not a card's.

Such a failure is counted toward no card's bound: every ready card of the project waits,
unclaimed and not held, and the poll tries again every ``poll.PROJECT_RETRY_MS``. One
alert per project and machine (reachability is a machine's) says so while it lasts; the
first admission of the project that succeeds on that machine clears it.
"""

from __future__ import annotations

from laneboard.domain.model import Project
from laneboard.supervisor.alerts import PROJECT_ADMISSION, clear_alert, raise_alert
from laneboard.supervisor.runtime import Runtime

ALERT = PROJECT_ADMISSION


def key(project: Project, machine: str) -> str:
    return f"{ALERT}|{project.key}|{machine}"


def failing(rt: Runtime, project: Project, why: str, code: str, retry_s: int) -> None:
    """Raise the project's alert on this machine (once per state: ``raise_alert``).
    ``code``: the admission's error code (``PROJECT_DIR_MISSING``: the project's checkout
    is not on this machine, as in a cluster where it lives on another)."""
    what = "its remote" if project.remote else "its settings or its directory"
    with rt.store.write() as tx:
        raise_alert(
            tx,
            key(project, rt.machine),
            "failing",
            "warning",
            {
                "alert": "project_admission_failing",
                "code": code,
                "project": project.key,
                "machine": rt.machine,
                "detail": f"machine {rt.machine} cannot prepare cards of {project.key}: {why}",
                "fix": f"fix {what} (the detail says what failed); its cards wait, unclaimed "
                f"and not held, and are tried again every {retry_s} s",
            },
            actor=rt.actor,
            project_id=project.id,
        )
    rt.project_alerts[project.id] = True


def admitted(rt: Runtime, project: Project) -> None:
    """A card of the project was admitted here: its alert, if any, is over."""
    if rt.project_alerts.get(project.id, True):  # raised here, or not known since start
        with rt.store.write() as tx:
            clear_alert(tx, key(project, rt.machine))
        rt.project_alerts[project.id] = False
