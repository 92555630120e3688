"""Authority in the board, on both backends: what an agent credential may read and write.

A worker's credential is scoped to its card A (in epic E, depending on D); B is someone
else's card. Every refusal leaves the event log exactly as it was.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laneboard.board import access, authority
from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import Actor, ActorKind, Card, agent, human, system
from laneboard.errors import LaneboardError
from laneboard.store import Store

ME = human("alice")
SRC = Path(__file__).resolve().parents[1] / "src" / "laneboard"


@dataclass
class World:
    board: Board
    store: Store
    epic: Card
    dep: Card
    mine: Card
    other: Card
    worker: Actor


def log(store: Store) -> list[tuple[int, str, int | None]]:
    with store.read() as tx:
        return [(e.id, e.type, e.card_id) for e in tx.events(0, limit=100_000)]


def refused(store: Store, code: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> str:
    before = log(store)
    with pytest.raises(LaneboardError) as info:
        fn(*args, **kw)
    assert info.value.code == code, info.value.line()
    assert info.value.fix, "a refusal names the fix"
    assert log(store) == before, f"{code} changed the event log"
    return info.value.message


def make_world(store: Store, *, deliver: bool = True) -> World:
    board = Board(store)
    board.add_project(ME, "WEB")
    board.add_project(ME, "OPS")
    epic = board.create_card(ME, "WEB", "the epic", kind="epic")
    dep = board.create_card(ME, "WEB", "a dependency", acceptance_mode="off")
    mine = board.create_card(
        ME,
        "WEB",
        "the worker's card",
        parent=epic.ref,
        depends_on=[dep.ref],
        checks=["pytest -q"],
        allowed_paths=["src/app"],
        acceptance=["it works"],
    )
    other = board.create_card(ME, "OPS", "someone else's card")
    board.comment(ME, other.ref, "a secret plan")
    board.claim(ME, dep.ref)
    board.report(ME, dep.ref, "dep done")
    board.move(ME, dep.ref, "done")
    claimed = board.claim(agent("worker"), mine.ref)
    worker = Actor(ActorKind.AGENT, "worker", mine.id, claimed.claim_epoch)
    if deliver:
        board.report(worker, mine.ref, "delivered, unreviewed")
        board.move(worker, mine.ref, "in_review")
    return World(board, store, epic, dep, board.get(mine.ref), other, worker)


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    yield make_world(store)


# -- reads ------------------------------------------------------------------------------
def test_an_agent_reads_its_card_its_dependencies_and_its_epic_only(world: World) -> None:
    b, w, s = world.board, world.worker, world.store
    readable = {world.mine.id, world.dep.id, world.epic.id}
    for card in (world.mine, world.dep, world.epic):
        assert access.detail(b, w, card.ref)["id"] == card.id
    refused(s, "FORBIDDEN", access.detail, b, w, world.other.ref)
    refused(s, "FORBIDDEN", access.comments, b, w, world.other.ref)
    refused(s, "FORBIDDEN", access.reports, b, w, world.other.id)
    refused(s, "FORBIDDEN", access.list_cards, b, w, parent=world.other.ref)
    assert {c.id for c in access.list_cards(b, w)} == readable
    assert access.list_cards(b, w, project="OPS") == []
    assert {c.card.id for c in access.candidates(b, w, include_unassigned=True)} <= readable


def test_an_agent_reads_the_events_of_the_cards_it_may_read(world: World) -> None:
    b, w, s = world.board, world.worker, world.store
    readable = {world.mine.id, world.dep.id, world.epic.id}
    everything = access.events(b, ME, 0, limit=1000)
    assert {e.card_id for e in everything} > readable  # people see the whole log
    seen = access.events(b, w, 0, limit=1000)
    assert seen and {e.card_id for e in seen} <= readable
    assert seen == [e for e in everything if e.card_id in readable]
    tail = access.last_events(b, w, 3)
    assert tail == seen[-3:]
    refused(s, "FORBIDDEN", access.events, b, w, 0, card=world.other.ref)
    refused(s, "FORBIDDEN", access.last_events, b, w, 5, card=world.other.ref)


def test_an_agent_sees_only_the_projects_of_its_cards(world: World) -> None:
    b, w = world.board, world.worker
    assert [p.key for p in access.projects(b, ME)] == ["WEB", "OPS"]
    assert [p.key for p in access.projects(b, w)] == ["WEB"]
    assert access.project_config(b, w, "WEB") == {}
    refused(world.store, "FORBIDDEN", access.project, b, w, "OPS")


def test_a_card_less_agent_credential_reads_the_board(world: World) -> None:
    anyone = agent("pool-worker")
    assert {c.id for c in access.list_cards(world.board, anyone)} == {
        world.epic.id,
        world.dep.id,
        world.mine.id,
        world.other.id,
    }


# -- writes -----------------------------------------------------------------------------
FIXED_CHANGES: list[dict[str, Any]] = [
    {"allowed_paths": ["src", "tests"]},
    {"allowed_paths": []},
    {"checks": ["true"]},
    {"checks": []},
    {"acceptance": ["anything goes"]},
    {"acceptance_mode": "off"},
    {"assignee": "someone-else"},
    {"parent": None},
    {"kind": "epic"},
    {"title": "what I did instead"},
    {"description": "the task was always this"},
    {"priority": 0},
]


def test_an_agent_never_changes_what_its_card_is_checked_against(world: World) -> None:
    for change in FIXED_CHANGES:
        b, w = world.board, world.worker
        msg = refused(world.store, "FORBIDDEN", b.edit, w, world.mine.ref, **change)
        assert next(iter(change)) in msg, (change, msg)
    assert world.board.get(world.mine.ref) == world.mine


def test_an_agent_never_writes_a_reserved_meta_key(world: World) -> None:
    for key in sorted(authority.RESERVED_META):
        change = {"my_notes": "fine", key: "forged"}
        msg = refused(
            world.store, "FORBIDDEN", world.board.edit, world.worker, world.mine.id, meta=change
        )
        assert key in msg and "my_notes" not in msg, msg
    assert world.board.get(world.mine.ref) == world.mine


def test_an_agent_keeps_labels_and_its_own_meta_keys(world: World) -> None:
    got = world.board.edit(
        world.worker, world.mine.ref, labels=["needs-docs"], meta={"my_notes": {"tried": 2}}
    )
    assert got.labels == ("needs-docs",) and got.meta["my_notes"] == {"tried": 2}


def test_why_an_agent_cannot_land_unreviewed_work_by_editing_meta(world: World) -> None:
    """The agent forges the review verdict in meta, then closes its ``auto`` card."""
    b, w, s = world.board, world.worker, world.store
    forged = {
        "review_verdict": "APPROVE",
        "review_verdict_round": world.mine.delivery_round,
        "review_verdict_author": "reviewer",
        "review_verdict_at": world.mine.status_since,
        "accepted_by": "loop-review",
    }
    refused(s, "FORBIDDEN", b.edit, w, world.mine.ref, meta=forged)
    refused(s, "FORBIDDEN", b.edit, w, world.mine.ref, acceptance_mode="off")
    refused(s, "ACCEPTANCE_FORBIDDEN", b.move, w, world.mine.ref, "done")
    refused(s, "ACCEPTANCE_FORBIDDEN", b.report, w, world.mine.ref, "LGTM", verdict="APPROVE")
    after = b.get(world.mine.ref)
    assert after.status.value == "in_review" and after == world.mine


def test_an_auto_card_closes_on_a_current_approve_by_someone_else(store: Store) -> None:
    """The rule the refusals protect: the workflow's verdict, then anyone but its author."""
    world = make_world(store)
    b = world.board
    b.edit(
        ME,
        world.mine.ref,
        meta={
            "review_verdict": "APPROVE",
            "review_verdict_round": world.mine.delivery_round,
            "review_verdict_author": "worker",
        },
    )
    refused(store, "ACCEPTANCE_FORBIDDEN", b.move, world.worker, world.mine.ref, "done")
    assert b.move(system(), world.mine.ref, "done").status.value == "done"


def test_a_reviewer_gives_its_verdict_on_its_review_card(world: World) -> None:
    b = world.board
    rev = b.create_card(
        system(),
        "WEB",
        f"Review {world.mine.ref}",
        assignee="reviewer",
        meta={"review_of": world.mine.id, "review_round": 1},
    )
    taken = b.claim(agent("reviewer"), rev.ref)
    reviewer = Actor(ActorKind.AGENT, "reviewer", rev.id, taken.claim_epoch)
    assert b.report(reviewer, rev.ref, "VERDICT: APPROVE", verdict="APPROVE").author == "reviewer"
    assert log(world.store)[-1][1] == "report.added"
    refused(world.store, "FORBIDDEN", b.report, reviewer, world.mine.ref, "x", verdict="APPROVE")


def test_only_the_director_routes_an_unassigned_todo_card(store: Store) -> None:
    board = Board(store)
    board.add_project(ME, "WEB")
    card = board.create_card(ME, "WEB", "nobody owns me")
    director = Actor(ActorKind.AGENT, authority.DIRECTOR, card.id, card.claim_epoch)
    impostor = Actor(ActorKind.AGENT, "worker", card.id, card.claim_epoch)
    refused(store, "FORBIDDEN", board.edit, impostor, card.ref, assignee="worker")
    refused(store, "FORBIDDEN", board.edit, director, card.ref, assignee="x", priority=0)
    assert board.edit(director, card.ref, assignee="worker").assignee == "worker"
    refused(store, "FORBIDDEN", board.edit, director, card.ref, assignee="reviewer")


def test_an_agent_creates_no_card_with_reserved_meta(store: Store) -> None:
    board = Board(store)
    board.add_project(ME, "WEB")
    refused(
        store,
        "FORBIDDEN",
        board.create_card,
        agent("pool-worker"),
        "WEB",
        "sneaky review",
        meta={"review_of": 1},
    )


# -- the human-only rule ----------------------------------------------------------------
def test_every_person_only_operation_refuses_an_agent_with_one_rule(world: World) -> None:
    from laneboard.board import schedules
    from laneboard.server import metrics

    b, s = world.board, world.store
    tokens = Tokens(s)
    _, info = tokens.create(ME, "spare")
    ops: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (b.add_project, ("EVIL",)),
        (b.set_project_config, ("WEB", {"workspace": "shared"})),
        (b.link, (world.mine.ref, world.other.ref)),
        (b.unlink, (world.mine.ref, world.dep.ref)),
        (tokens.create, ("minted", "human")),
        (tokens.revoke, (info.id,)),
        (tokens.list, ()),
        (
            lambda a: schedules.Schedules(s).remove(a, "nightly"),
            (),
        ),
    ]
    for actor in (world.worker, agent("pool-worker")):
        for fn, args in ops:
            msg = refused(s, "FORBIDDEN", fn, actor, *args)
            assert msg.startswith("only a person may "), msg
        refused(s, "FORBIDDEN", metrics.render, s, actor)
    token, _ = tokens.create(system(), "runtime-made", card_id=world.mine.id)  # the runtime
    assert token.startswith("lbt_")


def test_the_human_only_rule_is_written_once() -> None:
    """No surface or board part keeps its own copy of the rule."""
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        tree = ast.parse(text)
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not names & {"_human", "_human_only", "_human_or_system", "refuse_agent"}, path
        assert "agents may not" not in text, path


# -- the reserved meta keys -------------------------------------------------------------
def _consts(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name) and isinstance(node.value.value, str):
                    out[t.id] = node.value.value
    return out


def _keys(node: ast.expr | None, consts: dict[str, str]) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name) and node.id in consts:
        return {consts[node.id]}
    if isinstance(node, ast.IfExp):
        return _keys(node.body, consts) | _keys(node.orelse, consts)
    return set()


def _mentions_meta(node: ast.AST, aliases: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "meta":
            return True
        if isinstance(sub, ast.Name) and sub.id in aliases:
            return True
    return False


def _dict_keys(d: ast.Dict, consts: dict[str, str]) -> set[str]:
    return set().union(*(_keys(k, consts) for k in d.keys if k is not None))


def _is_meta(node: ast.expr) -> bool:
    """``X.meta``, ``dict(X.meta)`` or ``{**X.meta, ...}``: a card's meta, or a copy."""
    if isinstance(node, ast.Attribute):
        return node.attr == "meta"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return any(_is_meta(a) for a in node.args)
    if isinstance(node, ast.Dict):
        return any(_is_meta(v) for k, v in zip(node.keys, node.values, strict=True) if k is None)
    return False


def runtime_meta_keys(path: Path) -> set[str]:
    """Every ``meta`` key a module writes as a literal (see ``test_...covers...``)."""
    tree = ast.parse(path.read_text())
    consts = _consts(tree)
    found: set[str] = set()
    for scope in ast.walk(tree):
        if isinstance(scope, ast.FunctionDef):
            found |= _scope_meta_keys(scope, consts)
    return found


def _scope_meta_keys(scope: ast.FunctionDef, consts: dict[str, str]) -> set[str]:
    aliases = {"meta"}
    for node in ast.walk(scope):  # names bound to a card's meta in this function
        if isinstance(node, ast.Assign) and _is_meta(node.value):
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Dict):
            spread = [v for k, v in zip(node.keys, node.values, strict=True) if k is None]
            if any(_mentions_meta(v, aliases) for v in spread):
                found |= _dict_keys(node, consts)
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(v, ast.Dict) and _keys(k, consts) == {"meta"}:
                    found |= _dict_keys(v, consts)
        elif isinstance(node, ast.keyword) and node.arg in ("meta", "runtime_meta"):
            if isinstance(node.value, ast.Dict):
                found |= _dict_keys(node.value, consts)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in aliases and isinstance(node.value, ast.Dict):
                    found |= _dict_keys(node.value, consts)
                if (
                    isinstance(t, ast.Subscript)
                    and isinstance(t.value, ast.Name)
                    and t.value.id in aliases
                ):
                    found |= _keys(t.slice, consts)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr == "update" and isinstance(owner, ast.Name) and owner.id in aliases:
                found |= {k.arg for k in node.keywords if k.arg}
                for a in node.args:
                    if isinstance(a, ast.Dict):
                        found |= _dict_keys(a, consts)
        elif (
            isinstance(node, ast.Return)
            and "meta" in scope.name
            and isinstance(node.value, ast.Dict)
        ):
            found |= _dict_keys(node.value, consts)
    return found


def test_the_reserved_meta_keys_cover_every_key_the_runtime_writes() -> None:
    written: dict[str, set[str]] = {}
    for part in ("board", "supervisor", "workspace"):
        for path in sorted((SRC / part).rglob("*.py")):
            for key in runtime_meta_keys(path):
                written.setdefault(key, set()).add(str(path.relative_to(SRC)))
    # the scan sees every writer: workflow, holds, landing, questions, pool, handoffs...
    assert {
        "review_verdict",
        "loop_resume",
        "fix_of",
        "hold_cycle",
        "merge_commit",
        "answer_comment",
        "dispatch_failures",
        "handoff_consumed_round",
        "handoff_follow_ups",
        "handoff_from",
        "schedule",
        "released_key",
    } <= set(written)
    missing = {k: sorted(v) for k, v in written.items() if k not in authority.RESERVED_META}
    assert not missing, f"add these runtime-written keys to authority.RESERVED_META: {missing}"
    # and the set keeps no stale entry: each key is written by the runtime or steers it
    settings = authority.RESERVED_META_BY_WRITER["workflow settings"]
    assert authority.RESERVED_META - settings == set(written)
