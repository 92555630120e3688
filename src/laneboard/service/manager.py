"""``enable``, ``disable`` and ``status`` of the supervisor and server units.

``auto`` picks launchd on macOS, systemd where ``systemctl --user`` answers, else cron
(the supervisor only). One supervisor runs per machine: enabling it is refused while one
runs that the unit did not start, and while another scheduler already has it.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from laneboard.errors import LaneboardError
from laneboard.service import cron, envfile, launchd, spec, systemd, tools
from laneboard.service.state import Outcome, UnitState, read_text

SCHEDULERS: dict[str, ModuleType] = {"systemd": systemd, "launchd": launchd, "cron": cron}
CHOICES = ("auto", *SCHEDULERS)


def choose(name: str, unit: str) -> ModuleType:
    if name != "auto":
        backend = SCHEDULERS[name]
        ok, why = backend.available()
        if not ok:
            fix = "choose another --scheduler"
            if name == "systemd":
                fix = "no user systemd here (a container, WSL, a non-systemd system): use --scheduler cron"
            raise LaneboardError("SCHEDULER_UNAVAILABLE", f"{name}: {why}", fix)
        if name == "cron" and unit == "server":
            raise cron.refuse_server()
        return backend
    return SCHEDULERS[detect(unit)]


def detect(unit: str) -> str:
    if sys.platform == "darwin":
        return "launchd"
    ok, why = systemd.available()
    if ok:
        return "systemd"
    if unit == "supervisor" and cron.available()[0]:
        return "cron"
    raise LaneboardError(
        "SCHEDULER_UNAVAILABLE",
        f"no scheduler for the {unit} here: {why}"
        + ("" if unit == "server" else ", and crontab is not available"),
        "start a systemd user session, install cron, or run lb start by hand",
    )


def installed_with(unit: str) -> list[str]:
    """The schedulers that have this unit installed (read from their files only)."""
    import os

    found = []
    if os.path.exists(systemd.unit_file(unit)):
        found.append("systemd")
    if os.path.exists(launchd.plist_file(unit)):
        found.append("launchd")
    if unit == "supervisor" and tools.crontab_available():
        from laneboard.service.render import strip_block

        try:
            crontab = tools.read_crontab()
        except LaneboardError:
            crontab = ""  # an unreadable crontab holds no block of ours that could run
        if strip_block(crontab)[1] is not None:
            found.append("cron")
    return found


# -- enable ----------------------------------------------------------------------------------
def enable(
    unit: str,
    scheduler: str,
    *,
    store: Any = None,
    db: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    preview: bool = False,
    machine: spec.Machine | None = None,
) -> Outcome:
    backend = choose(scheduler, unit)
    if unit == "server":
        _need_server_extra()
    sp, secrets = spec.build(unit, backend.NAME, db=db, host=host, port=port, machine=machine)
    if preview:
        return _preview(backend, sp, secrets)
    others = [s for s in installed_with(unit) if s != backend.NAME]
    if others:
        raise LaneboardError(
            "CONFLICT",
            f"the {unit} is already enabled with {others[0]}; two would double every clock",
            f"disable it first: {_verb(unit)} disable --scheduler {others[0]}",
        )
    if unit == "supervisor" and store is not None:
        refuse_second(store, backend)
    env_files = _write_env_file(secrets)
    out: Outcome = backend.install(sp, refresh=bool(env_files))
    out.files[:0] = env_files
    if env_files and out.action == "already enabled":
        out.action = "reloaded"
    out.warnings[:0] = list(sp.warnings)
    out.status = backend.status(unit, sp)
    return out


def _need_server_extra() -> None:
    """A server unit whose ``lb serve`` cannot start would only restart in a loop."""
    import importlib.util

    missing = [m for m in ("starlette", "uvicorn", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"the server extra is not installed ({missing[0]} is missing), so lb serve cannot start",
            "install it with: pip install 'laneboard[server]', then enable again",
        )


def _verb(unit: str) -> str:
    return "lb supervisor" if unit == "supervisor" else "lb service"


def _preview(backend: ModuleType, sp: spec.ServiceSpec, secrets: dict[str, str]) -> Outcome:
    files, commands = backend.plan(sp)
    out = Outcome(sp.unit, backend.NAME, "print", commands=commands, warnings=list(sp.warnings))
    if secrets:
        masked = {k: "***" for k in secrets}
        out.preview[sp.env_file] = envfile.render(read_text(sp.env_file) or "", masked)
    out.preview.update(files)
    return out


def _write_env_file(secrets: dict[str, str]) -> list[str]:
    """Put the managed secrets in the environment file (and drop stale ones)."""
    import os

    path = envfile.env_file_path()
    have = read_text(path)
    if not secrets and have is None:
        return []
    want = envfile.render(have or "", secrets)
    if not secrets and have is not None and envfile.only_managed(want):
        os.remove(path)  # nothing of ours is needed, and nothing else was in it
        return [path]
    if want == have:
        return []
    envfile.write(path, want)
    return [path]


def refuse_second(store: Any, backend: ModuleType) -> None:
    """A live supervisor on this machine that this unit did not start: refuse."""
    from laneboard.agents.procs import pid_alive
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor import instances

    machine = instances.machine_name()
    with store.read() as tx:
        row = instances.current(tx, machine)
        v = instances.verdict(row, tx.now(), load_supervisor_config().time)
    if v.state not in ("running", "starting", "wedged", "unresponsive") or not pid_alive(v.pid):
        return
    ours = backend.status("supervisor", None).pid
    if ours is not None and ours == v.pid:
        return
    raise LaneboardError(
        "SUPERVISOR_RUNNING",
        f"a supervisor is already running on {machine} (pid {v.pid}, {v.state}), not "
        f"started by {backend.NAME}",
        f"stop it first (kill -TERM {v.pid}), then enable again",
    )


# -- disable and status ------------------------------------------------------------------------
def disable(unit: str, scheduler: str) -> list[Outcome]:
    import os

    names = installed_with(unit) if scheduler == "auto" else [scheduler]
    if scheduler != "auto" and scheduler == "cron" and unit == "server":
        names = []
    outs = [SCHEDULERS[n].remove(unit) for n in names]
    if not outs:
        outs = [Outcome(unit, scheduler if scheduler != "auto" else "none", "already disabled")]
    path = envfile.env_file_path()
    have = read_text(path)
    if have is not None and not any(installed_with(u) for u in spec.UNITS):
        if envfile.only_managed(have):
            os.remove(path)
            outs[-1].files.append(path)
        else:
            outs[-1].warnings.append(f"kept {path}: it holds lines you added (secrets?)")
    return outs


def status(unit: str, scheduler: str, *, store: Any = None) -> list[dict[str, Any]]:
    names = installed_with(unit) if scheduler == "auto" else [scheduler]
    if not names:
        try:
            names = [detect(unit)]
        except LaneboardError as err:
            return [{**UnitState(unit, "none", detail=err.message).to_dict(), "board": None}]
    out = []
    for name in names:
        backend = SCHEDULERS[name]
        try:
            sp, _ = spec.build(unit, name)
        except LaneboardError:
            sp = None
        st = backend.status(unit, sp).to_dict()
        if unit == "supervisor":
            st["board"] = _board_view(store)
            if name == "cron":
                st["last_exit"] = _last_failure(sp)
        out.append(st)
    return out


def _board_view(store: Any) -> dict[str, Any] | None:
    if store is None:
        return None
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor import instances

    with store.read() as tx:
        row = instances.latest(tx, instances.machine_name())
        v = instances.verdict(row, tx.now(), load_supervisor_config().time)
    return v.to_dict()


def _last_failure(sp: spec.ServiceSpec | None) -> dict[str, Any] | None:
    """cron's last failed pass, from the log (cron itself keeps no exit status)."""
    if sp is None:
        return None
    from laneboard.supervisor import logs_read

    for line in reversed(logs_read.read(sp.state_dir, ("supervisor",))):
        f = line.fields
        if f.get("component") == "service" and f.get("msg") == "exited":
            return {
                "code": int(f.get("code") or 0),
                "at": f.get("time"),
                "command": f.get("command"),
            }
    return None
