"""cron (a temporary crontab file, or a fake crontab command) and launchd (a fake
launchctl): insert, update, idempotence and removal with foreign lines kept."""

from __future__ import annotations

import json
import plistlib

from tests.ops_service import fakes
from tests.ops_service.conftest import Home

from laneboard.service.render import CRON_BEGIN, CRON_END

FOREIGN = "MAILTO=ann@example.com\n# nightly backup\n0 3 * * * /usr/local/bin/backup --all\n"


def _cron(home: Home, *args: str) -> dict:  # type: ignore[type-arg]
    out = home.lb("supervisor", *args, "--scheduler", "cron", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def test_cron_block_insert_update_idempotence_and_removal(home: Home) -> None:
    crontab = home.root / "crontab"
    crontab.write_text(FOREIGN)
    assert _cron(home, "enable")["action"] == "enabled"
    text = crontab.read_text()
    assert (
        text.startswith(FOREIGN) and text.count(CRON_BEGIN) == 1 and text.endswith(CRON_END + "\n")
    )
    block = text[len(FOREIGN) :].splitlines()
    assert block[3].startswith("* * * * * PATH=") and block[3].endswith(
        f"loop run --ping-once >/dev/null 2>>{home.state}/supervisor.start.log"
    )
    assert block[4].startswith("*/10 * * * * ") and "--continue-once" in block[4]
    assert str(home.root / "config" / "laneboard" / "service.env") in block[3]

    assert _cron(home, "enable")["action"] == "already enabled"
    assert crontab.read_text() == text

    home.user_file("[supervisor.time]\ntick_interval = 300\n")
    assert _cron(home, "enable")["action"] == "reloaded"
    updated = crontab.read_text()
    assert updated.startswith(FOREIGN) and updated.count(CRON_BEGIN) == 1
    assert "\n*/5 * * * * " in updated and "*/10" not in updated

    with crontab.open("a") as fh:  # the user adds a job after the block
        fh.write("30 * * * * /usr/bin/true\n")
    status = json.loads(home.lb("supervisor", "status", "--json").stdout)[0]
    assert (status["scheduler"], status["installed"], status["running"]) == ("cron", True, None)
    assert _cron(home, "disable")["action"] == "disabled"
    assert crontab.read_text() == FOREIGN + "30 * * * * /usr/bin/true\n"
    assert _cron(home, "disable")["action"] == "already disabled"


def test_cron_through_the_crontab_command(home: Home) -> None:
    tools = home.root / "tools"
    fakes.install(tools, "crontab")
    env = {"LANEBOARD_CRONTAB_FILE": ""}
    out = home.lb("supervisor", "enable", "--scheduler", "cron", env=env)
    assert out.returncode == 0, out.stderr
    stored = tools / "crontab.txt"
    assert stored.read_text().startswith(CRON_BEGIN)
    assert fakes.mutating(tools, "crontab") == [["-"]]  # "no crontab for" was read as empty
    again = home.lb("supervisor", "enable", "--scheduler", "cron", env=env)
    assert "already enabled" in again.stdout and fakes.mutating(tools, "crontab") == [["-"]]
    stored.write_text(FOREIGN + stored.read_text())
    assert home.lb("supervisor", "disable", "--scheduler", "cron", env=env).returncode == 0
    assert stored.read_text() == FOREIGN


def test_cron_cannot_keep_a_server_alive(home: Home) -> None:
    out = home.lb("service", "enable", "server", "--scheduler", "cron")
    assert out.returncode == 1
    assert out.stderr.startswith("error SCHEDULER_UNAVAILABLE: cron cannot keep the server")
    assert not (home.root / "crontab").exists()


def test_a_failed_cron_pass_is_the_last_exit(home: Home) -> None:
    assert _cron(home, "enable")["action"] == "enabled"
    from laneboard.supervisor.logs import LogFile

    log = LogFile(str(home.state / "supervisor.log"))
    log.error("service", "exited", command="loop run --continue-once", code=2)
    log.info("tick", "tick ok")
    status = json.loads(home.lb("supervisor", "status", "--json").stdout)[0]
    assert status["last_exit"]["code"] == 2
    assert status["last_exit"]["command"] == "loop run --continue-once"


def test_launchd_bootstrap_reload_and_bootout(home: Home) -> None:
    tools = home.root / "tools"
    fakes.install(tools, "launchctl")
    plist = home.root / "home" / "Library" / "LaunchAgents" / "local.laneboard.server.plist"
    out = home.lb("service", "enable", "server", "--scheduler", "launchd", "--json")
    assert out.returncode == 0, out.stderr
    data = plistlib.loads(plist.read_bytes())
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert data["ProgramArguments"][-4:] == ["--host", "127.0.0.1", "--port", "8765"]
    domain = fakes.mutating(tools, "launchctl")[0][1]
    assert fakes.mutating(tools, "launchctl") == [["bootstrap", domain, str(plist)]]
    again = home.lb("service", "enable", "server", "--scheduler", "launchd", "--json")
    assert json.loads(again.stdout)["action"] == "already enabled"
    moved = home.lb(
        "service", "enable", "server", "--scheduler", "launchd", "--port", "9200", "--json"
    )
    assert json.loads(moved.stdout)["action"] == "reloaded"
    assert fakes.mutating(tools, "launchctl")[1:] == [
        ["bootout", f"{domain}/local.laneboard.server"],
        ["bootstrap", domain, str(plist)],
    ]
    status = json.loads(home.lb("service", "status", "server", "--json").stdout)
    assert [(s["scheduler"], s["loaded"], s["running"], s["pid"]) for s in status] == [
        ("launchd", True, True, 777)
    ]
    assert status[0]["last_exit"] == {"code": 0, "at": None}
    gone = home.lb("service", "disable", "server", "--json")
    assert [o["action"] for o in json.loads(gone.stdout)] == ["disabled"]
    assert not plist.exists() and fakes.state(tools, "launchd") == {}


def test_a_second_scheduler_for_the_supervisor_is_refused(home: Home) -> None:
    fakes.install(home.root / "tools")
    assert _cron(home, "enable")["action"] == "enabled"
    out = home.lb("supervisor", "enable", "--scheduler", "systemd")
    assert out.returncode == 1
    assert "already enabled with cron" in out.stderr
    assert "lb supervisor disable --scheduler cron" in out.stderr
    assert not (home.root / "config/systemd/user/laneboard-supervisor.service").exists()
    assert fakes.mutating(home.root / "tools", "systemctl") == []


def test_an_unusable_crontab_does_not_block_systemd(home: Home) -> None:
    tools = home.root / "tools"
    fakes.install(tools)
    (tools / "cron-denied").write_text("")
    env = {"LANEBOARD_CRONTAB_FILE": ""}
    cron = home.lb("supervisor", "enable", "--scheduler", "cron", env=env)
    assert cron.returncode == 1 and "not allowed to use this program" in cron.stderr
    assert cron.stderr.startswith("error SERVICE_FAILED: crontab -l failed")
    out = home.lb("supervisor", "enable", "--scheduler", "systemd", env=env)
    assert out.returncode == 0, out.stderr
    status = json.loads(
        home.lb("supervisor", "status", "--scheduler", "cron", "--json", env=env).stdout
    )
    assert status[0]["installed"] is False and "not allowed" in status[0]["detail"]
