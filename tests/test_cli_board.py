"""The real ``lb`` in subprocesses: exact JSON documents, exit codes, one-line errors —
each test in local mode and in remote mode (``lb serve`` over HTTP, a supervisor's board
socket), with identical expectations.

The clock is pinned with ``LANEBOARD_NOW`` so every timestamp is known in advance.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli_kit import LB, MODES, NOW, Cli

LATER = "2026-01-01T00:15:00.000Z"
TOKENS = 3  # the people's tokens the kit mints before anything else (events 1-3)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def board_cli(tmp_path: Path, mode: str) -> Cli:
    c = Cli(tmp_path, mode)
    r = c.local("init", "--project", "WEB", "--path", str(tmp_path), "--json")
    assert r.code == 0, r.err
    return c


@pytest.fixture
def cli(tmp_path: Path, mode: str) -> Iterator[Cli]:
    c = board_cli(tmp_path, mode)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def card_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": 1,
        "ref": "WEB-1",
        "project_id": 1,
        "title": "t",
        "description": "",
        "kind": "task",
        "parent_id": None,
        "status": "todo",
        "assignee": None,
        "priority": 2,
        "labels": [],
        "acceptance": [],
        "acceptance_mode": "auto",
        "delivery_round": 1,
        "checks": [],
        "allowed_paths": [],
        "claim": {
            "holder": None,
            "actor_kind": None,
            "session_id": None,
            "claimed_at": None,
            "heartbeat_at": None,
            "epoch": 0,
        },
        "meta": {},
        "idempotency_key": None,
        "run_id": None,
        "depends_on": [],
        "status_since": NOW,
        "created_at": NOW,
        "updated_at": NOW,
        "version": 1,
    }
    doc.update(over)
    return doc


def claim_doc(holder: str, kind: str, epoch: int, at: str = NOW, session: Any = None) -> Any:
    return {
        "holder": holder,
        "actor_kind": kind,
        "session_id": session,
        "claimed_at": at,
        "heartbeat_at": at,
        "epoch": epoch,
    }


# -- success paths ----------------------------------------------------------------------
def test_init_and_projects(tmp_path: Path, mode: str) -> None:
    c = Cli(tmp_path, mode)
    r = c.local("init", "--project", "WEB", "--path", str(tmp_path), "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    project = {
        "id": 1,
        "key": "WEB",
        "name": "WEB",
        "path": str(tmp_path),
        "base_ref": None,
        "remote": None,
        "created_at": NOW,
    }
    assert got == {"database": c.url, "schema_version": got["schema_version"], "project": project}
    assert isinstance(got["schema_version"], int) and got["schema_version"] >= 1
    again = json.loads(c.local("init", "--json").out)  # re-running init is harmless
    assert again == {"database": c.url, "schema_version": got["schema_version"]}
    c.start()
    try:
        api = c.ok("project", "add", "API", "--name", "Api", "--base-ref", "develop")
        assert api == {
            "id": 2,
            "key": "API",
            "name": "Api",
            "path": None,
            "base_ref": "develop",
            "remote": None,
            "created_at": NOW,
        }
        assert c.ok("project", "list") == [project, api]
        assert c.ok("project", "get", "API") == api
        text = c.run("project", "list")
        assert text.code == 0
        assert text.out.splitlines()[0].split() == ["KEY", "NAME", "PATH", "BASE", "REMOTE"]
        c.refuse("CONFLICT", 1, "project", "add", "WEB")
        if mode != "local":  # a local command refuses to run through LANEBOARD_URL
            line = c.refuse("CONFIG_INVALID", 2, "init")
            assert line.startswith("error CONFIG_INVALID: lb init works on a local board")
    finally:
        c.stop()


def test_card_lifecycle_documents(cli: Cli) -> None:
    add = cli.ok(
        "card",
        "add",
        "WEB",
        "Fix login",
        "-d",
        "the form 500s",
        "-p",
        "1",
        "--label",
        "auth",
        "--accept",
        "login works",
        "--acceptance-mode",
        "off",
        "--check",
        "pytest -q",
        "--allow-path",
        "src/auth",
        "--meta",
        '{"origin": "cli"}',
        "--key",
        "k1",
    )
    expected = card_doc(
        title="Fix login",
        description="the form 500s",
        priority=1,
        labels=["auth"],
        acceptance=[{"id": "A1", "text": "login works"}],
        acceptance_mode="off",
        checks=["pytest -q"],
        allowed_paths=["src/auth"],
        meta={"origin": "cli"},
        idempotency_key="k1",
    )
    assert add == expected
    assert cli.ok("card", "add", "WEB", "other title", "--key", "k1") == expected
    assert cli.ok("card", "list") == [expected]

    claimed = cli.ok("card", "claim", "WEB-1", "--session", "s1", LANEBOARD_USER="bob")
    expected.update(
        status="in_progress",
        assignee="bob",
        claim=claim_doc("bob", "human", 1, session="s1"),
        version=2,
    )
    assert claimed == expected
    beat = cli.ok("card", "heartbeat", "WEB-1", LANEBOARD_NOW=LATER, LANEBOARD_USER="bob")
    expected.update(version=3, updated_at=LATER)
    expected["claim"] = {**expected["claim"], "heartbeat_at": LATER}
    assert beat == expected

    comment = cli.ok("card", "comment", "WEB-1", "looking at it", "--kind", "finding")
    assert comment == {
        "id": 1,
        "card_id": 1,
        "kind": "finding",
        "body": "looking at it",
        "author": "alice",
        "author_kind": "human",
        "created_at": NOW,
    }
    report = cli.ok(
        "card",
        "report",
        "WEB-1",
        "--body",
        "-",
        "--commit",
        "abc",
        "--evidence",
        "0:pytest -q",
        "--evidence",
        "1:ruff check",
        stdin="all green\n",
        LANEBOARD_USER="bob",
    )
    assert report == {
        "id": 1,
        "card_id": 1,
        "round": 1,
        "body": "all green\n",
        "commit": "abc",
        "evidence": [
            {"command": "pytest -q", "exit_code": 0, "digest": "", "summary": "", "log_path": None},
            {
                "command": "ruff check",
                "exit_code": 1,
                "digest": "",
                "summary": "",
                "log_path": None,
            },
        ],
        "author": "bob",
        "author_kind": "human",
        "created_at": NOW,
    }
    moved = cli.ok("card", "move", "WEB-1", "in_review", LANEBOARD_USER="bob")
    expected.update(status="in_review", version=4, updated_at=NOW, status_since=NOW)
    expected["claim"] = {**expected["claim"], "heartbeat_at": None}
    assert moved == expected
    done = cli.ok("card", "move", "WEB-1", "done", "--note", "ship it")
    expected.update(
        status="done", version=5, idempotency_key=None, meta={"origin": "cli", "released_key": "k1"}
    )
    assert done == expected

    detail = cli.ok("card", "get", "web-1")
    assert detail == {
        **expected,
        "comments": [
            comment,
            {**comment, "id": 2, "kind": "note", "body": "ship it"},
        ],
        "reports": [report],
        "dependencies": [],
        "turns": [],
    }
    text = cli.run("card", "get", "WEB-1")
    assert text.code == 0 and text.out.startswith("WEB-1  Fix login\n  status done")

    events = cli.ok("events", "tail", "-n", "3")
    assert [e["type"] for e in events] == ["report.added", "card.moved", "card.moved"]
    assert events[-1] == {
        "id": TOKENS + 8,
        "cursor": str(TOKENS + 8),  # SQLite: the id is the position in the log
        "at": NOW,
        "type": "card.moved",
        "card_id": 1,
        "project_id": 1,
        "run_id": None,
        "actor": "alice",
        "actor_kind": "human",
        "payload": {"ref": "WEB-1", "from": "in_review", "to": "done", "reason": None, "round": 1},
    }
    after = cli.ok("events", "tail", "--after", str(TOKENS + 6), "--card", "WEB-1")
    assert [e["id"] for e in after] == [TOKENS + 7, TOKENS + 8]
    text = cli.run("events", "tail", "-n", "1")
    assert text.code == 0 and text.out.split()[:3] == [str(TOKENS + 8), NOW, "card.moved"]


def test_edit_list_link_release_candidates(cli: Cli) -> None:
    cli.ok("card", "add", "WEB", "epic", "--kind", "epic")
    cli.ok("card", "add", "WEB", "a", "--assignee", "worker")
    cli.ok("card", "add", "WEB", "b", "--status", "backlog")
    edited = cli.ok(
        "card", "edit", "WEB-2", "--title", "A", "--parent", "WEB-1", "--meta", '{"x": 1}'
    )
    assert edited == card_doc(
        id=2, ref="WEB-2", title="A", assignee="worker", parent_id=1, meta={"x": 1}, version=2
    )
    assert [c["ref"] for c in cli.ok("card", "list", "--status", "backlog")] == ["WEB-3"]
    assert [c["ref"] for c in cli.ok("card", "list", "--assignee", "worker")] == ["WEB-2"]
    assert [c["ref"] for c in cli.ok("card", "list", "--unassigned")] == ["WEB-1", "WEB-3"]
    assert [c["ref"] for c in cli.ok("card", "list", "--parent", "WEB-1")] == ["WEB-2"]
    linked = cli.ok("card", "link", "WEB-3", "WEB-2")
    assert linked["depends_on"] == [2]
    assert cli.ok("card", "link", "WEB-3", "WEB-2", "--remove")["depends_on"] == []

    cands = cli.ok("card", "candidates", "--assignee", "worker", "--include-unassigned")
    assert cands == [
        {
            "ref": "WEB-1",
            "id": 1,
            "title": "epic",
            "status": "todo",
            "assignee": None,
            "priority": 2,
            "weight": 0.0,
            "fanout": 0,
            "sla_pressure": 0.0,
            "sla_row": None,
            "stale": False,
        },
        {
            "ref": "WEB-2",
            "id": 2,
            "title": "A",
            "status": "todo",
            "assignee": "worker",
            "priority": 2,
            "weight": 0.0,
            "fanout": 0,
            "sla_pressure": 0.0,
            "sla_row": None,
            "stale": False,
        },
    ]
    assert cli.ok("card", "candidates", "--assignee", "nobody") == []
    cli.ok("card", "claim", "WEB-2", "--holder", "worker")
    stale = cli.ok("card", "candidates", "--assignee", "worker", "--stale", LANEBOARD_NOW=LATER)
    assert stale == []  # 15 minutes is not stale yet
    later = "2026-01-01T00:30:00Z"
    stale = cli.ok("card", "candidates", "--assignee", "worker", "--stale", LANEBOARD_NOW=later)
    got = [(c["ref"], c["stale"], c["weight"], c["sla_row"], c["sla_pressure"]) for c in stale]
    # 30 in status + 15 of age, and 30 of pressure: the heartbeat is at its 30-minute limit
    assert got == [("WEB-2", True, 75.0, "heartbeat_stale", 30.0)]
    released = cli.ok("card", "release", "WEB-2", "--note", "back to the pool")
    assert (released["status"], released["claim"]) == (
        "todo",
        {
            "holder": None,
            "actor_kind": None,
            "session_id": None,
            "claimed_at": NOW,
            "heartbeat_at": None,
            "epoch": 1,
        },
    )


def test_agent_token_writes_are_attributed_and_fenced(cli: Cli) -> None:
    cli.ok("card", "add", "WEB", "mine")
    cli.ok("card", "add", "WEB", "not mine")
    tok = cli.token("w1", card_id=1, epoch=1)
    got = cli.ok("card", "claim", "WEB-1", LANEBOARD_TOKEN=tok)
    assert got["claim"] == claim_doc("w1", "agent", 1)
    c = cli.ok("card", "comment", "WEB-1", "on it", LANEBOARD_TOKEN=tok)
    assert (c["author"], c["author_kind"]) == ("w1", "agent")
    line = cli.refuse("FORBIDDEN", 1, "card", "comment", "WEB-2", "hi", LANEBOARD_TOKEN=tok)
    assert line == (
        "error FORBIDDEN: this agent credential is scoped to card 1, not WEB-2 — "
        "agents write only the card they were dispatched for"
    )
    cli.refuse("FORBIDDEN", 1, "project", "add", "EVIL", LANEBOARD_TOKEN=tok)
    # reads check the credential too: a forged token reads nothing
    cli.refuse("UNAUTHORIZED", 1, "card", "get", "WEB-1", LANEBOARD_TOKEN="lbt_forged")
    cli.refuse("UNAUTHORIZED", 1, "card", "comment", "WEB-1", "x", LANEBOARD_TOKEN="lbt_forged")


# -- refusals ---------------------------------------------------------------------------
def test_each_error_code_is_one_line_and_writes_nothing(cli: Cli) -> None:
    cli.ok("card", "add", "WEB", "a")
    cli.ok("card", "add", "WEB", "b", "--depends-on", "WEB-1")

    line = cli.refuse("NOT_FOUND", 1, "card", "get", "WEB-99")
    assert line == "error NOT_FOUND: card WEB-99 does not exist — list cards with: lb card list"
    cli.refuse("NOT_FOUND", 1, "card", "move", "WEB-99", "done")
    cli.refuse("BAD_INPUT", 2, "card", "add", "WEB", "   ")
    cli.refuse("BAD_INPUT", 2, "card", "add", "WEB", "x", "--meta", "[1]")
    cli.refuse("BAD_INPUT", 2, "card", "add", "WEB", "x", "--priority", "7")
    cli.refuse("USAGE", 2, "card", "move", "WEB-1", "doing")
    cli.refuse("BAD_INPUT", 2, "card", "move", "WEB-1", "blocked", "--reason", "x", "--key", " ")
    cli.refuse("BAD_INPUT", 2, "card", "report", "WEB-1", "--body", "b", "--evidence", "pytest")
    cli.refuse("ILLEGAL_TRANSITION", 1, "card", "move", "WEB-1", "done")
    cli.refuse("DEPENDENCY_CYCLE", 1, "card", "link", "WEB-1", "WEB-2")
    cli.refuse("CLAIM_CONFLICT", 1, "card", "claim", "WEB-2")  # WEB-1 is not done

    tok = cli.token("w1", card_id=1, epoch=1)
    cli.ok("card", "claim", "WEB-1", LANEBOARD_TOKEN=tok)
    cli.refuse("CLAIM_CONFLICT", 1, "card", "claim", "WEB-1", "--holder", "w2")
    cli.refuse("REPORT_REQUIRED", 1, "card", "move", "WEB-1", "in_review", LANEBOARD_TOKEN=tok)
    cli.refuse("ACCEPTANCE_FORBIDDEN", 1, "card", "move", "WEB-1", "done")
    cli.refuse("FORBIDDEN", 1, "card", "heartbeat", "WEB-2", LANEBOARD_TOKEN=tok)
    # the same holder re-claims after 10 minutes: epoch 2; the epoch-1 token is now stale
    cli.ok("card", "claim", "WEB-1", "--holder", "w1", LANEBOARD_NOW=LATER)
    line = cli.refuse("STALE_CLAIM", 1, "card", "heartbeat", "WEB-1", LANEBOARD_TOKEN=tok)
    assert line == (
        "error STALE_CLAIM: claim epoch 1 on WEB-1 is stale (current 2) — "
        "your claim was taken over; stop working on this card"
    )
    cli.refuse("STALE_CLAIM", 1, "card", "report", "WEB-1", "--body", "x", LANEBOARD_TOKEN=tok)

    # with --json the error is also a document on stdout
    before = cli.events()
    r = cli.run("card", "move", "WEB-2", "done", "--json")
    assert r.code == 1 and len(r.err.splitlines()) == 1
    assert json.loads(r.out) == {
        "error": {
            "code": "ILLEGAL_TRANSITION",
            "message": "todo -> done is not a legal move",
            "fix": "from todo the legal moves are: backlog, blocked, canceled, in_progress",
        }
    }
    assert cli.events() == before


def exact(cli: Cli, code: str, exit_code: int, line: str, *args: str, **env: str) -> None:
    """The refusal's exact stderr line, and the same error as a ``--json`` document."""
    assert cli.refuse(code, exit_code, *args, **env) == line
    before = cli.events()
    r = cli.run(*args, "--json", **env)
    assert r.code == exit_code and r.err == line + "\n"
    message, fix = line[len(f"error {code}: ") :].split(" — ", 1)
    doc = json.loads(r.out)["error"]
    assert {k: doc[k] for k in ("code", "message", "fix")} == {
        "code": code,
        "message": message,
        "fix": fix,
    }
    assert cli.events() == before


def test_every_error_code_has_an_exact_line_and_document(cli: Cli) -> None:
    cli.ok("card", "add", "WEB", "a")
    cli.ok("card", "add", "WEB", "b", "--depends-on", "WEB-1")
    exact(
        cli,
        "BAD_INPUT",
        2,
        "error BAD_INPUT: priority 7 is out of range — use 0 (highest) to 3 (lowest)",
        "card",
        "add",
        "WEB",
        "x",
        "--priority",
        "7",
    )
    exact(
        cli,
        "BAD_INPUT",
        2,
        "error BAD_INPUT: awaiting needs a reason E1/E2/E3/E4/E5 — "
        "pass --reason E1..E5 and --question TEXT",
        "card",
        "move",
        "WEB-1",
        "awaiting",
    )
    exact(
        cli,
        "BAD_INPUT",
        2,
        "error BAD_INPUT: question is empty — give a non-empty question",
        "card",
        "move",
        "WEB-1",
        "awaiting",
        "--reason",
        "E1",
    )
    exact(
        cli,
        "DEPENDENCY_CYCLE",
        1,
        "error DEPENDENCY_CYCLE: WEB-1 -> WEB-2 would close a cycle — "
        "dependencies must form a DAG; remove the opposite link first",
        "card",
        "link",
        "WEB-1",
        "WEB-2",
    )
    exact(
        cli,
        "CLAIM_CONFLICT",
        1,
        "error CLAIM_CONFLICT: WEB-2 cannot be claimed: a dependency is not done yet — "
        "pick another card from: lb card candidates",
        "card",
        "claim",
        "WEB-2",
    )
    exact(
        cli,
        "NOTHING_READY",
        1,
        "error NOTHING_READY: no ready card for alice — "
        "see what is waiting with: lb card candidates --include-unassigned",
        "card",
        "claim",
        "--next",
    )
    exact(
        cli,
        "CONFLICT",
        1,
        "error CONFLICT: project WEB (WEB) already exists — "
        "pick another key and name, or use the existing project",
        "project",
        "add",
        "WEB",
    )
    tok = cli.token("w1", card_id=1, epoch=1)
    cli.ok("card", "claim", "WEB-1", LANEBOARD_TOKEN=tok)
    exact(
        cli,
        "CLAIM_CONFLICT",
        1,
        "error CLAIM_CONFLICT: WEB-1 cannot be claimed: held by w1 with a live heartbeat "
        "(0 min old) — "
        "pick another card from: lb card candidates",
        "card",
        "claim",
        "WEB-1",
        "--holder",
        "w2",
    )
    exact(
        cli,
        "REPORT_REQUIRED",
        1,
        "error REPORT_REQUIRED: WEB-1 has no delivery report for round 1 — "
        "write one first: lb card report WEB-1 --body TEXT",
        "card",
        "move",
        "WEB-1",
        "in_review",
        LANEBOARD_TOKEN=tok,
    )
    exact(
        cli,
        "ACCEPTANCE_FORBIDDEN",
        1,
        "error ACCEPTANCE_FORBIDDEN: WEB-1 has acceptance mode auto; in_progress -> done "
        "needs mode off — deliver it to in_review with a report first",
        "card",
        "move",
        "WEB-1",
        "done",
    )
    exact(
        cli, "FORBIDDEN", 1,
        "error FORBIDDEN: this agent credential is scoped to card 1, not WEB-2 — "
        "agents write only the card they were dispatched for",
        "card", "heartbeat", "WEB-2", LANEBOARD_TOKEN=tok,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ("nope",),
        ("card",),
        ("card", "get"),
        ("card", "add", "WEB"),
        ("card", "add", "WEB", "t", "--priority", "high"),
        ("card", "add", "WEB", "t", "--kind", "story"),
        ("card", "move", "WEB-1", "done", "--bogus"),
        ("events", "tail", "-n", "x"),
    ],
    ids=lambda a: " ".join(a),
)
def test_usage_errors_exit_2_with_one_line(cli: Cli, args: tuple[str, ...]) -> None:
    line = cli.refuse("USAGE", 2, *args)
    assert line.endswith("--help")


def test_bad_environment_is_reported(cli: Cli) -> None:
    line = cli.refuse("CONFIG_INVALID", 2, "card", "list", LANEBOARD_NOW="yesterday")
    assert "LANEBOARD_NOW" in line
    if cli.mode == "local":
        r = cli.run("card", "list", LANEBOARD_DATABASE_URL="mysql://x/y")
        assert r.code == 2 and r.err.startswith("error CONFIG_INVALID: unsupported database URL")
    else:
        line = cli.refuse("CONFIG_INVALID", 2, "card", "list", LANEBOARD_URL="ftp://x")
        assert line.startswith("error CONFIG_INVALID: LANEBOARD_URL='ftp://x' is not")


def test_events_tail_follow_prints_new_events_as_they_happen(cli: Cli) -> None:
    cli.ok("card", "add", "WEB", "before")
    proc = subprocess.Popen(
        [*LB, "events", "tail", "-n", "1", "--follow", "--interval", "0.05", "--json",
         "--max-events", "3"],
        env=cli.environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert (first["type"], first["payload"]["ref"]) == ("card.created", "WEB-1")
        cli.ok("card", "add", "WEB", "after")  # written while the tail follows
        cli.ok("card", "comment", "WEB-2", "hello")
        second = json.loads(proc.stdout.readline())
        third = json.loads(proc.stdout.readline())
        assert (second["type"], second["payload"]["ref"]) == ("card.created", "WEB-2")
        assert third["type"] == "comment.added" and third["id"] == second["id"] + 1
        assert proc.wait(timeout=30) == 0  # --max-events 3 ends it
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # closes the pipes


def test_text_output_aligns_and_says_what_happened(cli: Cli) -> None:
    first = cli.run("card", "add", "WEB", "short", "--key", "k-1")
    assert (first.code, first.out) == (0, "WEB-1 created (todo)\n")
    again = cli.run("card", "add", "WEB", "short", "--key", "k-1")
    assert again.code == 0
    assert (
        again.out
        == "WEB-1 already has key k-1: returned the existing card (todo), nothing created\n"
    )
    cli.ok("project", "add", "LONGNAME")
    for _ in range(10):
        cli.ok("card", "add", "LONGNAME", "a card with a long reference", "--assignee", "worker")
    cli.ok("card", "claim", "LONGNAME-10", "--holder", "someone-with-a-long-name")
    lines = cli.run("card", "list").out.splitlines()
    assert lines[0].split() == ["CARD", "STATUS", "PRI", "WHO", "TITLE"]
    starts = {
        line.index(" todo") if " todo" in line else line.index(" in_progress") for line in lines[1:]
    }
    assert len(starts) == 1, lines  # the STATUS column starts at one offset on every line
    titles = {
        line.index("short") if "short" in line else line.index("a card") for line in lines[1:]
    }
    assert len(titles) == 1, lines
