"""``lb backup`` of a live SQLite board and ``lb migrate`` of a demo board to PostgreSQL."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import drop_pg_schema, make_pg_schema, pg_schema_url
from tests.ops_service.conftest import Home

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.domain.timecontract import TimeContract
from laneboard.store import open_store
from laneboard.store.q_copy import dump, shapes
from laneboard.supervisor import instances

ME = human("ann")
PINNED = "2026-03-01T10:00:00Z"


def _dump(url: str) -> dict[str, list[dict[str, object]]]:
    store = open_store(url, migrate=False)
    try:
        return dump(store)
    finally:
        store.close()


def _populate(home: Home, db: str) -> None:
    def ok(*args: str) -> None:
        out = home.lb("--db", db, *args)
        assert out.returncode == 0, out.stderr

    ok("project", "add", "LV")
    ok("card", "add", "LV", "write the docs", "--status", "backlog", "--accept", "docs exist")
    ok("card", "add", "LV", "fix the bug", "--status", "backlog", "--check", "true")
    ok("card", "comment", "LV-1", "start with the README")
    job = home.root / "job.toml"
    job.write_text('project = "LV"\ntitle = "weekly report"\n')
    ok("schedule", "add", str(job), "--cron", "0 9 * * 1", "--name", "weekly")


def test_a_backup_of_a_live_board_restores_to_an_identical_board(home: Home) -> None:
    db = f"sqlite:///{home.root / 'data' / 'board.db'}"
    _populate(home, db)
    env = {**home.env, "LANEBOARD_DATABASE_URL": db, "LANEBOARD_NOW": PINNED}
    sup = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "laneboard.cli.main",
            "start",
            "--agent",
            "scripted",
            "--for-seconds",
            "120",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    backup = home.root / "backups" / "board.db"
    try:
        assert sup.stderr is not None
        assert "supervisor running" in sup.stderr.readline()
        out = home.lb("backup", str(backup), "--json", env=env)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["rows"]["cards"] == 2 and report["rows"]["supervisors"] == 1
        live = _dump(db)
        assert live["supervisors"][0]["state"] == "running"  # taken while it ran
        assert _dump(f"sqlite:///{backup}") == live
    finally:
        sup.terminate()
        sup.wait(60)
        if sup.stderr is not None:
            sup.stderr.close()
    restored = home.root / "restored" / "laneboard"
    restored.mkdir(parents=True)
    shutil.copy(backup, restored / "board.db")  # the restore: the file in the board's place
    other = {"XDG_DATA_HOME": str(home.root / "restored"), "LANEBOARD_NOW": PINNED}
    cards = home.lb("card", "list", "--json", env=other)
    assert cards.returncode == 0, cards.stderr
    assert cards.stdout == home.lb("--db", db, "card", "list", "--json").stdout
    assert _dump(f"sqlite:///{restored / 'board.db'}") == live


WRITER = textwrap.dedent(
    """
    import sys
    from laneboard.board.service import Board
    from laneboard.domain.model import human
    from laneboard.store import open_store
    board = Board(open_store(sys.argv[1]))
    for i in range(150):
        board.create_card(human("w"), "LV", f"card {i}", status="backlog")
    """
)


def test_a_backup_during_writes_is_one_consistent_snapshot(home: Home) -> None:
    db = f"sqlite:///{home.root / 'board.db'}"
    Board(open_store(db)).add_project(ME, "LV")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, db])
    copies = []
    try:
        for n in range(3):
            path = home.root / f"copy{n}.db"
            out = home.lb("--db", db, "backup", str(path))
            assert out.returncode == 0, out.stderr
            copies.append(path)
    finally:
        assert writer.wait(120) == 0
    live = _dump(db)
    for path in copies:
        snap = _dump(f"sqlite:///{path}")
        assert snap["events"] == live["events"][: len(snap["events"])]
        assert snap["cards"] == live["cards"][: len(snap["cards"])]
        created = [e for e in snap["events"] if e["type"] == "card.created"]
        assert len(created) == len(snap["cards"])  # each card with its own event, or neither


def test_backup_refusals(home: Home) -> None:
    db = home.root / "board.db"
    Board(open_store(f"sqlite:///{db}")).add_project(ME, "LV")
    target = home.root / "b.db"
    assert home.lb("--db", str(db), "backup", str(target)).returncode == 0
    again = home.lb("--db", str(db), "backup", str(target))
    assert again.returncode == 1 and "pass --force" in again.stderr
    assert home.lb("--db", str(db), "backup", str(target), "--force").returncode == 0
    itself = home.lb("--db", str(db), "backup", str(db))
    assert itself.returncode == 2 and "overwrite the board itself" in itself.stderr
    pg = home.lb(
        "--db", "postgresql://postgres@127.0.0.1:5432/test", "backup", str(home.root / "x.db")
    )
    assert pg.returncode == 2 and "pg_dump" in pg.stderr
    assert not (home.root / "x.db").exists()


@pytest.fixture
def pg_url() -> object:
    schema = make_pg_schema()
    try:
        yield pg_schema_url(schema)
    finally:
        drop_pg_schema(schema)


def _demo_board(home: Home) -> str:
    out = home.lb(  # a demo's own time limit is for people: a busy machine gets more
        "demo", "--keep", "--json", "--timeout", "240", env={"TMPDIR": str(home.root)}, timeout=280
    )
    assert out.returncode == 0, out.stderr
    board = Path(json.loads(out.stdout)["project"]).parent / "board.db"
    url = f"sqlite:///{board}"
    job = home.root / "job.toml"
    job.write_text('project = "DEMO"\ntitle = "nightly check"\n')
    sched = home.lb(
        "--db", url, "schedule", "add", str(job), "--cron", "0 2 * * *", "--name", "nightly"
    )
    assert sched.returncode == 0, sched.stderr
    b = Board(open_store(url))
    task = b.create_card(ME, "DEMO", "a task made before its epic")
    epic = b.create_card(ME, "DEMO", "a later epic", kind="epic")
    b.edit(ME, task.ref, parent=epic.ref)  # a parent with a larger id than its child
    b.store.close()
    return url


def test_migrate_a_demo_board_to_postgresql_keeps_every_table(home: Home, pg_url: str) -> None:
    src = _demo_board(home)
    before = _dump(src)
    for table in ("cards", "events", "sessions", "schedules", "turns", "reports", "queue"):
        assert before[table], table
    out = home.lb("--db", src, "migrate", "--to", pg_url, "--json")
    assert out.returncode == 0, out.stderr
    copied = json.loads(out.stdout)["rows"]
    assert copied == {s.table.name: len(before[s.table.name]) for s in shapes()}
    assert _dump(pg_url) == before  # every table, every row, every id

    card = home.lb("--db", pg_url, "card", "add", "DEMO", "made on PostgreSQL", "--json")
    assert card.returncode == 0, card.stderr
    after = _dump(pg_url)
    assert json.loads(card.stdout)["id"] == max(int(c["id"]) for c in before["cards"]) + 1
    assert int(after["events"][-1]["id"]) == int(before["events"][-1]["id"]) + 1

    twice = home.lb("--db", src, "migrate", "--to", pg_url)
    assert twice.returncode == 1 and "already holds a board" in twice.stderr
    back = f"sqlite:///{home.root / 'back.db'}"
    assert home.lb("--db", pg_url, "migrate", "--to", back).returncode == 0
    assert any(int(e["xid"]) for e in after["events"])  # written on PostgreSQL
    # transaction ids mean nothing on another database: copied events are history (xid 0)
    after["events"] = [{**e, "xid": 0} for e in after["events"]]
    assert _dump(back) == after


def test_migrate_refuses_while_a_supervisor_runs(home: Home, pg_url: str) -> None:
    src = f"sqlite:///{home.root / 'live.db'}"
    store = open_store(src)
    with store.write() as tx:
        instances.register(tx, "elsewhere", TimeContract(), {})
    store.close()
    out = home.lb("--db", src, "migrate", "--to", pg_url)
    assert out.returncode == 1
    assert out.stderr.startswith("error SUPERVISOR_RUNNING: a supervisor is running on this board")
    same = home.lb("--db", src, "migrate", "--to", src)
    assert same.returncode == 2 and "names the board itself" in same.stderr
