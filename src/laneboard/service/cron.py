"""cron: a marked block in the user's crontab running the supervisor's one-shot passes.

Only the lines between the begin and end markers are laneboard's; every other line of
the crontab is kept as it is. cron cannot keep a process alive, so the server has no
cron unit, and the supervisor runs as ``lb loop run --ping-once`` every minute and
``--continue-once`` on the tick interval.
"""

from __future__ import annotations

from laneboard.errors import LaneboardError
from laneboard.service import tools
from laneboard.service.render import cron_block, strip_block, with_block
from laneboard.service.spec import ServiceSpec
from laneboard.service.state import Outcome, UnitState

NAME = "cron"
WHERE = "the crontab"


def where() -> str:
    return tools.crontab_file() or WHERE


def available() -> tuple[bool, str]:
    if tools.crontab_available():
        return True, ""
    return False, "crontab is not available"


def refuse_server() -> LaneboardError:
    return LaneboardError(
        "SCHEDULER_UNAVAILABLE",
        "cron cannot keep the server running (it only starts one-shot commands)",
        "use --scheduler systemd (Linux) or --scheduler launchd (macOS)",
    )


def status(unit: str, spec: ServiceSpec | None) -> UnitState:
    if unit != "supervisor":
        return UnitState(unit, NAME, detail="cron has no server unit")
    try:
        crontab = tools.read_crontab()
    except LaneboardError as err:
        return UnitState(unit, NAME, path=where(), detail=err.message)
    _, block = strip_block(crontab)
    st = UnitState(unit, NAME, path=where(), installed=block is not None)
    st.loaded = block is not None
    st.running = None  # no resident process: each line is one pass
    if block is not None and spec is not None:
        st.current = block == cron_block(spec)
    st.detail = "one-shot passes from cron" if block else "no laneboard block"
    return st


def install(spec: ServiceSpec, *, refresh: bool = False) -> Outcome:
    """Put the block in the crontab (each pass reads the environment file afresh, so
    ``refresh`` needs nothing more)."""
    if spec.unit != "supervisor":
        raise refuse_server()
    out = Outcome(spec.unit, NAME, "enabled")
    before = tools.read_crontab()
    _, old = strip_block(before)
    after = with_block(before, cron_block(spec))
    if after == before:
        out.action = "already enabled"
        return out
    tools.write_crontab(after)
    out.files.append(where())
    if tools.crontab_file() is None:
        out.commands.append(["crontab", "-"])
    if old is not None:
        out.action = "reloaded"
    return out


def remove(unit: str) -> Outcome:
    out = Outcome(unit, NAME, "disabled")
    if unit != "supervisor":
        out.action = "already disabled"
        return out
    before = tools.read_crontab()
    rest, block = strip_block(before)
    if block is None:
        out.action = "already disabled"
        return out
    tools.write_crontab(rest)
    out.files.append(where())
    return out


def plan(spec: ServiceSpec) -> tuple[dict[str, str], list[list[str]]]:
    if spec.unit != "supervisor":
        raise refuse_server()
    return {where(): cron_block(spec)}, [["crontab", "-"]]
