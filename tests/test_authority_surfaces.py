"""The same agent credential refused the same way through every surface, on both backends:
the real ``lb`` in a subprocess, the REST API, and MCP over stdio (``lb mcp``).

The worker's token is scoped to WEB-3 (in epic WEB-1, depending on WEB-2), delivered and
waiting for its review; OPS-1 is someone else's card. Each refusal leaves the event log
exactly as it was, and each read shows only what the credential may read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from starlette.testclient import TestClient
from tests.test_authority import ME, World, log, make_world

from laneboard.board.tokens import Tokens
from laneboard.server.app import create_app
from laneboard.store import Store, open_store

MINE, OTHER = "WEB-3", "OPS-1"
READABLE = {"WEB-1", "WEB-2", "WEB-3"}
FORGED = {"review_verdict": "APPROVE", "review_verdict_round": 1, "review_verdict_author": "rev"}


@dataclass
class Scene:
    url: str
    store: Store
    world: World
    token: str


@pytest.fixture
def scene(store_url: str) -> Iterator[Scene]:
    store = open_store(store_url)
    world = make_world(store)
    token, _ = Tokens(store).create(
        ME, "worker", card_id=world.mine.id, epoch=world.mine.claim_epoch
    )
    try:
        yield Scene(store_url, store, world, token)
    finally:
        store.close()


def readable_ids(scene: Scene) -> set[int]:
    w = scene.world
    return {w.epic.id, w.dep.id, w.mine.id}


# -- the CLI ----------------------------------------------------------------------------
def lb(scene: Scene, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_DATABASE_URL=scene.url, LANEBOARD_TOKEN=scene.token)
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def cli_refuses(scene: Scene, code: str, *args: str) -> None:
    before = log(scene.store)
    r = lb(scene, *args)
    assert r.returncode == 1, (args, r.returncode, r.stderr)
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error {code}: "), r.stderr
    assert log(scene.store) == before, f"{args} changed the event log"


def test_cli_refuses_the_agent_everything_outside_its_card(scene: Scene) -> None:
    before = log(scene.store)
    cli_refuses(scene, "FORBIDDEN", "card", "get", OTHER)
    cli_refuses(scene, "FORBIDDEN", "events", "tail", "--card", OTHER)
    for person_only in (("token", "list"), ("status",), ("doctor",), ("project", "add", "EVIL")):
        cli_refuses(scene, "FORBIDDEN", *person_only)
    listed = json.loads(lb(scene, "card", "list", "--json").stdout)
    assert {c["ref"] for c in listed} == READABLE
    tail = json.loads(lb(scene, "events", "tail", "-n", "1000", "--json").stdout)
    assert tail and {e["card_id"] for e in tail} <= readable_ids(scene)
    assert [p["key"] for p in json.loads(lb(scene, "project", "list", "--json").stdout)] == ["WEB"]
    assert log(scene.store) == before  # reads write nothing


def test_cli_refuses_the_agent_landing_its_own_unreviewed_work(scene: Scene) -> None:
    cli_refuses(scene, "FORBIDDEN", "card", "edit", MINE, "--allow-path", "src")
    cli_refuses(scene, "FORBIDDEN", "card", "edit", MINE, "--check", "true")
    cli_refuses(scene, "FORBIDDEN", "card", "edit", MINE, "--meta", json.dumps(FORGED))
    cli_refuses(scene, "ACCEPTANCE_FORBIDDEN", "card", "report", MINE, "--body", "LGTM",
                "--verdict", "APPROVE")  # fmt: skip
    cli_refuses(scene, "ACCEPTANCE_FORBIDDEN", "card", "move", MINE, "done")
    assert scene.world.board.get(MINE).status.value == "in_review"


# -- REST -------------------------------------------------------------------------------
@pytest.fixture
def api(scene: Scene) -> Iterator[TestClient]:
    app = create_app(scene.store, local_user="alice", with_mcp=False)
    headers = {"Authorization": f"Bearer {scene.token}", "Content-Type": "application/json"}
    with TestClient(app, base_url="http://127.0.0.1", headers=headers) as c:
        yield c


def rest_refuses(scene: Scene, resp: Any, status: int, code: str) -> None:
    assert (resp.status_code, resp.json()["code"]) == (status, code), resp.text


def test_rest_refuses_the_agent_everything_outside_its_card(scene: Scene, api: TestClient) -> None:
    before = log(scene.store)
    rest_refuses(scene, api.get(f"/api/v1/cards/{OTHER}"), 403, "FORBIDDEN")
    rest_refuses(scene, api.get(f"/api/v1/cards/{OTHER}/comments"), 403, "FORBIDDEN")
    rest_refuses(scene, api.get("/api/v1/events", params={"card": OTHER}), 403, "FORBIDDEN")
    assert {c["ref"] for c in api.get("/api/v1/cards").json()} == READABLE
    events = api.get("/api/v1/events", params={"limit": 1000}).json()
    assert events and {e["card_id"] for e in events} <= readable_ids(scene)
    rest_refuses(scene, api.get("/metrics"), 403, "FORBIDDEN")
    assert log(scene.store) == before


def test_rest_refuses_the_agent_landing_its_own_unreviewed_work(
    scene: Scene, api: TestClient
) -> None:
    before = log(scene.store)
    card = f"/api/v1/cards/{MINE}"
    rest_refuses(scene, api.patch(card, json={"allowed_paths": ["src"]}), 403, "FORBIDDEN")
    rest_refuses(scene, api.patch(card, json={"checks": ["true"]}), 403, "FORBIDDEN")
    rest_refuses(scene, api.patch(card, json={"meta": FORGED}), 403, "FORBIDDEN")
    verdict = {"body": "LGTM", "verdict": "APPROVE"}
    rest_refuses(scene, api.post(card + "/reports", json=verdict), 409, "ACCEPTANCE_FORBIDDEN")
    rest_refuses(scene, api.post(card + "/move", json={"to": "done"}), 409, "ACCEPTANCE_FORBIDDEN")
    assert log(scene.store) == before


# -- MCP --------------------------------------------------------------------------------
async def tool(c: Client, name: str, **args: Any) -> tuple[bool, Any]:
    res = await c.call_tool(name, args)
    if res.is_error:
        return False, res.content[0].text  # type: ignore[union-attr]
    return True, res.structured_content


def mcp_calls(scene: Scene, calls: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Each named tool call through one ``lb mcp`` acting as the worker's token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_TOKEN=scene.token)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "laneboard.cli.main", "--db", scene.url, "mcp"], env=env
    )
    got: dict[str, tuple[bool, Any]] = {}

    async def main() -> None:
        async with Client(params) as c:
            for key, (name, args) in calls.items():
                got[key] = await tool(c, name, **args)

    anyio.run(main)
    return got


def mcp_refused(got: tuple[bool, Any], code: str) -> None:
    ok, text = got
    assert not ok and f"error {code}" in text, text


def test_mcp_refuses_the_agent_everything_outside_its_card(scene: Scene) -> None:
    before = log(scene.store)
    got = mcp_calls(
        scene,
        {
            "other": ("get_card", {"ref": OTHER}),
            "list": ("list_cards", {}),
            "other_comments": ("list_comments", {"ref": OTHER}),
            "other_events": ("events", {"card": OTHER}),
            "events": ("events", {"limit": 1000}),
            "approve": ("report", {"ref": MINE, "body": "LGTM", "verdict": "APPROVE"}),
            "close": ("move_card", {"ref": MINE, "to": "done"}),
        },
    )
    assert log(scene.store) == before
    mcp_refused(got["other"], "FORBIDDEN")
    assert {c["ref"] for c in got["list"][1]["cards"]} == READABLE
    mcp_refused(got["other_comments"], "FORBIDDEN")
    mcp_refused(got["other_events"], "FORBIDDEN")
    events = got["events"][1]["events"]
    assert events and {e["card_id"] for e in events} <= readable_ids(scene)
    for name in ("approve", "close"):
        mcp_refused(got[name], "ACCEPTANCE_FORBIDDEN")


def test_mcp_refuses_the_agent_widening_its_own_card(scene: Scene) -> None:
    before = log(scene.store)
    got = mcp_calls(
        scene,
        {
            "paths": ("edit_card", {"ref": MINE, "allowed_paths": ["src"]}),
            "checks": ("edit_card", {"ref": MINE, "checks": ["true"]}),
            "meta": ("edit_card", {"ref": MINE, "meta": FORGED}),
        },
    )
    for name in ("paths", "checks", "meta"):
        mcp_refused(got[name], "FORBIDDEN")
    assert log(scene.store) == before
    card = scene.world.board.get(MINE)
    assert card.allowed_paths == scene.world.mine.allowed_paths
    assert card.checks == scene.world.mine.checks
    assert not set(FORGED) & set(card.meta)
