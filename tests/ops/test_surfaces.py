"""The whole operation table on all three surfaces, on both backends.

* An agent credential scoped to one card calls every operation against another card (or
  the board): the CLI, REST and MCP answer with the same outcome — the same error code
  when refused — and an operation only a person may call is FORBIDDEN everywhere.
* A person walks every operation and every REST route: each success response validates
  against the schema its OpenAPI operation publishes, each MCP result against its tool's
  output schema, and the two surfaces return the same documents.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from starlette.testclient import TestClient
from tests.ops.walk import (
    argv_of,
    outcome_of_cli,
    outcome_of_rest,
    outcome_of_tool,
    request_of,
    route_of,
)

from laneboard.board.authority import Caller
from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import agent, human
from laneboard.ops.clock import PinnedClock, pinned_ms
from laneboard.ops.spec import Op, Params
from laneboard.ops.table import all_ops, by_name
from laneboard.server.app import create_app
from laneboard.server.mcp_tools import output_schema
from laneboard.server.openapi import document
from laneboard.store import Store, open_store

NOW = "2026-01-01T00:00:00.000Z"
Ids = dict[str, Any]

# what an agent scoped to card A asks of card B (or of the board); one entry per operation
OUT_OF_SCOPE: dict[str, Callable[[Ids], Params]] = {
    "whoami": lambda i: {},
    "status": lambda i: {},
    "doctor": lambda i: {},
    "holds.release": lambda i: {"reason": "configuration"},
    "project.list": lambda i: {},
    "project.get": lambda i: {"project": "WEB"},
    "project.add": lambda i: {"key": "EVIL"},
    "project.edit": lambda i: {"project": "WEB", "no_remote": True},
    "project.config": lambda i: {"project": "WEB", "set": ["check_timeout=5"]},
    "events.tail": lambda i: {"card": i["b"]},
    "token.create": lambda i: {"name": "mine", "kind": "human"},
    "token.list": lambda i: {},
    "token.revoke": lambda i: {"token_id": 1},
    "card.add": lambda i: {"project": "WEB", "title": "sneaky"},
    "card.get": lambda i: {"ref": i["b"]},
    "card.list": lambda i: {},
    "card.edit": lambda i: {"ref": i["b"], "title": "mine now"},
    "card.link": lambda i: {"ref": i["a"], "depends_on": i["b"]},
    "card.candidates": lambda i: {},
    "card.move": lambda i: {"ref": i["b"], "to": "backlog"},
    "card.claim": lambda i: {"ref": i["b"]},
    "card.heartbeat": lambda i: {"ref": i["b"]},
    "card.release": lambda i: {"ref": i["b"]},
    "card.comment": lambda i: {"ref": i["b"], "body": "hello"},
    "card.comments": lambda i: {"ref": i["b"]},
    "card.report": lambda i: {"ref": i["b"], "body": "done"},
    "card.reports": lambda i: {"ref": i["b"]},
    "card.deliver": lambda i: {"ref": i["b"], "body": "done"},
    "card.ask": lambda i: {"ref": i["b"], "text": "why?"},
    "card.wait": lambda i: {"ref": i["b"], "question_id": 1, "timeout_s": 1},
    "card.follow-up": lambda i: {"ref": i["b"], "title": "more", "round": 1},
    "card.handoff": lambda i: {"ref": i["b"], "decision": "consumed", "round": 1},
    "card.land": lambda i: {"ref": i["b"]},
    "schedule.add": lambda i: {"job": {"project": "WEB", "title": "t"}, "cron": "0 3 * * *",
                               "name": "n"},
    "schedule.list": lambda i: {},
    "schedule.show": lambda i: {"name": "n"},
    "schedule.remove": lambda i: {"name": "n"},
    "schedule.enable": lambda i: {"name": "n"},
    "schedule.disable": lambda i: {"name": "n"},
    "run.create": lambda i: {"project": "WEB", "goal": "take over"},
    "run.list": lambda i: {},
    "run.show": lambda i: {"id": 1},
    "run.status": lambda i: {"project": "WEB"},
    "run.start": lambda i: {"id": 1, "idempotency_key": "k"},
    "run.pause": lambda i: {"id": 1, "idempotency_key": "k"},
    "run.resume": lambda i: {"id": 1, "idempotency_key": "k"},
    "run.stop": lambda i: {"id": 1, "idempotency_key": "k"},
    "run.force-stop": lambda i: {"id": 1, "idempotency_key": "k"},
    "orchestrate.control": lambda i: {"verb": "inspect", "run": 1},
    "card.transcript": lambda i: {"ref": i["b"]},
    "card.stop": lambda i: {"ref": i["b"]},
    "card.tell": lambda i: {"ref": i["b"], "body": "do it my way"},
    "card.answer": lambda i: {"ref": i["b"], "body": "8080"},
    "card.reject": lambda i: {"ref": i["b"], "must_fix": ["all of it"]},
    "inbox": lambda i: {},
}  # fmt: skip


def test_every_operation_has_an_out_of_scope_call() -> None:
    assert set(OUT_OF_SCOPE) == set(by_name()), "add the new operation to OUT_OF_SCOPE"


def cli_env(store_url: str, tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_DATABASE_URL=store_url, XDG_STATE_HOME=str(tmp / "state"), **extra)
    return env


@contextlib.contextmanager
def mcp_session(store_url: str, env: dict[str, str]) -> Iterator[tuple[BlockingPortal, Client]]:
    """A real ``lb mcp`` over stdio, driven synchronously through a portal."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "laneboard.cli.main", "mcp"], env=env
    )
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(params)) as client,
    ):
        yield portal, client


@pytest.mark.timeout(900)  # one CLI process per operation: minutes on a loaded machine
def test_an_out_of_scope_agent_is_refused_alike_everywhere(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    a = board.create_card(me, "WEB", "mine")
    b = board.create_card(me, "WEB", "not mine")
    claimed = board.claim(agent("w1"), a.ref)
    token, _ = Tokens(store).create(me, "w1", "agent", card_id=a.id, epoch=claimed.claim_epoch)
    ids = {"a": a.ref, "b": b.ref}
    env = cli_env(store_url, tmp_path, LANEBOARD_TOKEN=token)
    app = create_app(store, local_user="alice", with_mcp=False)
    seen: dict[str, tuple[str, str, str]] = {}
    try:
        with (
            TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)) as rest,
            mcp_session(store_url, env) as (portal, tools),
        ):
            for op in all_ops():
                params = OUT_OF_SCOPE[op.name](ids)
                before = board.events(0, limit=100_000)
                cli = subprocess.run(
                    [sys.executable, "-m", "laneboard.cli.main", *argv_of(op, params, tmp_path)],
                    env=env, capture_output=True, text=True, timeout=120,
                )  # fmt: skip
                method, url, kw = request_of(op, params)
                kw["headers"] = {**kw["headers"], "Authorization": f"Bearer {token}"}
                resp = rest.request(method, url, **kw)
                assert op.tool is not None
                res = portal.call(tools.call_tool, op.tool, params)
                seen[op.name] = (
                    outcome_of_cli(cli.returncode, cli.stdout),
                    outcome_of_rest(resp),
                    outcome_of_tool(res),
                )
                if "ok" not in seen[op.name]:  # a refusal changes nothing, on no surface
                    assert board.events(0, limit=100_000) == before, op.name
    finally:
        store.close()
    differ = {name: got for name, got in seen.items() if len(set(got)) != 1}
    assert differ == {}, "the surfaces disagree (cli, rest, mcp)"
    for op in all_ops():
        if op.caller is Caller.PERSON:
            assert seen[op.name][0] == "FORBIDDEN", op.name
    refused = {name for name, got in seen.items() if got[0] != "ok"}
    assert {"card.get", "card.edit", "card.move", "card.comment", "events.tail"} <= refused


# -- a person's walk: every operation and route, its result against its schema -----------------
def resolved(doc: dict[str, Any], schema: Any) -> Any:
    """``schema`` with the document's ``$ref``s inlined."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            return resolved(doc, doc["components"]["schemas"][name])
        return {k: resolved(doc, v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [resolved(doc, v) for v in schema]
    return schema


def orchestration(store: Store) -> int:
    """An orchestrated run of project WEB (``lb orchestrate`` is a local command)."""
    from laneboard.board.orchestrate_runtime import Runtime
    from laneboard.domain.budgets import Budgets

    board = Board(store)
    spec = {"allow_paths": ["src"], "checks": ["true"]}
    o = Runtime(board).create(human("alice"), "WEB", "a goal", spec, Budgets(),
                              {"repo": "/r", "head": "0" * 40})  # fmt: skip
    return o.run_id


def scenario(
    call: Callable[[str, Params], Any],
    repo: Path,
    orchestrate: Callable[[], int],
    running: Callable[[str], None],
) -> list[tuple[str, Params]]:
    """A person calls every operation (and every REST route) once; returns the calls.
    ``running(ref)`` starts a turn on the card as the supervisor would."""
    calls: list[tuple[str, Params]] = []

    def do(op_name: str, /, **params: Any) -> Any:
        calls.append((op_name, params))
        return call(op_name, params)

    do("whoami")
    do("project.add", key="WEB", name="Web", path=str(repo))
    do("project.list")
    do("project.get", project="WEB")
    do("project.edit", project="WEB", no_remote=True)
    do("project.config", project="WEB", set=["check_timeout=30"])
    a = do("card.add", project="WEB", title="first", acceptance=["it works"],
           acceptance_mode="off", labels=["x"], idempotency_key="k-first")  # fmt: skip
    b = do("card.add", project="WEB", title="second", meta={"n": 1})
    do("card.add", project="WEB", title="an epic", kind="epic")
    do("card.get", ref=a["ref"])
    do("card.list", statuses=["todo"], limit=10)
    do("card.edit", ref=b["ref"], title="second, renamed", priority=1)
    do("card.link", ref=b["ref"], depends_on=a["ref"])
    do("card.link", ref=b["ref"], depends_on=a["ref"], remove=True)
    do("card.candidates", include_unassigned=True)
    do("card.claim", ref=a["ref"], session_id="s1")
    do("card.heartbeat", ref=a["ref"])
    do("card.comment", ref=a["ref"], body="on it", kind="finding")
    q = do("card.ask", ref=a["ref"], text="which port?")
    do("card.wait", ref=a["ref"], question_id=q["question_id"], timeout_s=0.05)
    do("inbox")
    do("inbox", kind=["question", "hold"])
    do("card.answer", ref=a["ref"], body="port 8080")
    do("card.claim", ref=a["ref"], session_id="s1")
    do("card.tell", ref=a["ref"], body="also update the docs")
    running(a["ref"])
    do("card.stop", ref=a["ref"])
    do("card.transcript", ref=a["ref"], after=0, limit=10)
    do("card.comments", ref=a["ref"], after=0)
    do("card.report", ref=a["ref"], body="draft",
       evidence=[{"command": "true", "exit_code": 0}])  # fmt: skip
    do("card.reports", ref=a["ref"])
    do("card.deliver", ref=a["ref"], body="done\n\n## Handoff\n- write the docs", commit="abc")
    do("card.land", ref=a["ref"])
    do("card.claim", next=True, include_unassigned=True)
    do("card.release", ref=b["ref"], note="later")
    do("card.move", ref=b["ref"], to="backlog", note="not now")
    p = do("card.add", project="WEB", title="producer", acceptance_mode="off",
           meta={"stage_handoff": "required"})  # fmt: skip
    do("card.claim", ref=p["ref"])
    do("card.deliver", ref=p["ref"], body="made\n\n## Handoff\n- document it")
    do("card.move", ref=p["ref"], to="done")
    do("card.follow-up", ref=p["ref"], title="document it", round=1, assignee="writer")
    do("card.handoff", ref=p["ref"], decision="consumed", round=1)
    do("events.tail", last=5)
    do("events.tail", after="0", limit=3, card=a["ref"])
    t = do("token.create", name="ci", kind="human", expires_in_s=3600)
    do("token.list")
    do("token.revoke", token_id=t["id"])
    do("status")
    do("doctor")
    do("holds.release", reason="configuration")
    job = {"project": "WEB", "title": "nightly check", "priority": 1}
    do("schedule.add", job=job, cron="0 3 * * *", name="nightly", timezone="UTC")
    do("schedule.list")
    do("schedule.show", name="nightly")
    do("schedule.disable", name="nightly")
    do("schedule.enable", name="nightly")
    do("schedule.remove", name="nightly")
    run = do("run.create", project="WEB", goal="ship the billing export", interval_ms=500)
    do("card.add", project="WEB", title="export as CSV", run=run["id"])
    do("card.list", run=run["id"])
    do("run.list", project="WEB", statuses=["active"])
    do("run.show", id=run["id"])
    do("run.status", project="WEB")
    do("run.status", project="WEB", run=run["id"])
    do("run.pause", id=run["id"], idempotency_key="p1", reason="lunch")
    do("run.pause", id=run["id"], idempotency_key="p1", reason="lunch")  # replayed
    do("run.resume", id=run["id"], idempotency_key="r1")
    do("run.stop", id=run["id"], idempotency_key="s1")
    do("run.start", id=run["id"], idempotency_key="s2")
    do("run.force-stop", id=run["id"], idempotency_key="f1")
    run = orchestrate()
    do("orchestrate.control", verb="assign", run=run, assignment="api", owner="specialist-a",
       brief="the api", paths=["src/api"], checks=["true"])  # fmt: skip
    do("orchestrate.control", verb="inspect", run=run)
    do("orchestrate.control", verb="inspect", run=run, assignment="api")
    h = do("card.add", project="WEB", title="needs a person", acceptance_mode="human")
    do("card.claim", ref=h["ref"])
    do("card.deliver", ref=h["ref"], body="made")
    do("card.reject", ref=h["ref"], must_fix=["say why"], note="almost")
    return calls


def start_turn(store: Store, ref: str) -> None:
    with store.write() as tx:
        card = tx.card_by_ref(ref)
        assert card is not None
        tx.start_turn(None, card.id, card.delivery_round, None, "scripted", "s1", "go")


_CURSORS = ("cursor",)


def _event_id(cursor: Any) -> Any:
    return str(cursor).rpartition(".")[2] if isinstance(cursor, str) else cursor


def _comparable(data: Any) -> Any:
    """A result with what differs between two boards by nature masked (plaintext tokens,
    elapsed waits, check output paths, and a PostgreSQL cursor's transaction id: the
    database's, not the board's — the event id after it is compared)."""
    if isinstance(data, dict):
        masked = ("token", "log_path", "waited_s")
        return {
            k: "*" if k in masked else _event_id(v) if k in _CURSORS else _comparable(v)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_comparable(v) for v in data]
    return data


def rest_walk(store: Store, repo: Path) -> tuple[list[Any], set[tuple[str, str]]]:
    doc = document()
    app = create_app(store, local_user="alice", with_mcp=False)
    results: list[Any] = []
    routes: set[tuple[str, str]] = set()
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)) as c:

        def call(name: str, params: Params) -> Any:
            op = by_name()[name]
            method, url, kw = request_of(op, params)
            resp = c.request(method, url, **kw)
            route = route_of(op, params)
            assert resp.status_code == route.status, (name, resp.text)
            operation = doc["paths"]["/api/v1" + route.path][route.method.lower()]
            schema = operation["responses"][str(route.status)]["content"]["application/json"]
            jsonschema.validate(resp.json(), resolved(doc, schema["schema"]))
            routes.add((route.method, route.path))
            results.append(resp.json())
            return resp.json()

        scenario(call, repo, lambda: orchestration(store), lambda ref: start_turn(store, ref))
    return results, routes


def mcp_walk(store_url: str, env: dict[str, str], repo: Path) -> list[Any]:
    results: list[Any] = []
    with mcp_session(store_url, env) as (portal, tools):
        listed = {t.name: t for t in portal.call(tools.list_tools).tools}

        def call(name: str, params: Params) -> Any:
            op: Op = by_name()[name]
            assert op.tool is not None
            res = portal.call(tools.call_tool, op.tool, params)
            assert not res.is_error, (name, res.content)
            assert listed[op.tool].output_schema == output_schema(op)
            jsonschema.validate(res.structured_content, output_schema(op))
            data = res.structured_content[op.tool_key] if op.tool_key else res.structured_content
            results.append(data)
            return data

        def orchestrate() -> int:
            other = open_store(store_url, PinnedClock(pinned_ms(NOW)))
            try:
                return orchestration(other)
            finally:
                other.close()

        def running(ref: str) -> None:
            other = open_store(store_url, PinnedClock(pinned_ms(NOW)))
            try:
                start_turn(other, ref)
            finally:
                other.close()

        scenario(call, repo, orchestrate, running)
    return results


@pytest.fixture
def second_url(store_url: str, tmp_path: Path) -> Iterator[str]:
    """A second fresh board on the same backend as ``store_url``."""
    from tests.conftest import drop_pg_schema, make_pg_schema, pg_schema_url

    if store_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'second.db'}"
        return
    schema = make_pg_schema()
    try:
        yield pg_schema_url(schema)
    finally:
        drop_pg_schema(schema)


def test_every_success_response_matches_its_schema_and_the_surfaces_agree(
    store_url: str, second_url: str, repo: Path, tmp_path: Path
) -> None:
    store = open_store(store_url, PinnedClock(pinned_ms(NOW)))
    try:
        rest, routes = rest_walk(store, repo)
    finally:
        store.close()
    declared = {(r.method, r.path) for op in all_ops() for r in op.routes}
    assert routes == declared, "the walk leaves routes out"
    open_store(second_url).close()  # lb mcp serves an existing board
    env = cli_env(second_url, tmp_path, LANEBOARD_NOW=NOW, LANEBOARD_USER="alice")
    tools = mcp_walk(second_url, env, repo)
    assert [_comparable(x) for x in tools] == [_comparable(x) for x in rest]
