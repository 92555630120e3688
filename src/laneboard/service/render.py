"""A ``ServiceSpec`` as a systemd user unit, a launchd agent plist, or a cron block."""

from __future__ import annotations

import plistlib
import shlex

from laneboard.service.spec import ServiceSpec

MARK = "managed by laneboard"
SYSTEMD_NAMES = {"supervisor": "laneboard-supervisor.service", "server": "laneboard-server.service"}
LAUNCHD_LABELS = {"supervisor": "local.laneboard.supervisor", "server": "local.laneboard.server"}
CRON_BEGIN = "# >>> laneboard supervisor >>>"
CRON_END = "# <<< laneboard supervisor <<<"


def _command(unit: str) -> str:
    return "lb supervisor" if unit == "supervisor" else "lb service"


# -- systemd ---------------------------------------------------------------------------------
def _sd_arg(arg: str) -> str:
    """One ExecStart word: ``%`` doubled, quoted when it holds a space or a quote."""
    text = arg.replace("%", "%%")
    if any(c in text for c in " \t\"'\\;"):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _sd_env(key: str, value: str) -> str:
    text = f"{key}={value}".replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    return f'Environment="{text}"'


def systemd_unit(spec: ServiceSpec) -> str:
    verb = _command(spec.unit)
    target = "" if spec.unit == "supervisor" else " server"
    lines = [
        f"# {spec.description} — {MARK}: written by `{verb} enable{target}`,",
        f"# removed by `{verb} disable{target}`. Edits are replaced on the next enable.",
        "# The program writes and rotates its own log; output goes there too, so the",
        "# journal only keeps what is printed before the interpreter starts.",
        "[Unit]",
        f"Description={spec.description}",
        "StartLimitIntervalSec=300",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(_sd_arg(a) for a in spec.program()),
        "Restart=on-failure",
        "RestartSec=5",
        "TimeoutStopSec=90",
        *(_sd_env(k, v) for k, v in spec.env.items()),
        "",
        "[Install]",
        "WantedBy=default.target",
    ]
    return "\n".join(lines) + "\n"


# -- launchd ---------------------------------------------------------------------------------
def launchd_plist(spec: ServiceSpec) -> bytes:
    data = {
        "Label": LAUNCHD_LABELS[spec.unit],
        "ProgramArguments": spec.program(),
        "EnvironmentVariables": dict(spec.env),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # restart after a failure, not a clean stop
        "ThrottleInterval": 10,
        "ProcessType": "Background",
        "StandardOutPath": spec.start_log,
        "StandardErrorPath": spec.start_log,
        "WorkingDirectory": spec.state_dir,
    }
    return plistlib.dumps(data, sort_keys=True)


# -- cron ------------------------------------------------------------------------------------
def _cron_quote(arg: str) -> str:
    return shlex.quote(arg).replace("%", "\\%")


def tick_schedule(seconds: int) -> str:
    """The cron schedule nearest to every ``seconds`` (at least every minute)."""
    minutes = max(1, round(seconds / 60))
    if minutes == 1:
        return "* * * * *"
    if minutes < 60:
        return f"*/{minutes} * * * *"
    hours = minutes // 60
    return "0 * * * *" if hours == 1 else ("0 0 * * *" if hours >= 24 else f"0 */{hours} * * *")


def cron_line(spec: ServiceSpec, schedule: str, command: tuple[str, ...]) -> str:
    env = " ".join(f"{k}={_cron_quote(v)}" for k, v in spec.env.items())
    argv = " ".join(_cron_quote(a) for a in spec.program(command, quiet=True))
    return f"{schedule} {env} {argv} >/dev/null 2>>{_cron_quote(spec.start_log)}"


def cron_block(spec: ServiceSpec) -> str:
    """The supervisor as one-shot passes: the ping every minute, the tick on its interval."""
    lines = [
        CRON_BEGIN,
        f"# {MARK}: written by `lb supervisor enable --scheduler cron`, removed by",
        "# `lb supervisor disable`. Lines outside the markers are never touched.",
        cron_line(spec, "* * * * *", ("loop", "run", "--ping-once")),
        cron_line(spec, tick_schedule(spec.tick_interval), ("loop", "run", "--continue-once")),
        CRON_END,
    ]
    return "\n".join(lines) + "\n"


def strip_block(crontab: str) -> tuple[str, str | None]:
    """(the crontab without laneboard's block, the block or None). Other lines are kept."""
    out: list[str] = []
    block: list[str] | None = None
    inside = False
    for line in crontab.splitlines():
        if line.strip() == CRON_BEGIN:
            inside, block = True, [line]
            continue
        if inside:
            assert block is not None
            block.append(line)
            if line.strip() == CRON_END:
                inside = False
            continue
        out.append(line)
    text = "\n".join(out) + ("\n" if out else "")
    return text, ("\n".join(block) + "\n" if block else None)


def with_block(crontab: str, block: str) -> str:
    rest, _ = strip_block(crontab)
    if rest and not rest.endswith("\n"):
        rest += "\n"
    return rest + block
