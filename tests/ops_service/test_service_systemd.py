"""``lb supervisor|service enable|disable|status`` on systemd (a fake systemctl)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.ops_service import fakes
from tests.ops_service.conftest import Home

UNIT = "config/systemd/user/laneboard-supervisor.service"


def files(root: Path) -> set[str]:
    skip = ("tools/", "state/")
    out = set()
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        if p.is_file() and not rel.startswith(skip):
            out.add(rel)
    return out


def _ready(home: Home) -> None:
    fakes.install(home.root / "tools")
    assert home.lb("init").returncode == 0  # the board exists before any enable


def test_enable_twice_then_disable_leaves_the_machine_as_it_was(home: Home) -> None:
    _ready(home)
    tools = home.root / "tools"
    before = files(home.root)
    out = home.lb("supervisor", "enable", "--json")
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert (done["action"], done["scheduler"]) == ("enabled", "systemd")
    assert files(home.root) - before == {UNIT}
    assert fakes.mutating(tools, "systemctl") == [
        ["--user", "daemon-reload"],
        ["--user", "enable", "laneboard-supervisor.service"],
        ["--user", "start", "laneboard-supervisor.service"],
    ]
    assert done["status"]["running"] is True and done["status"]["pid"] == 4242
    text = (home.root / UNIT).read_text()
    assert "Restart=on-failure" in text and f"LANEBOARD_STATE_DIR={home.state}" in text

    calls = len(fakes.mutating(tools, "systemctl"))
    again = home.lb("supervisor", "enable", "--json")
    assert json.loads(again.stdout)["action"] == "already enabled"
    assert len(fakes.mutating(tools, "systemctl")) == calls  # nothing changed

    status = json.loads(home.lb("supervisor", "status", "--json").stdout)
    assert [
        (s["installed"], s["current"], s["loaded"], s["running"], s["pid"]) for s in status
    ] == [(True, True, True, True, 4242)]
    assert status[0]["board"]["state"] == "absent"

    gone = home.lb("supervisor", "disable", "--json")
    assert [o["action"] for o in json.loads(gone.stdout)] == ["disabled"]
    assert fakes.mutating(tools, "systemctl")[calls:] == [
        ["--user", "disable", "--now", "laneboard-supervisor.service"],
        ["--user", "daemon-reload"],
    ]
    assert files(home.root) == before
    twice = home.lb("supervisor", "disable", "--json")
    assert [o["action"] for o in json.loads(twice.stdout)] == ["already disabled"]
    assert len(fakes.mutating(tools, "systemctl")) == calls + 2


def test_a_changed_definition_is_rewritten_and_restarted(home: Home) -> None:
    _ready(home)
    tools = home.root / "tools"
    assert home.lb("supervisor", "enable").returncode == 0
    first = (home.root / UNIT).read_text()
    home.user_file(f'[supervisor]\nstate_dir = "{home.root / "elsewhere"}"\n')
    out = home.lb("supervisor", "enable", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["action"] == "reloaded"
    assert fakes.mutating(tools, "systemctl")[-2:] == [
        ["--user", "daemon-reload"],
        ["--user", "restart", "laneboard-supervisor.service"],
    ]
    second = (home.root / UNIT).read_text()
    assert second != first and f"LANEBOARD_STATE_DIR={home.root / 'elsewhere'}" in second
    status = json.loads(home.lb("supervisor", "status", "--json").stdout)[0]
    assert status["current"] is True and status["pid"] == 4243


def test_status_says_when_the_file_no_longer_matches(home: Home) -> None:
    _ready(home)
    assert home.lb("supervisor", "enable").returncode == 0
    home.user_file("[supervisor.time]\ntick_interval = 300\n[supervisor]\nlog_keep = 9\n")
    home.user_file('[supervisor]\nstate_dir = "/srv/lb-state"\n')
    out = home.lb("supervisor", "status")
    assert "installed yes (changed: enable again)" in out.stdout


def test_linger_off_is_a_warning_with_the_command_to_fix_it(home: Home) -> None:
    _ready(home)
    out = home.lb("supervisor", "enable")
    user = home.lb("supervisor", "enable", "--json")
    warning = json.loads(user.stdout)["warnings"][0]
    assert "lingering is off" in warning and "loginctl enable-linger" in warning
    assert "warning: systemd lingering is off" in out.stdout
    (home.root / "tools" / "linger.json").write_text('"yes"')
    assert json.loads(home.lb("supervisor", "enable", "--json").stdout)["warnings"] == []


def test_the_server_unit_and_its_last_exit(home: Home) -> None:
    _ready(home)
    tools = home.root / "tools"
    out = home.lb("service", "enable", "server", "--port", "9100", "--json")
    assert out.returncode == 0, out.stderr
    text = (home.root / "config/systemd/user/laneboard-server.service").read_text()
    assert "-- serve --host 127.0.0.1 --port 9100" in text and "Restart=on-failure" in text
    assert json.loads(out.stdout)["warnings"] == []  # linger matters for the supervisor
    state = fakes.state(tools, "systemd")
    state["laneboard-server.service"]["exit"] = 3
    (tools / "systemd.json").write_text(json.dumps(state))
    rows = json.loads(home.lb("service", "status", "--json").stdout)
    server = next(r for r in rows if r["unit"] == "server")
    assert server["last_exit"]["code"] == 3 and server["last_exit"]["at"]
    supervisor = next(r for r in rows if r["unit"] == "supervisor")
    assert supervisor["installed"] is False
    assert home.lb("service", "disable", "server").returncode == 0
    assert not (home.root / "config/systemd/user/laneboard-server.service").exists()


def test_no_user_bus_refuses_systemd_and_auto_falls_back_to_cron(home: Home) -> None:
    _ready(home)
    (home.root / "tools" / "no-bus").write_text("")
    before = files(home.root)
    out = home.lb("supervisor", "enable", "--scheduler", "systemd")
    assert out.returncode == 1
    assert out.stderr.startswith("error SCHEDULER_UNAVAILABLE: systemd: systemctl --user does not")
    assert "--scheduler cron" in out.stderr and files(home.root) == before
    auto = home.lb("supervisor", "enable", "--json")
    assert auto.returncode == 0, auto.stderr
    assert json.loads(auto.stdout)["scheduler"] == "cron"
    assert "--ping-once" in (home.root / "crontab").read_text()


def test_print_writes_nothing_and_runs_nothing(home: Home) -> None:
    fakes.install(home.root / "tools")
    before = files(home.root)
    for args in (
        ("supervisor", "enable", "--print"),
        ("supervisor", "enable", "--print", "--scheduler", "cron"),
        ("service", "enable", "server", "--print", "--scheduler", "launchd"),
    ):
        out = home.lb(*args)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("# would write ")
    assert files(home.root) == before  # not even the board
    assert all(
        fakes.mutating(home.root / "tools", name) == []
        for name in ("systemctl", "launchctl", "crontab")
    )
    text = home.lb("supervisor", "enable", "--print").stdout
    assert "# would run: systemctl --user enable laneboard-supervisor.service" in text
