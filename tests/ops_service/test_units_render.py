"""Unit rendering against golden files, checked by the schedulers' own parsers."""

from __future__ import annotations

import os
import plistlib
import subprocess
import sys
from pathlib import Path

import pytest

from laneboard.service import spec as specmod
from laneboard.service.render import (
    CRON_BEGIN,
    CRON_END,
    cron_block,
    launchd_plist,
    strip_block,
    systemd_unit,
    tick_schedule,
    with_block,
)
from laneboard.service.spec import ServiceSpec

GOLDEN = Path(__file__).parent / "golden"
AGENTS = "/opt/agents/bin"


def fixed(unit: str, scheduler: str, python: str = "/opt/py/bin/python3") -> ServiceSpec:
    command = (
        ("start",) if unit == "supervisor" else ("serve", "--host", "127.0.0.1", "--port", "8765")
    )
    return ServiceSpec(
        unit=unit,
        python=python,
        command=command,
        env={
            "PATH": specmod.unit_path([AGENTS, "/opt/node/bin", "/opt/py/bin"], scheduler),
            "LANEBOARD_STATE_DIR": "/home/ann/.local/state/laneboard",
            "LANEBOARD_DATABASE_URL": "sqlite:////home/ann/.local/share/laneboard/board.db",
            "LANEBOARD_MACHINE": "ann's laptop 100%",
        },
        env_file="/home/ann/.config/laneboard/service.env",
        log=f"/home/ann/.local/state/laneboard/{unit}.log",
        state_dir="/home/ann/.local/state/laneboard",
        tick_interval=600,
    )


def _golden(name: str, got: str) -> str:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(got)
    return path.read_text()


@pytest.mark.parametrize("unit", ["supervisor", "server"])
def test_systemd_units_match_the_golden_files(unit: str) -> None:
    got = systemd_unit(fixed(unit, "systemd"))
    assert got == _golden(f"laneboard-{unit}.service", got)
    assert (
        "Restart=on-failure" in got and "--env-file /home/ann/.config/laneboard/service.env" in got
    )
    assert 'Environment="LANEBOARD_MACHINE=ann\'s laptop 100%%"' in got  # % is doubled


@pytest.mark.parametrize("unit", ["supervisor", "server"])
def test_launchd_plists_match_the_golden_files_and_parse(unit: str) -> None:
    got = launchd_plist(fixed(unit, "launchd"))
    assert got.decode() == _golden(f"local.laneboard.{unit}.plist", got.decode())
    data = plistlib.loads(got)
    assert data["Label"] == f"local.laneboard.{unit}"
    assert data["KeepAlive"] == {"SuccessfulExit": False} and data["RunAtLoad"] is True
    assert data["ProgramArguments"][:3] == ["/opt/py/bin/python3", "-m", "laneboard.service.run"]
    path = data["EnvironmentVariables"]["PATH"].split(":")
    assert path[0] == AGENTS and path[-4:] == ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    assert "service.env" not in str(data["EnvironmentVariables"])


def test_the_cron_block_matches_the_golden_file() -> None:
    got = cron_block(fixed("supervisor", "cron"))
    assert got == _golden("crontab-block.txt", got)
    lines = got.splitlines()
    assert lines[0] == CRON_BEGIN and lines[-1] == CRON_END
    ping, tick = lines[3], lines[4]
    assert ping.startswith("* * * * * PATH=") and "loop run --ping-once" in ping
    assert tick.startswith("*/10 * * * * ") and "loop run --continue-once" in tick
    assert "100\\%" in ping  # a bare % ends a cron command
    assert not any(line.startswith("PATH=") for line in lines)  # no setting line leaks


def test_tick_schedules() -> None:
    assert [tick_schedule(s) for s in (30, 60, 300, 600, 3600, 7200, 90000)] == [
        "* * * * *",
        "* * * * *",
        "*/5 * * * *",
        "*/10 * * * *",
        "0 * * * *",
        "0 */2 * * *",
        "0 0 * * *",
    ]


def test_the_cron_block_replaces_itself_and_keeps_every_other_line() -> None:
    foreign = "MAILTO=ann@example.com\n# my backups\n0 3 * * * /usr/local/bin/backup\n"
    block = cron_block(fixed("supervisor", "cron"))
    once = with_block(foreign, block)
    assert once.startswith(foreign) and once.endswith(block)
    assert with_block(once, block) == once
    rest, found = strip_block(once)
    assert rest == foreign and found == block
    assert with_block("0 1 * * * x", block) == "0 1 * * * x\n" + block


@pytest.mark.parametrize("unit", ["supervisor", "server"])
def test_systemd_analyze_verifies_the_units(unit: str, tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    path = tmp_path / f"laneboard-{unit}.service"
    path.write_text(systemd_unit(fixed(unit, "systemd", python=sys.executable)))
    out = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(path)],
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_LEVEL": "notice"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_systemd_analyze_catches_a_broken_unit(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    path = tmp_path / "broken.service"
    text = systemd_unit(fixed("supervisor", "systemd", python=sys.executable))
    path.write_text(text.replace("Restart=on-failure", "Restart=sometimes"))
    out = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(path)],
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "restart specifier" in out.stderr  # the check above would see a mistake
