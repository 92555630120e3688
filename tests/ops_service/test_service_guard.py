"""One supervisor per machine, secrets by reference, the PATH a unit carries, the launcher."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import drop_pg_schema, make_pg_schema, pg_schema_url
from tests.ops_service import fakes
from tests.ops_service.conftest import AGENT_CLIS, Home

from laneboard.domain.clock import FakeClock
from laneboard.domain.timecontract import TimeContract
from laneboard.service import spec as specmod
from laneboard.store import Store, open_store
from laneboard.supervisor import instances
from laneboard.supervisor.logs_read import read


def test_a_second_supervisor_on_the_machine_is_refused_with_its_pid(home: Home) -> None:
    fakes.install(home.root / "tools")
    env = {**home.env, "LANEBOARD_DEFAULT_AGENT": "scripted"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "start", "--for-seconds", "120"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert "supervisor running" in proc.stderr.readline()
        out = home.lb("supervisor", "enable")
        assert out.returncode == 1
        assert out.stderr.startswith(
            f"error SUPERVISOR_RUNNING: a supervisor is already running on opsbox (pid {proc.pid}"
        )
        assert not (home.root / "config/systemd/user/laneboard-supervisor.service").exists()
        for scheduler in ("cron", "systemd"):
            again = home.lb("supervisor", "enable", "--scheduler", scheduler)
            assert again.returncode == 1 and f"pid {proc.pid}" in again.stderr
        # the same process, as the unit's main process, is the unit's own supervisor
        (home.root / "tools" / "systemd.json").write_text(
            json.dumps(
                {
                    "laneboard-supervisor.service": {
                        "enabled": True, "active": True, "pid": proc.pid, "exit": None,
                    }
                }
            )
        )  # fmt: skip
        ours = home.lb("supervisor", "enable", "--json")
        assert ours.returncode == 0, ours.stderr
        status = json.loads(home.lb("supervisor", "status", "--json").stdout)[0]
        assert status["installed"] and status["board"]["pid"] == proc.pid
    finally:
        proc.terminate()
        proc.wait(60)
        if proc.stderr is not None:
            proc.stderr.close()


def test_a_database_password_goes_to_the_environment_file_never_the_unit(home: Home) -> None:
    fakes.install(home.root / "tools")
    schema = make_pg_schema()
    try:
        url = pg_schema_url(schema).replace("postgres@", "postgres:s3cret-pw@", 1)
        env = {"LANEBOARD_DATABASE_URL": url}
        preview = home.lb("supervisor", "enable", "--print", env=env)
        assert preview.returncode == 0, preview.stderr
        assert "s3cret-pw" not in preview.stdout and "LANEBOARD_DATABASE_URL=***" in preview.stdout
        out = home.lb("supervisor", "enable", env=env)
        assert out.returncode == 0, out.stderr
        unit = (home.root / "config/systemd/user/laneboard-supervisor.service").read_text()
        assert "s3cret-pw" not in unit and "LANEBOARD_DATABASE_URL" not in unit
        envfile = home.config / "service.env"
        assert stat.S_IMODE(envfile.stat().st_mode) == 0o600
        assert f"LANEBOARD_DATABASE_URL={url}" in envfile.read_text()
        rotated = url.replace("s3cret-pw", "n3w-pw")
        again = home.lb("supervisor", "enable", "--json", env={"LANEBOARD_DATABASE_URL": rotated})
        assert json.loads(again.stdout)["action"] == "reloaded"  # same unit, new secret
        assert fakes.mutating(home.root / "tools", "systemctl")[-1] == [
            "--user", "restart", "laneboard-supervisor.service",
        ]  # fmt: skip
        assert (home.root / "config/systemd/user/laneboard-supervisor.service").read_text() == unit
        assert f"LANEBOARD_DATABASE_URL={rotated}" in envfile.read_text()
        with envfile.open("a") as fh:
            fh.write("ANTHROPIC_API_KEY=sk-ant-kept\n")
        assert home.lb("supervisor", "enable", env=env).returncode == 0
        assert "ANTHROPIC_API_KEY=sk-ant-kept" in envfile.read_text()
        gone = home.lb("supervisor", "disable", "--json", env=env)
        assert "kept " in json.loads(gone.stdout)[-1]["warnings"][0]
        assert envfile.read_text().count("ANTHROPIC_API_KEY=sk-ant-kept") == 1
        envfile.write_text(envfile.read_text().replace("ANTHROPIC_API_KEY=sk-ant-kept\n", ""))
        assert home.lb("supervisor", "enable", env=env).returncode == 0
        assert home.lb("supervisor", "disable", env=env).returncode == 0
        assert not envfile.exists()  # it held only what enable wrote
    finally:
        drop_pg_schema(schema)


def test_the_units_path_starts_with_the_agent_clis(home: Home, tmp_path: Path) -> None:
    node_dir = tmp_path / "node-bin"
    node_dir.mkdir()
    (node_dir / "node").write_text("#!/bin/sh\n")
    (node_dir / "node").chmod(0o755)
    cli_dir = tmp_path / "agents"
    cli_dir.mkdir()
    (cli_dir / "pi").write_text("#!/usr/bin/env node\n")
    (cli_dir / "pi").chmod(0o755)
    home.user_file(
        f'[supervisor]\ndefault_agent = "pi"\n[supervisor.agent_kinds.pi]\nbinary = "{cli_dir / "pi"}"\n'
    )
    machine = specmod.Machine(
        python="/opt/py/bin/python3",
        env={},
        which=lambda name: str(node_dir / name) if name == "node" else None,
        find=lambda kind, cfg: str(cfg["binary"]) if cfg.get("binary") else None,
    )
    sp, secrets = specmod.build(
        "supervisor", "launchd", db="sqlite:///rel/board.db", machine=machine
    )
    assert sp.env["PATH"].split(":") == [
        str(cli_dir), str(node_dir), "/opt/py/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin",
    ]  # fmt: skip
    assert sp.env["LANEBOARD_DATABASE_URL"] == "sqlite:///" + os.path.abspath("rel/board.db")
    assert secrets == {} and sp.warnings == ()
    home.user_file('[supervisor]\ndefault_agent = "codex"\n')
    sp, _ = specmod.build("supervisor", "cron", machine=machine)
    assert sp.warnings and sp.warnings[0].startswith("codex is not on PATH")
    real, _ = specmod.build("supervisor", "systemd")
    assert real.env["PATH"].split(":")[0] == str(AGENT_CLIS)


LAUNCH = [sys.executable, "-m", "laneboard.service.run"]


def test_the_launcher_refuses_an_environment_file_others_can_read(home: Home) -> None:
    envfile = home.config / "service.env"
    home.config.mkdir(parents=True, exist_ok=True)
    envfile.write_text("LANEBOARD_MAX_CONCURRENCY=2\n")
    envfile.chmod(0o644)
    log = home.state / "supervisor.log"
    out = subprocess.run(
        [*LAUNCH, "--env-file", str(envfile), "--log", str(log), "--", "status"],
        env=home.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and f"chmod 600 {envfile}" in out.stderr
    assert "can be read by others" in read(str(home.state), ("supervisor",))[-1].fields["msg"]


def test_the_launcher_loads_the_file_logs_the_output_and_records_a_failure(home: Home) -> None:
    envfile = home.config / "service.env"
    home.config.mkdir(parents=True, exist_ok=True)
    envfile.write_text("# secrets\nLANEBOARD_MAX_CONCURRENCY='0'\n")
    envfile.chmod(0o600)
    log = home.state / "supervisor.log"
    run = [*LAUNCH, "--env-file", str(envfile), "--log", str(log), "--"]
    bad = subprocess.run(
        [*run, "status"], env=home.env, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and bad.stdout == bad.stderr == ""  # all of it went to the log
    lines = [x.fields for x in read(str(home.state), ("supervisor",))]
    assert lines[-2]["stream"] == "stderr"
    assert lines[-2]["msg"].startswith("error CONFIG_INVALID: LANEBOARD_MAX_CONCURRENCY='0'")
    assert (lines[-1]["msg"], lines[-1]["code"], lines[-1]["command"]) == ("exited", "2", "status")
    envfile.write_text("LANEBOARD_PROJECT_WORKSPACE=shared\n")
    ok = subprocess.run(
        [*run, "config", "show", "--json"],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and ok.stdout == ""
    printed = [
        x.fields["msg"]
        for x in read(str(home.state), ("supervisor",))
        if x.fields.get("stream") == "stdout"
    ]
    assert any("LANEBOARD_PROJECT_WORKSPACE" in m for m in printed)
    quiet = subprocess.run(
        [*LAUNCH, "--env-file", str(envfile), "--log", str(log), "--discard-stdout", "--", "config", "show"],
        env=home.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert quiet.returncode == 0
    assert len(read(str(home.state), ("supervisor",))) == len(lines) + len(printed)


def test_the_launcher_records_a_resident_commands_start_and_exit(home: Home) -> None:
    log = home.state / "supervisor.log"
    out = subprocess.run(
        [*LAUNCH, "--env-file", str(home.config / "none.env"), "--log", str(log), "--",
         "start", "--for-seconds", "0.5", "--agent", "scripted"],
        env=home.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    fields = [x.fields for x in read(str(home.state), ("supervisor",))]
    service = [(f["msg"], f.get("code")) for f in fields if f["component"] == "service"]
    assert service == [("starting", None), ("exited", "0")]
    assert any(f["component"] == "output" and "supervisor running" in f["msg"] for f in fields)
    assert any(f["component"] == "supervisor" and f["msg"] == "started" for f in fields)


def test_the_watchdog_sees_only_its_own_wedged_supervisor(store: Store, clock: FakeClock) -> None:
    from laneboard.service.run import wedged

    time = TimeContract()
    with store.write() as tx:
        iid = instances.register(tx, instances.machine_name(), time, {})
        instances.beat(tx, iid, tick_started_at=tx.now())
    assert wedged(store, os.getpid(), time) is None
    clock.advance(seconds=2 * time.turn_timeout + 1)
    with store.write() as tx:
        instances.beat(tx, iid, tick_started_at=clock.now_ms() - (2 * time.turn_timeout + 1) * 1000)
    assert "a tick has run for" in str(wedged(store, os.getpid(), time))
    assert wedged(store, os.getpid() + 1, time) is None


def test_a_wedged_supervisor_exits_so_its_scheduler_restarts_it(home: Home) -> None:
    home.user_file("[supervisor.time]\npool_heartbeat = 1\npool_stale = 5\n")
    db = f"sqlite:///{home.root / 'board.db'}"
    env = {**home.env, "LANEBOARD_DATABASE_URL": db, "LANEBOARD_NOW": "2026-03-01T10:00:00Z"}
    log = home.state / "supervisor.log"
    proc = subprocess.Popen(
        [*LAUNCH, "--env-file", str(home.config / "none.env"), "--log", str(log), "--",
         "start", "--agent", "scripted"],
        env=env,
    )  # fmt: skip
    store = open_store(db, FakeClock(1772359200000))
    try:
        row = None
        deadline = time.monotonic() + 60
        while row is None and time.monotonic() < deadline and proc.poll() is None:
            with store.read() as tx:
                row = instances.current(tx, "opsbox")
            time.sleep(0.05)
        assert row is not None and int(row["pid"]) == proc.pid
        stuck = 1772359200000 - (2 * TimeContract().turn_timeout + 60) * 1000
        for _ in range(30):  # the first tick may still be running and clear the mark
            with store.write() as tx:
                instances.beat(tx, str(row["id"]), tick_started_at=stuck)
            try:
                proc.wait(2)
                break
            except subprocess.TimeoutExpired:
                continue
        assert proc.wait(60) == 70
    finally:
        store.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    last = read(str(home.state), ("supervisor",))[-1].fields
    assert last["component"] == "service" and last["msg"].startswith("wedged (a tick has run")
