"""Random sequences of board calls against a small, separately written model of the rules.

The model restates the product rules (transition table, claim windows, fencing,
acceptance authority) from the description, not from the domain code; after every
step the board's cards must match it (status, holder, epoch, heartbeat) and every
refusal must carry the code the model predicts, with nothing written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import Actor, agent, human, system
from laneboard.errors import LaneboardError
from laneboard.store import open_store

PG_BASE = os.environ.get("LANEBOARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
MIN = 60_000
HOUR = 60 * MIN

# The moves, written out again from the product description.
MOVES: dict[str, set[str]] = {
    "backlog": {"todo", "canceled"},
    "todo": {"backlog", "in_progress", "blocked", "canceled"},
    "in_progress": {"todo", "in_review", "awaiting", "blocked", "done", "canceled"},
    "awaiting": {"todo", "blocked", "canceled"},
    "blocked": {"todo", "backlog", "canceled"},
    "in_review": {"done", "in_progress", "todo", "blocked", "canceled"},
    "done": set(),
    "canceled": set(),
}
STATUSES = sorted(MOVES)
AGENTS = ("w0", "w1")
CLOSERS = ("w0", "w1", "system", "alice")
STEPS = [1, 4 * MIN, 9 * MIN, 10 * MIN, 31 * MIN, 5 * HOUR, 6 * HOUR]
WAITS = [0, 0, 0, *STEPS]  # a claim or heartbeat may first let some time pass


@dataclass
class ModelCard:
    ref: str
    id: int
    mode: str
    status: str
    holder: str | None = None
    assignee: str | None = None  # a claim assigns an unassigned card to its claimant
    epoch: int = 0
    beat: int | None = None
    since: int = 0  # when the card entered its status
    reported: bool = False
    verdict_author: str | None = None  # an APPROVE for round 1 written by this name
    known: dict[str, int] = field(default_factory=dict)  # agent -> last epoch it won

    @property
    def terminal(self) -> bool:
        return self.status in ("done", "canceled")


def make_pg_schema() -> tuple[str, str]:
    """A fresh PostgreSQL schema and the URL that selects it."""
    import psycopg

    schema = "lbs_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_BASE else "?"
    return schema, f"{PG_BASE}{sep}options=-csearch_path%3D{schema}"


def drop_pg_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Refused(Exception):
    def __init__(self, code: str) -> None:
        self.code = code


def superseded(c: ModelCard, epoch: int | None) -> None:
    """An agent credential of a claim the card has had since is refused, in any status."""
    if epoch is not None and epoch < c.epoch:
        raise Refused("STALE_CLAIM")


def fence(c: ModelCard, name: str, epoch: int | None) -> None:
    """An agent writing an in-progress card must hold it under the current epoch."""
    superseded(c, epoch)
    if c.status != "in_progress":
        return
    if epoch is not None and epoch != c.epoch:
        raise Refused("STALE_CLAIM")
    if c.holder is not None and c.holder != name:
        raise Refused("STALE_CLAIM")


def may_claim(c: ModelCard, who: str, now: int, human: bool) -> bool:
    if c.status == "todo":
        return c.assignee in (None, who) or human
    if c.status != "in_progress":
        return False
    if c.beat is None:  # sent back for rework: its holder at once, anyone after 6 h
        return c.holder == who or now - c.since >= 6 * HOUR
    age = now - c.beat
    return (c.holder == who and age >= 10 * MIN) or age >= 6 * HOUR


def may_close(c: ModelCard, kind: str, name: str) -> None:
    if c.status == "in_progress" and c.mode != "off":
        raise Refused("ACCEPTANCE_FORBIDDEN")
    if kind == "human" or c.mode == "off":
        return
    if c.mode == "human":
        raise Refused("ACCEPTANCE_FORBIDDEN")
    if c.verdict_author is None or c.verdict_author == name:
        raise Refused("ACCEPTANCE_FORBIDDEN")


class BoardMachine(RuleBasedStateMachine):
    backend = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.tmp = tempfile.mkdtemp(prefix="lb-stateful-")
        self.schema: str | None = None
        if self.backend == "sqlite":
            url = f"sqlite:///{self.tmp}/board.db"
        else:
            self.schema, url = make_pg_schema()
        self.store = open_store(url, self.clock)
        self.board = Board(self.store)
        self.cards: list[ModelCard] = []
        self.events = 0
        self.me = human("alice")
        self.board.add_project(self.me, "M")
        self.events += 1

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.schema is not None:
            drop_pg_schema(self.schema)

    # -- helpers ---------------------------------------------------------------------
    def actor(self, c: ModelCard, name: str) -> Actor:
        if name == "alice":
            return self.me
        if name == "system":
            return system("system")
        return agent(name, card_id=c.id, epoch=c.known.get(name))

    def kind(self, name: str) -> str:
        return {"alice": "human", "system": "system"}.get(name, "agent")

    def attempt(self, expected: str | None, fn: Any, *args: Any, **kw: Any) -> Any:
        """Run a board call; its outcome (success or refusal code) must match the model."""
        try:
            got = fn(*args, **kw)
        except LaneboardError as err:
            assert expected == err.code, f"model expected {expected}, board said {err.line()}"
            return None
        assert expected is None, f"model expected {expected}, the board accepted"
        return got

    def do_claim(self, c: ModelCard, name: str) -> None:
        now = self.clock.now_ms()
        ok = may_claim(c, name, now, self.kind(name) == "human")
        expected = None if ok else "CLAIM_CONFLICT"
        try:
            superseded(c, c.known.get(name) if self.kind(name) == "agent" else None)
        except Refused as r:
            expected = r.code
        got = self.attempt(expected, self.board.claim, self.actor(c, name), c.ref)
        if got is None:
            return
        if c.status != "in_progress":
            c.since = now
        c.status, c.holder, c.epoch, c.beat = "in_progress", name, c.epoch + 1, now
        c.assignee = c.assignee or name
        if self.kind(name) == "agent":
            c.known[name] = c.epoch
        self.events += 1

    # -- rules -----------------------------------------------------------------------
    @initialize(modes=st.lists(st.sampled_from(["off", "auto", "human"]), min_size=2, max_size=2))
    def create_cards(self, modes: list[str]) -> None:
        for i, mode in enumerate(modes):
            start = "backlog" if mode == "human" and i == 1 else "todo"
            card = self.board.create_card(
                self.me, "M", f"card {i}", acceptance_mode=mode, status=start
            )
            self.cards.append(ModelCard(card.ref, card.id, mode, start))
            self.events += 1

    @rule(i=st.integers(0, 1), name=st.sampled_from(AGENTS), wait=st.sampled_from(WAITS))
    def claim(self, i: int, name: str, wait: int) -> None:
        self.clock.advance(wait)
        self.do_claim(self.cards[i], name)

    @rule(i=st.integers(0, 1), name=st.sampled_from(AGENTS), wait=st.sampled_from(WAITS))
    def heartbeat(self, i: int, name: str, wait: int) -> None:
        self.clock.advance(wait)
        c = self.cards[i]
        try:
            fence(c, name, c.known.get(name))
            if c.status != "in_progress":
                raise Refused("STALE_CLAIM")
            expected = None
        except Refused as r:
            expected = r.code
        if self.attempt(expected, self.board.heartbeat, self.actor(c, name), c.ref) is not None:
            c.beat = self.clock.now_ms()
            self.events += 1

    @rule(i=st.integers(0, 1), name=st.sampled_from([*AGENTS, "alice"]))
    def report(self, i: int, name: str) -> None:
        c = self.cards[i]
        try:
            if self.kind(name) == "agent":
                fence(c, name, c.known.get(name))
            if c.terminal:
                raise Refused("ILLEGAL_TRANSITION")
            expected = None
        except Refused as r:
            expected = r.code
        if (
            self.attempt(expected, self.board.report, self.actor(c, name), c.ref, "delivered")
            is not None
        ):
            c.reported = True
            self.events += 1

    @rule(
        i=st.integers(0, 1),
        name=st.sampled_from(CLOSERS),
        dst=st.sampled_from([*STATUSES, "in_review", "done", "done"]),
    )
    def move(self, i: int, name: str, dst: str) -> None:
        c = self.cards[i]
        if dst == "in_progress" and c.status == "todo":  # a move into work is a claim
            self.do_claim(c, name)
            return
        try:
            if self.kind(name) == "agent":
                fence(c, name, c.known.get(name))
            if dst not in MOVES[c.status]:
                raise Refused("ILLEGAL_TRANSITION")
            if c.status == "in_progress" and dst == "in_review" and not c.reported:
                raise Refused("REPORT_REQUIRED")
            if dst == "done":
                may_close(c, self.kind(name), name)
            expected = None
        except Refused as r:
            expected = r.code
        got = self.attempt(
            expected,
            self.board.move,
            self.actor(c, name),
            c.ref,
            dst,
            reason="E2",
            question="which one?",
        )
        if got is None:
            return
        c.status, c.since = dst, self.clock.now_ms()
        c.beat = None
        if dst in ("todo", "backlog"):
            c.holder = None
        self.events += 1

    @rule(i=st.integers(0, 1), author=st.sampled_from(AGENTS))
    def approve(self, i: int, author: str) -> None:
        c = self.cards[i]
        verdict = {
            "review_verdict": "APPROVE",
            "review_verdict_round": 1,
            "review_verdict_author": author,
        }
        expected = "ILLEGAL_TRANSITION" if c.terminal else None
        if self.attempt(expected, self.board.edit, self.me, c.ref, meta=verdict) is not None:
            c.verdict_author = author
            self.events += 1

    @rule(i=st.integers(0, 1), name=st.sampled_from(["w0", "alice"]))
    def comment(self, i: int, name: str) -> None:
        c = self.cards[i]
        try:
            superseded(c, c.known.get(name) if self.kind(name) == "agent" else None)
            expected = None
        except Refused as r:
            expected = r.code
        if self.attempt(expected, self.board.comment, self.actor(c, name), c.ref, "a word") is None:
            return
        self.events += 1
        if name == "alice" and c.status == "awaiting":
            c.status, c.holder, c.beat = "todo", None, None
            c.since = self.clock.now_ms()
            self.events += 1

    @rule(step=st.sampled_from(STEPS))
    def advance(self, step: int) -> None:
        self.clock.advance(step)

    # -- the comparison --------------------------------------------------------------
    @invariant()
    def board_matches_model(self) -> None:
        for c in self.cards:
            card = self.board.get(c.ref)
            got = (
                card.status.value,
                card.holder,
                card.assignee,
                card.claim_epoch,
                card.heartbeat_at,
            )
            assert got == (
                c.status,
                c.holder,
                c.assignee,
                c.epoch,
                c.beat,
            ), c.ref
        with self.store.read() as tx:
            assert tx.scalar("SELECT count(*) FROM events") == self.events


class PostgresBoardMachine(BoardMachine):
    backend = "postgres"


COMMON: dict[str, Any] = dict(
    deadline=None,
    database=None,
    stateful_step_count=30,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_board_follows_the_model_on_sqlite() -> None:
    run_state_machine_as_test(BoardMachine, settings=settings(max_examples=250, **COMMON))


def test_board_follows_the_model_on_postgres() -> None:
    run_state_machine_as_test(PostgresBoardMachine, settings=settings(max_examples=30, **COMMON))
