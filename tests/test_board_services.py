"""Board services on both backends: every call, its event, and the rules it enforces."""

from __future__ import annotations

from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.clock import HOUR_MS, MINUTE_MS, FakeClock
from laneboard.domain.model import Actor, ActorKind, agent, human, system
from laneboard.errors import LaneboardError

ME = human("alice")
T0 = FakeClock().now_ms()


def refused(code: str, fn: Any, *args: Any, **kw: Any) -> LaneboardError:
    with pytest.raises(LaneboardError) as info:
        fn(*args, **kw)
    assert info.value.code == code, info.value.line()
    return info.value


def event_types(board: Board, card: str | None = None) -> list[str]:
    return [e.type for e in board.events(card=card, limit=10_000)]


@pytest.fixture
def web(board: Board) -> Board:
    board.add_project(ME, "WEB", "Website", "/srv/web", "main")
    return board


# -- projects ---------------------------------------------------------------------------
def test_projects_add_list_get(board: Board) -> None:
    p = board.add_project(ME, "WEB", "Website", "/srv/web", "main", config={"lanes": 2})
    assert p.to_dict() == {
        "id": p.id,
        "key": "WEB",
        "name": "Website",
        "path": "/srv/web",
        "base_ref": "main",
        "remote": None,
        "created_at": "2026-01-01T00:00:00.000Z",
    }
    q = board.add_project(ME, "API")
    assert q.name == "API" and q.path is None
    assert [x.key for x in board.projects()] == ["WEB", "API"]
    assert board.project("WEB") == p == board.project("Website") == board.project(p.id)
    assert board.project_config("WEB") == {"lanes": 2}
    assert board.project_config("API") == {}
    refused("NOT_FOUND", board.project, "NOPE")
    refused("CONFLICT", board.add_project, ME, "WEB")
    refused("CONFLICT", board.add_project, ME, "WEB2", "Website")
    refused("BAD_INPUT", board.add_project, ME, "web")
    refused("FORBIDDEN", board.add_project, agent("bot"), "BOT")
    assert event_types(board) == ["project.added", "project.added"]


# -- create, get, list, edit ------------------------------------------------------------
def test_create_fills_every_field_and_writes_one_event(web: Board, clock: FakeClock) -> None:
    dep = web.create_card(ME, "WEB", "Dependency")
    epic = web.create_card(ME, "WEB", "Epic", kind="epic")
    run_id = web.create_run(ME, "WEB", "the goal")["id"]
    clock.advance(minutes=1)
    c = web.create_card(
        ME,
        "WEB",
        "Fix login",
        description="details",
        parent=epic.ref,
        assignee="worker",
        priority=1,
        labels=["auth", "bug"],
        acceptance=["login works", {"id": "B", "text": "no 500s"}],
        acceptance_mode="human",
        checks=["pytest -q"],
        allowed_paths=["src/auth/"],
        status="backlog",
        depends_on=[dep.ref],
        meta={"origin": "test"},
        idempotency_key="k-1",
        run_id=run_id,
    )
    d = c.to_dict()
    assert d == {
        "id": c.id,
        "ref": "WEB-3",
        "project_id": web.project("WEB").id,
        "title": "Fix login",
        "description": "details",
        "kind": "task",
        "parent_id": epic.id,
        "status": "backlog",
        "assignee": "worker",
        "priority": 1,
        "labels": ["auth", "bug"],
        "acceptance": [{"id": "A1", "text": "login works"}, {"id": "B", "text": "no 500s"}],
        "acceptance_mode": "human",
        "delivery_round": 1,
        "checks": ["pytest -q"],
        "allowed_paths": ["src/auth"],
        "claim": {
            "holder": None,
            "actor_kind": None,
            "session_id": None,
            "claimed_at": None,
            "heartbeat_at": None,
            "epoch": 0,
        },
        "meta": {"origin": "test"},
        "idempotency_key": "k-1",
        "run_id": run_id,
        "depends_on": [dep.id],
        "status_since": "2026-01-01T00:01:00.000Z",
        "created_at": "2026-01-01T00:01:00.000Z",
        "updated_at": "2026-01-01T00:01:00.000Z",
        "version": 1,
    }
    ev = web.events(card=c.ref)
    assert [(e.type, e.actor, e.actor_kind, e.run_id) for e in ev] == [
        ("card.created", "alice", "human", run_id)
    ]
    assert ev[0].payload == {
        "ref": "WEB-3",
        "title": "Fix login",
        "status": "backlog",
        "assignee": "worker",
        "idempotency_key": "k-1",
    }


def test_create_refuses_bad_input_and_writes_nothing(web: Board) -> None:
    task = web.create_card(ME, "WEB", "Plain task")
    before = event_types(web)
    refused("BAD_INPUT", web.create_card, ME, "WEB", "  ")
    refused("BAD_INPUT", web.create_card, ME, "WEB", "t", kind="story")
    refused("BAD_INPUT", web.create_card, ME, "WEB", "t", acceptance_mode="maybe")
    refused("BAD_INPUT", web.create_card, ME, "WEB", "t", status="in_progress")
    refused("BAD_INPUT", web.create_card, ME, "WEB", "t", priority=4)
    refused("BAD_INPUT", web.create_card, ME, "WEB", "t", allowed_paths=["/etc"])
    refused("BAD_INPUT", web.create_card, ME, "WEB", "t", parent=task.ref)  # not an epic
    refused("NOT_FOUND", web.create_card, ME, "NOPE", "t")
    refused("NOT_FOUND", web.create_card, ME, "WEB", "t", depends_on=["WEB-99"])
    refused("FORBIDDEN", web.create_card, agent("bot", card_id=task.id, epoch=1), "WEB", "t")
    assert event_types(web) == before
    assert [c.ref for c in web.list_cards()] == [task.ref]
    # numbering did not advance for refused cards
    assert web.create_card(ME, "WEB", "next").ref == "WEB-2"


def test_idempotency_key_returns_first_card_until_terminal(web: Board) -> None:
    first = web.create_card(ME, "WEB", "Review WEB-1", idempotency_key="review:1:1")
    again = web.create_card(ME, "WEB", "something else", idempotency_key="review:1:1")
    assert again == first
    assert event_types(web).count("card.created") == 1
    canceled = web.move(ME, first.ref, "canceled")
    assert canceled.idempotency_key is None
    assert canceled.meta["released_key"] == "review:1:1"
    fresh = web.create_card(ME, "WEB", "Review WEB-1 again", idempotency_key="review:1:1")
    assert fresh.id != first.id and fresh.ref == "WEB-2"
    assert web.create_card(ME, "WEB", "x", idempotency_key="review:1:1") == fresh


def test_get_by_ref_id_and_case(web: Board) -> None:
    c = web.create_card(ME, "WEB", "one")
    assert web.get("WEB-1") == web.get("web-1") == web.get(c.id) == web.get(str(c.id)) == c
    err = refused("NOT_FOUND", web.get, "WEB-2")
    assert (
        err.line() == "error NOT_FOUND: card WEB-2 does not exist — list cards with: lb card list"
    )
    refused("BAD_INPUT", web.get, " ")


def test_list_filters(web: Board) -> None:
    web.add_project(ME, "API")
    epic = web.create_card(ME, "WEB", "epic", kind="epic")
    a = web.create_card(ME, "WEB", "a", assignee="worker", labels=["ui"], parent=epic.ref)
    b = web.create_card(ME, "WEB", "b", status="backlog", labels=["uix"])
    c = web.create_card(ME, "API", "c", assignee="reviewer")
    run_id = web.create_run(ME, "API", "the api's goal")["id"]
    d = web.create_card(ME, "API", "d", run_id=run_id)

    def refs(**kw: Any) -> list[str]:
        return [x.ref for x in web.list_cards(**kw)]

    assert refs() == [epic.ref, a.ref, b.ref, c.ref, d.ref]
    assert refs(project="API") == [c.ref, d.ref]
    assert refs(statuses=["backlog"]) == [b.ref]
    assert refs(statuses=["backlog", "todo"], project="WEB") == [epic.ref, a.ref, b.ref]
    assert refs(assignee="worker") == [a.ref]
    assert refs(unassigned=True) == [epic.ref, b.ref, d.ref]
    assert refs(assignee="reviewer", unassigned=True) == [epic.ref, b.ref, c.ref, d.ref]
    assert refs(label="ui") == [a.ref]
    assert refs(parent=epic.ref) == [a.ref]
    assert refs(run_id=run_id) == [d.ref]
    assert refs(limit=2) == [epic.ref, a.ref]
    refused("BAD_INPUT", web.list_cards, statuses=["doing"])
    refused("BAD_INPUT", web.list_cards, limit=0)
    refused("NOT_FOUND", web.list_cards, project="NOPE")


def test_edit_fields_merge_meta_and_bump_version(web: Board, clock: FakeClock) -> None:
    epic = web.create_card(ME, "WEB", "epic", kind="epic")
    c = web.create_card(ME, "WEB", "old", assignee="w", meta={"a": 1})
    clock.advance(seconds=5)
    e = web.edit(
        ME,
        c.ref,
        title="new",
        priority=0,
        labels=["x"],
        meta={"b": 2},
        assignee="",
        parent=epic.ref,
        acceptance=["works"],
    )
    assert (e.title, e.priority, e.labels, e.assignee, e.parent_id) == (
        "new",
        0,
        ("x",),
        None,
        epic.id,
    )
    assert e.meta == {"a": 1, "b": 2}
    assert [a.id for a in e.acceptance] == ["A1"]
    assert e.version == c.version + 1 and e.updated_at == c.updated_at + 5000
    ev = web.events(card=c.ref)[-1]
    assert ev.type == "card.edited"
    assert ev.payload == {
        "fields": ["acceptance", "assignee", "labels", "meta", "parent", "priority", "title"]
    }
    assert web.edit(ME, c.ref, parent=None).parent_id is None
    before = event_types(web)
    refused("BAD_INPUT", web.edit, ME, c.ref, status="done")
    refused("BAD_INPUT", web.edit, ME, c.ref)
    refused("BAD_INPUT", web.edit, ME, c.ref, parent=c.ref)
    refused("FORBIDDEN", web.edit, agent("w"), c.ref, acceptance_mode="off")
    web.move(ME, c.ref, "canceled")
    before = event_types(web)
    refused("ILLEGAL_TRANSITION", web.edit, ME, c.ref, title="late")
    assert event_types(web) == before


# -- moves and authority ----------------------------------------------------------------
def deliver(board: Board, actor: Actor, ref: str, **report: Any) -> None:
    board.report(actor, ref, "delivered", **report)
    board.move(actor, ref, "in_review")


def test_in_review_needs_a_report_for_the_current_round(web: Board) -> None:
    w = agent("worker")
    c = web.create_card(ME, "WEB", "t")
    web.claim(w, c.ref)
    err = refused("REPORT_REQUIRED", web.move, w, c.ref, "in_review")
    assert err.fix == "write one first: lb card report WEB-1 --body TEXT"
    deliver(web, w, c.ref)
    assert web.get(c.ref).status.value == "in_review"


@pytest.mark.parametrize("mode", ["off", "auto", "human"])
def test_acceptance_modes_on_the_board(web: Board, mode: str) -> None:
    w = agent("worker")
    c = web.create_card(ME, "WEB", "t", acceptance_mode=mode)
    web.claim(w, c.ref)
    web.report(w, c.ref, "r1")
    if mode == "off":  # the deliverer may close straight from in_progress
        assert web.move(w, c.ref, "done").status.value == "done"
        return
    refused("ACCEPTANCE_FORBIDDEN", web.move, ME, c.ref, "done")  # in_progress -> done
    web.move(w, c.ref, "in_review")
    refused("ACCEPTANCE_FORBIDDEN", web.move, w, c.ref, "done")
    refused("ACCEPTANCE_FORBIDDEN", web.move, system(), c.ref, "done")
    web.edit(
        ME,
        c.ref,
        meta={
            "review_verdict": "APPROVE",
            "review_verdict_round": 1,
            "review_verdict_author": "rev",
        },
    )
    if mode == "human":
        refused("ACCEPTANCE_FORBIDDEN", web.move, system(), c.ref, "done")
        assert web.move(ME, c.ref, "done").status.value == "done"
        return
    refused("ACCEPTANCE_FORBIDDEN", web.move, agent("rev"), c.ref, "done")  # its own verdict
    before = web.get(c.ref)
    web.edit(ME, c.ref, meta={"review_verdict_round": 2})
    refused("ACCEPTANCE_FORBIDDEN", web.move, system(), c.ref, "done")
    web.edit(ME, c.ref, meta={"review_verdict_round": before.delivery_round})
    assert web.move(system(), c.ref, "done").status.value == "done"


def test_awaiting_needs_reason_and_question_and_a_human_answer_reopens(web: Board) -> None:
    w = agent("worker")
    c = web.create_card(ME, "WEB", "t")
    web.claim(w, c.ref)
    before = event_types(web)
    refused("BAD_INPUT", web.move, w, c.ref, "awaiting", question="which db?")
    refused("BAD_INPUT", web.move, w, c.ref, "awaiting", reason="E6", question="which db?")
    refused("BAD_INPUT", web.move, w, c.ref, "awaiting", reason="E2")
    assert event_types(web) == before
    a = web.move(w, c.ref, "awaiting", reason="E2", question="which db?")
    q = web.comments(c.ref)[-1]
    assert (q.kind.value, q.body, q.author) == ("question", "which db?", "worker")
    assert a.meta["awaiting"] == {"reason": "E2", "comment": q.id}
    # an agent's comment does not reopen it
    web.comment(w, c.ref, "still waiting")
    assert web.get(c.ref).status.value == "awaiting"
    ans = web.comment(ME, c.ref, "use postgres", "answer")
    back = web.get(c.ref)
    assert (back.status.value, back.holder, back.session_id, back.heartbeat_at) == (
        "todo",
        None,
        None,
        None,
    )
    assert back.meta["answer_comment"] == ans.id
    moved = web.events(card=c.ref)[-1]
    assert (moved.type, moved.payload) == (
        "card.moved",
        {"ref": c.ref, "from": "awaiting", "to": "todo", "reason": "human answered", "round": 1},
    )


def test_move_idempotency_key_repeats_return_the_first_result(web: Board) -> None:
    c = web.create_card(ME, "WEB", "t")
    first = web.move(ME, c.ref, "blocked", reason="waits on vendor", idempotency_key="m1")
    assert first.meta["blocked"] == {"reason": "waits on vendor", "note": None}
    again = web.move(ME, c.ref, "blocked", idempotency_key="m1")
    assert again == first
    assert event_types(web).count("card.moved") == 1


# -- claims -----------------------------------------------------------------------------
def test_claim_heartbeat_release_with_fencing(web: Board, clock: FakeClock) -> None:
    c = web.create_card(ME, "WEB", "t")
    w1 = agent("w1")
    got = web.claim(w1, c.ref, session_id="s-1")
    assert (got.status.value, got.holder, got.holder_kind, got.claim_epoch, got.session_id) == (
        "in_progress",
        "w1",
        ActorKind.AGENT,
        1,
        "s-1",
    )
    assert got.claimed_at == got.heartbeat_at == clock.now_ms()
    refused("CLAIM_CONFLICT", web.claim, agent("w2"), c.ref)
    err = refused("CLAIM_CONFLICT", web.claim, w1, c.ref)
    assert "your own claim is still fresh" in err.message
    clock.advance(minutes=4)
    fenced = agent("w1", card_id=c.id, epoch=1)
    assert web.heartbeat(fenced, c.ref).heartbeat_at == clock.now_ms()
    # the same holder re-claims after 10 minutes without a heartbeat
    clock.advance(minutes=10)
    re = web.claim(w1, c.ref)
    assert re.claim_epoch == 2 and re.holder == "w1"
    assert not any(x.kind.value == "change" for x in web.comments(c.ref))
    # the old epoch is now fenced off
    refused("STALE_CLAIM", web.heartbeat, fenced, c.ref)
    refused("STALE_CLAIM", web.report, fenced, c.ref, "late")
    refused("STALE_CLAIM", web.move, fenced, c.ref, "in_review")
    refused("STALE_CLAIM", web.heartbeat, agent("w2"), c.ref)
    current = agent("w1", card_id=c.id, epoch=2)
    web.heartbeat(current, c.ref)
    released = web.release(current, c.ref, note="giving up")
    assert (released.status.value, released.holder, released.heartbeat_at) == ("todo", None, None)
    assert released.claim_epoch == 2
    refused("STALE_CLAIM", web.heartbeat, current, c.ref)  # no longer in progress
    assert web.comments(c.ref)[-1].body == "giving up"
    assert event_types(web, c.ref) == [
        "card.created",
        "card.claimed",
        "card.heartbeat",
        "card.claimed",
        "card.heartbeat",
        "card.moved",
    ]
    claimed = [e.payload for e in web.events(card=c.ref) if e.type == "card.claimed"]
    assert claimed[1] == {
        "ref": c.ref,
        "holder": "w1",
        "epoch": 2,
        "from": "in_progress",
        "takeover": False,
        "previous_holder": "w1",
    }


def test_takeover_after_six_hours_writes_a_change_comment(web: Board, clock: FakeClock) -> None:
    c = web.create_card(ME, "WEB", "t")
    web.claim(agent("w1"), c.ref)
    clock.advance(6 * HOUR_MS - 1)
    refused("CLAIM_CONFLICT", web.claim, agent("w2"), c.ref)
    clock.advance(1)
    took = web.claim(agent("w2"), c.ref)
    assert (took.holder, took.claim_epoch) == ("w2", 2)
    change = web.comments(c.ref)[-1]
    assert (change.kind.value, change.author) == ("change", "w2")
    assert change.body == f"w2 took over {c.ref} from w1 (heartbeat stale)"
    ev = web.events(card=c.ref)[-1]
    assert ev.payload["takeover"] is True and ev.payload["previous_holder"] == "w1"
    refused("STALE_CLAIM", web.report, agent("w1", card_id=c.id, epoch=1), c.ref, "mine")


def test_claim_respects_assignee_and_dependencies(web: Board) -> None:
    dep = web.create_card(ME, "WEB", "dep", acceptance_mode="off")
    c = web.create_card(ME, "WEB", "t", assignee="worker", depends_on=[dep.ref])
    err = refused("CLAIM_CONFLICT", web.claim, agent("worker"), c.ref)
    assert "a dependency is not done yet" in err.message
    web.claim(ME, dep.ref)
    web.move(ME, dep.ref, "done")
    refused("CLAIM_CONFLICT", web.claim, agent("other"), c.ref)
    assert web.claim(agent("worker"), c.ref).holder == "worker"
    b = web.create_card(ME, "WEB", "backlog", status="backlog")
    refused("CLAIM_CONFLICT", web.claim, ME, b.ref)
    # a human may claim an assigned card on behalf of its assignee
    d = web.create_card(ME, "WEB", "d", assignee="worker")
    assert web.claim(ME, d.ref, holder="worker").holder == "worker"
    refused("FORBIDDEN", web.claim, agent("x"), d.ref, holder="someone")


def test_move_to_in_progress_from_todo_is_a_claim(web: Board) -> None:
    c = web.create_card(ME, "WEB", "t")
    got = web.move(agent("w"), c.ref, "in_progress")
    assert (got.status.value, got.holder, got.claim_epoch) == ("in_progress", "w", 1)
    assert event_types(web, c.ref)[-1] == "card.claimed"


# -- agent credentials ------------------------------------------------------------------
def test_scoped_agent_cannot_write_another_card(web: Board) -> None:
    x = web.create_card(ME, "WEB", "x")
    y = web.create_card(ME, "WEB", "y")
    scoped = agent("w", card_id=x.id, epoch=1)
    web.claim(scoped, x.ref)
    web.heartbeat(scoped, x.ref)
    before = event_types(web)
    refused("FORBIDDEN", web.claim, scoped, y.ref)
    refused("FORBIDDEN", web.heartbeat, scoped, y.ref)
    refused("FORBIDDEN", web.comment, scoped, y.ref, "hi")
    refused("FORBIDDEN", web.report, scoped, y.ref, "r")
    refused("FORBIDDEN", web.move, scoped, y.ref, "blocked")
    refused("FORBIDDEN", web.edit, scoped, y.ref, title="z")
    refused("FORBIDDEN", web.link, scoped, x.ref, y.ref)
    assert event_types(web) == before
    assert web.get(y.ref).version == y.version


def test_tokens_resolve_to_agents_that_never_act_as_human(web: Board) -> None:
    tokens = Tokens(web.store)
    c = web.create_card(ME, "WEB", "t", acceptance_mode="human")
    other = web.create_card(ME, "WEB", "other", assignee="reviewer")
    raw, info = tokens.create(ME, "worker", card_id=c.id, epoch=1)
    assert raw.startswith("lbt_") and info.card_id == c.id and info.kind == "agent"
    actor = tokens.resolve(raw)
    assert actor == Actor(ActorKind.AGENT, "worker", c.id, 1)
    assert not actor.is_human
    web.claim(actor, c.ref)
    web.report(actor, c.ref, "done")
    web.move(actor, c.ref, "in_review")
    refused("ACCEPTANCE_FORBIDDEN", web.move, actor, c.ref, "done")
    refused("FORBIDDEN", web.add_project, actor, "EVIL")
    refused("FORBIDDEN", tokens.create, actor, "escalate", "human")
    refused("FORBIDDEN", web.claim, actor, other.ref)
    unscoped_raw, _ = tokens.create(ME, "reviewer-bot")
    unscoped = tokens.resolve(unscoped_raw)
    assert unscoped.kind is ActorKind.AGENT and unscoped.card_id is None
    refused("CLAIM_CONFLICT", web.claim, unscoped, other.ref)  # assigned to reviewer
    refused("FORBIDDEN", web.link, unscoped, other.ref, c.ref)
    human_raw, _ = tokens.create(ME, "bob", "human")
    assert tokens.resolve(human_raw) == human("bob")
    refused("UNAUTHORIZED", tokens.resolve, "lbt_unknown")
    tokens.revoke(ME, info.id)
    refused("UNAUTHORIZED", tokens.resolve, raw)
    refused("BAD_INPUT", tokens.create, ME, "x", "root")


def test_expired_token_is_refused(web: Board, clock: FakeClock) -> None:
    tokens = Tokens(web.store)
    raw, _ = tokens.create(ME, "temp", expires_at=clock.now_ms() + 1000)
    assert tokens.resolve(raw).name == "temp"
    clock.advance(1000)
    refused("UNAUTHORIZED", tokens.resolve, raw)


# -- comments, reports ------------------------------------------------------------------
def test_comment_kinds(web: Board) -> None:
    c = web.create_card(ME, "WEB", "t")
    kinds = ["note", "question", "answer", "decision", "confirm", "change", "finding"]
    for k in kinds:
        web.comment(ME, c.ref, f"a {k}", k)
    got = web.comments(c.ref)
    assert [(x.kind.value, x.body, x.author_kind.value) for x in got] == [
        (k, f"a {k}", "human") for k in kinds
    ]
    assert [x.body for x in web.comments(c.ref, after=got[4].id)] == ["a change", "a finding"]
    refused("BAD_INPUT", web.comment, ME, c.ref, "x", "rant")
    refused("BAD_INPUT", web.comment, ME, c.ref, "   ")
    assert event_types(web, c.ref).count("comment.added") == len(kinds)


def test_reports_per_round_with_evidence(web: Board, clock: FakeClock) -> None:
    w = agent("w")
    c = web.create_card(ME, "WEB", "t")
    web.claim(w, c.ref)
    r = web.report(
        w,
        c.ref,
        "first try",
        commit="abc123",
        evidence=[{"command": "pytest -q", "exit_code": 0, "digest": "sha256:1"}],
    )
    assert r.to_dict() == {
        "id": r.id,
        "card_id": c.id,
        "round": 1,
        "body": "first try",
        "commit": "abc123",
        "evidence": [
            {
                "command": "pytest -q",
                "exit_code": 0,
                "digest": "sha256:1",
                "summary": "",
                "log_path": None,
            }
        ],
        "author": "w",
        "author_kind": "agent",
        "created_at": "2026-01-01T00:00:00.000Z",
    }
    # a second report in the same round replaces the first
    r2 = web.report(w, c.ref, "second try")
    assert [x.body for x in web.reports(c.ref)] == ["second try"] and r2.round == 1
    ev = web.events(card=c.ref)[-1]
    assert (ev.type, ev.payload) == (
        "report.added",
        {"round": 1, "evidence": 0, "verdict": None},
    )
    # the worker's own card is not a review card: no verdict of its own work
    refused("ACCEPTANCE_FORBIDDEN", web.report, w, c.ref, "x", verdict="APPROVE")
    refused("BAD_INPUT", web.report, w, c.ref, "x", round_=2)
    refused("BAD_INPUT", web.report, w, c.ref, "x", verdict="MAYBE")
    web.move(w, c.ref, "in_review")
    web.move(ME, c.ref, "canceled")
    refused("ILLEGAL_TRANSITION", web.report, ME, c.ref, "after the end")


# -- links and epics --------------------------------------------------------------------
def test_links_form_a_dag(web: Board) -> None:
    a = web.create_card(ME, "WEB", "a")
    b = web.create_card(ME, "WEB", "b")
    c = web.create_card(ME, "WEB", "c")
    assert web.link(ME, a.ref, b.ref).depends_on == (b.id,)
    web.link(ME, b.ref, c.ref)
    web.link(ME, a.ref, b.ref)  # repeating a link changes nothing
    assert event_types(web).count("link.added") == 2
    before = event_types(web)
    err = refused("DEPENDENCY_CYCLE", web.link, ME, c.ref, a.ref)
    assert err.message == f"{c.ref} -> {a.ref} would close a cycle"
    refused("DEPENDENCY_CYCLE", web.link, ME, a.ref, a.ref)
    assert event_types(web) == before
    assert web.get(c.ref).depends_on == ()
    assert web.unlink(ME, a.ref, b.ref).depends_on == ()
    refused("NOT_FOUND", web.unlink, ME, a.ref, b.ref)
    assert web.link(ME, c.ref, a.ref).depends_on == (a.id,)  # now legal
    detail = web.card_detail(c.ref)
    assert detail["dependencies"] == [{"ref": a.ref, "status": "todo"}]


def test_epic_parent_rules(web: Board) -> None:
    epic = web.create_card(ME, "WEB", "epic", kind="epic")
    child = web.create_card(ME, "WEB", "child", parent=epic.ref)
    assert child.parent_id == epic.id
    task = web.create_card(ME, "WEB", "task")
    err = refused("BAD_INPUT", web.create_card, ME, "WEB", "x", parent=task.ref)
    assert err.message == f"{task.ref} is not an epic"
    refused("BAD_INPUT", web.edit, ME, child.ref, parent=task.ref)
    web.move(ME, epic.ref, "canceled")
    refused("BAD_INPUT", web.create_card, ME, "WEB", "late child", parent=epic.ref)


# -- candidates -------------------------------------------------------------------------
def test_candidates_filters_and_weight_order(web: Board, clock: FakeClock) -> None:
    old = web.create_card(ME, "WEB", "old")
    clock.advance(minutes=60)
    hub = web.create_card(ME, "WEB", "hub")
    for i in range(4):
        web.create_card(ME, "WEB", f"waits {i}", depends_on=[hub.ref])
    urgent = web.create_card(ME, "WEB", "urgent", priority=0)
    mine = web.create_card(ME, "WEB", "mine", assignee="worker")
    theirs = web.create_card(ME, "WEB", "theirs", assignee="reviewer")
    web.create_card(ME, "WEB", "parked", status="backlog")
    clock.advance(minutes=10)
    got = web.candidates()
    refs = [c.card.ref for c in got]
    # priority 0 first; then the hub (4 waiting = 120 min) over the older card (70 + 35)
    assert refs[:3] == [urgent.ref, hub.ref, old.ref]
    first = got[1].to_dict()
    assert first == {
        "ref": hub.ref,
        "id": hub.id,
        "title": "hub",
        "status": "todo",
        "assignee": None,
        "priority": 2,
        "weight": 10 + 5 + 120.0,
        "fanout": 4,
        "sla_pressure": 0.0,
        "sla_row": None,
        "stale": False,
    }
    assert got[2].weight == pytest.approx(70 + 35)
    assert theirs.ref not in refs and mine.ref not in refs
    assert [c.card.ref for c in web.candidates(assignees=["worker"])] == [mine.ref]
    with_unassigned = [
        c.card.ref for c in web.candidates(assignees=["worker"], include_unassigned=True)
    ]
    assert mine.ref in with_unassigned and urgent.ref in with_unassigned
    assert theirs.ref not in with_unassigned
    assert len(web.candidates(limit=2)) == 2


def test_candidates_stale_pool_opens_after_thirty_minutes(web: Board, clock: FakeClock) -> None:
    c = web.create_card(ME, "WEB", "t", assignee="worker")
    web.claim(agent("worker"), c.ref)
    clock.advance(30 * MINUTE_MS - 1)
    assert web.candidates(assignees=["worker"], stale=True) == []
    clock.advance(1)
    got = web.candidates(assignees=["worker"], stale=True)
    assert [(x.card.ref, x.stale, x.card.status.value) for x in got] == [
        (c.ref, True, "in_progress")
    ]
    assert web.candidates(assignees=["worker"]) == []  # not without --stale
    assert web.candidates(assignees=["other"], stale=True) == []


# -- events -----------------------------------------------------------------------------
def test_events_list_and_tail(web: Board, clock: FakeClock) -> None:
    web.add_project(ME, "API")
    a = web.create_card(ME, "WEB", "a")
    clock.advance(seconds=1)
    b = web.create_card(ME, "API", "b")
    web.comment(ME, a.ref, "hi")
    all_ev = web.events()
    ids = [e.id for e in all_ev]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [e.type for e in all_ev] == [
        "project.added",
        "project.added",
        "card.created",
        "card.created",
        "comment.added",
    ]
    assert [e.type for e in web.events(after=ids[2])] == ["card.created", "comment.added"]
    assert [e.type for e in web.events(card=a.ref)] == ["card.created", "comment.added"]
    assert [e.card_id for e in web.events(project="API")] == [None, b.id]
    assert [e.id for e in web.events(limit=2)] == ids[:2]
    assert [e.id for e in web.last_events(2)] == ids[-2:]
    assert [e.type for e in web.last_events(1, card=a.ref)] == ["comment.added"]
    assert all_ev[3].to_dict() == {
        "id": ids[3],
        "cursor": all_ev[3].cursor,
        "at": "2026-01-01T00:00:01.000Z",
        "type": "card.created",
        "card_id": b.id,
        "project_id": web.project("API").id,
        "run_id": None,
        "actor": "alice",
        "actor_kind": "human",
        "payload": {
            "ref": "API-1",
            "title": "b",
            "status": "todo",
            "assignee": None,
            "idempotency_key": None,
        },
    }
