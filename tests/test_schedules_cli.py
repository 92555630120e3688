"""``lb schedule`` and ``lb scheduler run`` through the real ``lb`` in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.schedules import LOCK_NAME
from laneboard.domain.clock import FakeClock
from laneboard.store import open_store

_BIN = Path(sys.executable).parent / "lb"
LB = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "laneboard.cli.main"]
NOW = "2026-01-01T10:00:05Z"
TOML_JOB = 'project = "WEB"\ntitle = "Rotate logs"\nlabels = ["ops"]\nacceptance = ["rotated"]\n'


@dataclass
class Run:
    code: int
    out: str
    err: str


class Cli:
    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp = tmp
        self.url = url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        self.env.update(LANEBOARD_DATABASE_URL=url, LANEBOARD_NOW=NOW, LANEBOARD_USER="alice")

    def run(self, *args: str, **env: str) -> Run:
        p = subprocess.run(
            [*LB, *args], capture_output=True, text=True, env={**self.env, **env}, timeout=60
        )
        return Run(p.returncode, p.stdout, p.stderr)

    def ok(self, *args: str, **env: str) -> Any:
        r = self.run(*args, "--json", **env)
        assert (r.code, r.err) == (0, ""), r.err
        return json.loads(r.out)

    def file(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)

    def state(self) -> tuple[int, int, int]:
        """(schedules, cards, events) as stored."""
        store = open_store(self.url, FakeClock())
        try:
            with store.read() as tx:
                return (
                    int(tx.scalar("SELECT count(*) FROM schedules")),
                    int(tx.scalar("SELECT count(*) FROM cards")),
                    int(tx.scalar("SELECT count(*) FROM events")),
                )
        finally:
            store.close()


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    c = Cli(tmp_path, f"sqlite:///{tmp_path / 'board.db'}")
    c.ok("init", "--project", "WEB", "--path", str(tmp_path))
    return c


def test_add_list_run_once(cli: Cli) -> None:
    job = cli.file("job.toml", TOML_JOB)
    added = cli.ok("schedule", "add", job, "--cron", "*/5 * * * *", "--name", "rotate",
                   "--timezone", "UTC")  # fmt: skip
    assert (added["name"], added["health"], added["next_due"]) == (
        "rotate", "never-run", "2026-01-01T10:00:00.000Z",
    )  # fmt: skip
    listed = cli.ok("schedule", "list")
    assert [(v["name"], v["expression"], v["explanation"], v["timezone"], v["enabled"])
            for v in listed] == [
        ("rotate", "*/5 * * * *", "Every fifth minute of every hour", "UTC", True)
    ]  # fmt: skip
    text = cli.run("schedule", "list")
    assert text.code == 0 and "rotate" in text.out and "never-run" in text.out
    r = cli.run("scheduler", "run", "--once")
    assert (r.code, r.err) == (0, "")
    assert "dispatched rotate -> WEB-1" in r.out
    again = cli.ok("scheduler", "run", "--once", LANEBOARD_NOW="2026-01-01T10:00:50Z")
    assert again["state"] == "ran" and again["fired"] == []
    card = cli.ok("card", "get", "WEB-1")
    assert card["title"] == "Rotate logs" and card["meta"]["schedule"] == "rotate"
    shown = cli.ok("schedule", "show", "rotate", LANEBOARD_NOW="2026-01-01T10:01:00Z")
    assert (shown["last_outcome"], shown["last_card"], shown["health"], shown["next_due"]) == (
        "dispatched", "WEB-1", "ok", "2026-01-01T10:05:00.000Z",
    )  # fmt: skip
    assert cli.ok("schedule", "disable", "rotate")["enabled"] is False
    assert cli.ok("schedule", "enable", "rotate")["enabled"] is True
    assert cli.ok("schedule", "remove", "rotate")["name"] == "rotate"
    assert cli.ok("schedule", "list") == []
    assert cli.state()[1] == 1  # cards a schedule created stay


def test_poll_mode_runs_passes(cli: Cli) -> None:
    job = cli.file("job.json", json.dumps({"project": "WEB", "title": "tick"}))
    cli.ok("schedule", "add", job, "--cron", "* * * * *", "--name", "tick")
    r = cli.run("scheduler", "run", "--poll-ms", "1000", "--max-passes", "2")
    assert r.code == 0 and r.out.count("schedule pass at") == 2
    assert r.out.count("dispatched tick -> WEB-1") == 1
    default = cli.run("scheduler", "run", "--max-passes", "1")  # polls every 30000 ms
    assert default.code == 0 and default.out.count("schedule pass at") == 1, default.err
    short = cli.run("scheduler", "run", "--poll-ms", "10")
    assert short.code == 2 and short.err.startswith("error BAD_INPUT: --poll-ms 10 is too short")


def test_held_lock_exits_3_and_creates_nothing(cli: Cli) -> None:
    job = cli.file("job.toml", TOML_JOB)
    cli.ok("schedule", "add", job, "--cron", "* * * * *", "--name", "tick")
    store = open_store(cli.url, FakeClock(1_767_261_600_000))  # 2026-01-01T10:00Z
    try:
        with store.write() as tx:
            assert tx.acquire_lock(LOCK_NAME, "other-machine:1", 120_000)
        r = cli.run("scheduler", "run", "--once")
        assert r.code == 3
        assert "the tick lock is held by other-machine:1" in r.out
        assert cli.state()[1] == 0
        r = cli.run("scheduler", "run", "--once", LANEBOARD_NOW="2026-01-01T10:02:30Z")
        assert r.code == 0 and "dispatched tick" in r.out  # the stale lease was taken over
    finally:
        store.close()


def test_two_processes_at_once_create_one_card(tmp_path: Path, store_url: str) -> None:
    cli = Cli(tmp_path, store_url)
    cli.ok("init", "--project", "WEB", "--path", str(tmp_path))
    job = cli.file("job.toml", TOML_JOB)
    cli.ok("schedule", "add", job, "--cron", "* * * * *", "--name", "tick")
    procs = [
        subprocess.Popen(
            [*LB, "scheduler", "run", "--once", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli.env,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = [p.returncode for p in procs]
    assert set(codes) <= {0, 3} and 0 in codes, outs
    for code, (out, _err) in zip(codes, outs, strict=True):
        assert json.loads(out)["state"] == ("locked" if code == 3 else "ran")
    fired = sum(len(json.loads(out)["fired"]) for out, _ in outs)
    assert fired == 1 and cli.state()[1] == 1


BAD_ADDS = [
    ("wrong field count", "job.toml", TOML_JOB, ["--cron", "*/5 * * *"], 2,
     "error BAD_INPUT: cron expression '*/5 * * *' has 4 fields, not 5"),
    ("too many fields", "job.toml", TOML_JOB, ["--cron", "0 */5 * * * *"], 2,
     "error BAD_INPUT: cron expression '0 */5 * * * *' has 6 fields, not 5"),
    ("minute out of range", "job.toml", TOML_JOB, ["--cron", "61 * * * *"], 2,
     "error BAD_INPUT: cron minute field '61': 61 is out of range 0-59"),
    ("weekday out of range", "job.toml", TOML_JOB, ["--cron", "0 0 * * 9"], 2,
     "error BAD_INPUT: cron day-of-week field '9': 9 is out of range 0-7"),
    ("impossible date", "job.toml", TOML_JOB, ["--cron", "0 0 30 2 *"], 2,
     "error BAD_INPUT: cron day-of-month field '30': day 30 never occurs in February"),
    ("bad TOML", "job.toml", 'project = "WEB\n', ["--cron", "* * * * *"], 2,
     "error BAD_INPUT: job definition {path} is not valid TOML"),
    ("bad JSON", "job.json", '{"project": "WEB",}', ["--cron", "* * * * *"], 2,
     "error BAD_INPUT: job definition {path} is not valid JSON"),
    ("not a table", "job.json", '["WEB"]', ["--cron", "* * * * *"], 2,
     "error BAD_INPUT: job definition {path} is not a table of fields"),
    ("unknown key", "job.toml", TOML_JOB + 'colour = "red"\n', ["--cron", "* * * * *"], 2,
     "error BAD_INPUT: job definition has unknown field colour"),
    ("missing title", "job.toml", 'project = "WEB"\n', ["--cron", "* * * * *"], 2,
     "error BAD_INPUT: job definition has no title"),
    ("unknown project", "job.json", '{"project": "NOPE", "title": "t"}', ["--cron", "* * * * *"],
     1, "error NOT_FOUND: project NOPE does not exist"),
    ("missing file", None, "", ["--cron", "* * * * *"], 2,
     "error BAD_INPUT: job definition {path} does not exist"),
    ("unknown zone", "job.toml", TOML_JOB, ["--cron", "* * * * *", "--timezone", "Mars/Base"], 2,
     "error BAD_INPUT: unknown time zone 'Mars/Base'"),
    ("no cron", "job.toml", TOML_JOB, [], 2, "error USAGE: the following arguments are required"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("label", "fname", "text", "extra", "code", "line"), BAD_ADDS, ids=[b[0] for b in BAD_ADDS]
)
def test_bad_add_is_one_line_and_stores_nothing(  # type: ignore[no-untyped-def]
    cli: Cli, label, fname, text, extra, code, line
) -> None:
    path = cli.file(fname, text) if fname else str(cli.tmp / "absent.toml")
    before = cli.state()
    r = cli.run("schedule", "add", path, "--name", "x", *extra)
    assert r.code == code, r.err
    assert r.err.startswith(line.format(path=path)), r.err
    assert r.err.count("\n") == 1 and r.out == ""
    assert cli.state() == before


@pytest.mark.parametrize("action", ["remove", "enable", "disable", "show"])
def test_unknown_names_are_not_found(cli: Cli, action: str) -> None:
    before = cli.state()
    r = cli.run("schedule", action, "ghost")
    assert r.code == 1
    assert r.err == (
        "error NOT_FOUND: schedule ghost does not exist — list schedules with: lb schedule list\n"
    )
    assert cli.state() == before


def test_duplicate_name_is_a_conflict(cli: Cli) -> None:
    job = cli.file("job.toml", TOML_JOB)
    cli.ok("schedule", "add", job, "--cron", "* * * * *", "--name", "tick")
    before = cli.state()
    r = cli.run("schedule", "add", job, "--cron", "0 * * * *", "--name", "tick")
    assert r.code == 1 and r.err.startswith("error CONFLICT: schedule tick already exists")
    assert cli.state() == before
