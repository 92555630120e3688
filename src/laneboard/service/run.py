"""The program every unit starts: ``python -m laneboard.service.run --env-file F --log L -- ARGS``.

It loads the environment file (refusing one that others can read), sends the process's
stdout and stderr into its log (``--discard-stdout`` drops the stdout of one-shot
passes), runs ``lb ARGS`` and records how it ended: a resident command's start and exit
always, a one-shot's exit only when it failed.

Under ``lb start`` a watchdog reads this supervisor's verdict on the board every pool
heartbeat: a wedged supervisor (a tick running longer than twice the turn timeout) does
not come back by itself, and a signal cannot stop it, so the process exits with
``WEDGED_EXIT`` and the scheduler (``Restart=on-failure``, ``KeepAlive``) starts a fresh one.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laneboard.supervisor.logs import LogFile

RESIDENT = ("start", "serve")
WEDGED_EXIT = 70  # EX_SOFTWARE: not a clean exit, so every scheduler restarts the unit


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m laneboard.service.run")
    p.add_argument("--env-file", required=True, help="KEY=VALUE lines, mode 0600")
    p.add_argument("--log", required=True, help="the process's log file")
    p.add_argument("--discard-stdout", action="store_true", help="drop stdout")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then lb's arguments")
    return p


def _log_limits() -> tuple[int, int]:
    from laneboard.config import load_supervisor_config
    from laneboard.errors import LaneboardError

    try:
        cfg = load_supervisor_config()
    except LaneboardError:
        return 10 * 1024 * 1024, 5  # lb itself reports the bad file in a moment
    return cfg.log_max_bytes, cfg.log_keep


def main(argv: Sequence[str] | None = None) -> int:
    from laneboard.errors import LaneboardError
    from laneboard.service import envfile
    from laneboard.supervisor.logs import LogFile, OutputCapture

    ns = _parser().parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else list(ns.args)
    try:
        os.environ.update(envfile.load(ns.env_file))
    except LaneboardError as err:
        sys.stderr.write(err.line() + "\n")
        LogFile(ns.log).error("service", err.line(), command=" ".join(args))
        return err.exit_code
    max_bytes, keep = _log_limits()
    log = LogFile(ns.log, max_bytes, keep)
    resident = bool(args) and args[0] in RESIDENT
    if resident:
        log.info("service", "starting", command=" ".join(args), pid=os.getpid())
    capture = OutputCapture(log, discard_stdout=ns.discard_stdout).start()
    if args[:1] == ["start"]:
        Watchdog(log).start()
    code = 1
    try:
        from laneboard.cli.main import main as lb

        code = lb(args)
    except SystemExit as exc:  # a usage error: argparse exits
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        stop.set()
        capture.stop()
        if resident or code != 0:
            log.write(
                "info" if code == 0 else "error",
                "service",
                "exited",
                command=" ".join(args),
                code=code,
            )
    return code


class Watchdog(threading.Thread):
    """Ends this process when the board says its supervisor is wedged."""

    def __init__(self, log: LogFile) -> None:
        super().__init__(name="service-watchdog", daemon=True)
        self.log = log

    def run(self) -> None:
        from laneboard.config import load_supervisor_config
        from laneboard.errors import LaneboardError
        from laneboard.store import open_store

        try:
            time = load_supervisor_config().time
            store = open_store(None, migrate=False)
        except LaneboardError:
            return  # lb start reports the same problem and stops
        while not stop.wait(time.pool_heartbeat):
            try:
                detail = wedged(store, os.getpid(), time)
            except Exception:  # the board is unreachable now: not a reason to restart
                continue
            if detail is not None:
                self.log.error(
                    "service",
                    f"wedged ({detail}): exiting so a fresh supervisor starts",
                    code=WEDGED_EXIT,
                )
                os._exit(WEDGED_EXIT)


stop = threading.Event()


def wedged(store: Any, pid: int, time: Any) -> str | None:
    """Why this machine's supervisor with ``pid`` is wedged, or None."""
    from laneboard.supervisor import instances

    with store.read() as tx:
        row = instances.current(tx, instances.machine_name())
        now = tx.now()
    if row is None or int(row["pid"]) != pid:
        return None
    v = instances.verdict(row, now, time)
    return v.detail if v.state == "wedged" else None


if __name__ == "__main__":
    sys.exit(main())
