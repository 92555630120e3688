"""Cards run through the real supervisor with each real agent CLI against the scripted model
server: the supervisor claims a card, the pool opens a Claude / Codex / Pi session in the
card's lane through the adapter, and the model's scripted tool calls work and deliver with
``lb``; the workflow pass accepts or reviews the delivery and the lanes landing merges it.

Board time moves only through the injected clock; the tests wait for real processes (with a
deadline), never for board time to pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from agent_kit import Kind
from model_server import ModelServer, Reply

from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.model import Card, human
from laneboard.store import Store, open_store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Supervisor
from laneboard.supervisor.runtime import Runtime

WAIT_S = 120.0
REVIEWER = "You are the reviewer for card"  # the reviewer's handoff: its own script


def wait_for(pred: Callable[[], bool], timeout: float, what: str, rig: Rig | None = None) -> None:
    """Wait for real processes to reach a state (never used to let board time pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (rig.describe() if rig else ""))


def group_gone(pgid: int) -> bool:
    """No process of the agent's process group is left (the agent and what it started)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    # zombies of a dead group are not processes that still run
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return False
    return True


class NowClock:
    """Real time plus any manual advance."""

    def __init__(self) -> None:
        self.offset = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset

    def advance(self, *, minutes: float) -> None:
        self.offset += int(minutes * 60_000)


@dataclass
class Rig:
    """A SQLite board with project WEB on a git repository, and the real supervisor."""

    kind: Kind
    server: ModelServer
    repo: Path
    tmp: Path
    clock: NowClock = field(default_factory=NowClock)
    turn_timeout: int = 30 * 60

    def data_dir(self) -> Path:
        return self.tmp / "data"  # the board's own directory (agents reach it through lb)

    def __post_init__(self) -> None:
        data = self.data_dir()
        data.mkdir(parents=True, exist_ok=True)
        self.store: Store = open_store(f"sqlite:///{data / 'board.db'}", self.clock)
        self.board = Board(self.store)
        self.me = human("alice")
        self.board.add_project(self.me, "WEB", path=str(self.repo))
        self.sup: Supervisor | None = None
        self.thread: threading.Thread | None = None

    def config(self) -> SupervisorConfig:
        base = SupervisorConfig(
            default_agent=self.kind.name,
            agent_kinds={self.kind.name: self.kind.config(self.tmp)},
            state_dir=str(self.tmp / "state"),
            event_poll_ms=50,
            debounce_ms=50,
        )
        return replace(base, time=replace(base.time, turn_timeout=self.turn_timeout)).validate()

    def start(self) -> Supervisor:
        cfg = self.config()
        rt = Runtime(self.store, cfg, "test-machine", LogFile(cfg.state_path("supervisor.log")))
        self.sup = Supervisor(rt)
        self.thread = threading.Thread(target=self.sup.run, daemon=True)
        self.sup.start()
        self.thread.start()
        return self.sup

    def stop(self) -> None:
        if self.sup is not None and self.thread is not None:
            self.sup.stop_event.set()
            self.thread.join(60)
            assert not self.thread.is_alive(), "the supervisor did not stop"
        self.sup = self.thread = None

    def card(self, title: str, **kw: Any) -> Card:
        return self.board.create_card(self.me, "WEB", title, **kw)

    def lane(self, card: Card) -> Path:
        return self.repo / ".worktrees" / card.ref

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with self.store.read() as tx:
            return [dict(r) for r in tx.all(sql, params)]

    def turns(self, card: Card) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM turns WHERE card_id = ? ORDER BY id", card.id)

    def queue(self, card: Card) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM queue WHERE card_id = ? ORDER BY id", card.id)

    def session(self, card: Card) -> dict[str, Any]:
        rows = self.rows("SELECT * FROM sessions WHERE card_id = ?", card.id)
        assert len(rows) == 1, rows
        return rows[0]

    def turn_pids(self, card: Card) -> list[int]:
        """The agent process of each turn, from the ``turn.started`` events."""
        rows = self.rows(
            "SELECT payload FROM events WHERE type = 'turn.started' AND card_id = ? ORDER BY id",
            card.id,
        )
        return [int(json.loads(r["payload"])["pid"]) for r in rows]

    def status(self, card: Card) -> str:
        return self.board.get(card.ref).status.value

    def wait_turns(self, card: Card, outcomes: int) -> list[dict[str, Any]]:
        """Wait until ``outcomes`` turns of the card have finished; return them all."""

        def finished() -> bool:
            return sum(t["outcome"] != "running" for t in self.turns(card)) >= outcomes

        wait_for(finished, WAIT_S, f"{outcomes} finished turns of {card.ref}", self)
        return self.turns(card)

    def wait_landed(self, card: Card) -> Card:
        wait_for(
            lambda: bool(self.board.get(card.ref).meta.get("merge_commit")),
            WAIT_S,
            f"{card.ref} accepted and landed",
            self,
        )
        return self.board.get(card.ref)

    def describe(self) -> str:
        """What the board, the queue and the model server show (for a failure message)."""
        lines = [
            "",
            *(
                f"card {c['id']}: {c['status']} {c['holder']}"
                for c in self.rows("SELECT * FROM cards ORDER BY id")
            ),
            *(
                f"turn {t['card_id']}: {t['outcome']} {t['error']!r} {t['final_text']!r}"
                for t in self.rows("SELECT * FROM turns ORDER BY id")
            ),
            *(
                f"queue {q['card_id']}: {q['state']} {q['last_error']!r} {q['payload']}"
                for q in self.rows("SELECT * FROM queue ORDER BY id")
            ),
            *(
                f"comment {c['card_id']} {c['kind']}: {c['body'][:300]}"
                for c in self.rows("SELECT * FROM comments ORDER BY id")
            ),
            *(
                f"log: {line}"
                for line in self.log_lines()
                if "level=warn" in line or "level=error" in line
            ),
            f"model server: served {self.server.served}, errors {self.server.errors}",
            *(f"model saw: {e.text[-600:]}" for e in self.server.log[-2:]),
        ]
        return "\n".join(lines)

    def log_lines(self) -> list[str]:
        path = self.tmp / "state" / "supervisor.log"
        return path.read_text().splitlines()[-20:] if path.exists() else []

    def git(self, *args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=self.repo, check=True, capture_output=True, text=True
        )
        return out.stdout.strip()


@pytest.fixture
def rig(
    kind: Kind, server: ModelServer, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    for key, value in kind.env().items():
        monkeypatch.setenv(key, value)  # the pool hands its own environment to the agent
    r = Rig(kind, server, repo, tmp_path)
    try:
        yield r
    finally:
        server.release()
        r.stop()
        r.store.close()


def assert_landed(rig: Rig, card: Card, files: dict[str, str]) -> None:
    """The card is done, its lane merged into the user's branch with the recorded commit
    (a lane without changes is already merged: the recorded commit is the branch head)."""
    done = rig.wait_landed(card)
    assert done.status.value == "done"
    assert rig.git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert rig.git("rev-parse", "main") == done.meta["merge_commit"]
    if files:
        assert f"lane/{card.ref}" in rig.git("log", "-1", "--format=%s", "main")
    for name, content in files.items():
        assert (rig.repo / name).read_text() == content
    assert rig.git("status", "--porcelain") == ""


def test_a_card_runs_through_the_supervisor_on_each_kind(rig: Rig) -> None:
    kind, server = rig.kind, rig.server
    card = rig.card("Deliver through the supervisor", acceptance_mode="off")
    deliver = (
        f"lb card report {card.ref} --body 'Delivered by {kind.name}' && "
        f"lb card move {card.ref} in_review"
    )
    server.add(
        Reply(tool_calls=[kind.bash(deliver)], expect=(card.ref,)),
        Reply(text=f"Delivered {card.ref}."),
    )
    rig.start()
    turns = rig.wait_turns(card, 1)
    assert_landed(rig, card, {})
    rig.stop()
    assert [t["outcome"] for t in turns] == ["ok"], server.errors
    assert [r.body for r in rig.board.reports(card.ref)] == [f"Delivered by {kind.name}"]
    assert rig.session(card)["native_id"]
    assert server.errors == []
    assert server.served >= 1


def test_a_lane_delivery_refused_answered_resumed_after_a_kill_and_landed(rig: Rig) -> None:
    """One card, three turns: the first works in the card's lane and its delivery is refused
    by the card's check, so it escalates; the answer resumes the same resident process; that
    process is killed mid-turn and the retry reopens the stored session id; the delivery is
    accepted (acceptance off) and landed on the user's branch."""
    kind, server, board = rig.kind, rig.server, rig.board
    card = rig.card(
        "Add the feature file and its changelog entry",
        acceptance_mode="off",
        checks=["test -f CHANGELOG.txt"],
    )
    ref, lane = card.ref, rig.lane(card)
    first_words = "Asked whether to add CHANGELOG.txt."
    answer = "Yes: add CHANGELOG.txt with one line."
    deliver = (
        f"lb card report {ref} --body 'feature.txt and CHANGELOG.txt added' "
        f"--evidence '0:test -f CHANGELOG.txt' && lb card move {ref} in_review"
    )
    server.add(
        # turn 1: the handoff names the lane
        Reply(
            tool_calls=[kind.write(lane, "feature.txt", "hello from the lane\n")],
            expect=(ref, str(lane)),
        ),
        Reply(
            tool_calls=[
                kind.bash(
                    f"lb card report {ref} --body 'feature.txt added' && "
                    f"lb card move {ref} in_review"
                )
            ]
        ),
        Reply(
            tool_calls=[
                kind.bash(
                    f"lb card move {ref} awaiting --reason E1 "
                    "--question 'The check needs CHANGELOG.txt, may I add it'"
                )
            ],
            expect=("VERIFICATION_FAILED",),  # the model saw the check refuse the delivery
        ),
        Reply(text=first_words),
        # turn 2: the same process, after the human's answer
        Reply(
            tool_calls=[kind.write(lane, "CHANGELOG.txt", "- feature.txt\n")],
            expect=(first_words, answer),
        ),
        Reply(hang=True),  # the process is killed here
        # turn 3: a new process on the stored session id (what the killed turn had not
        # saved yet may be lost; the earlier turns are not)
        Reply(tool_calls=[kind.bash(deliver)], expect=(first_words, "the previous turn failed")),
        Reply(text=f"Delivered {ref}."),
    )
    rig.start()

    # turn 1 edits in the lane (the project is a git repository), not the user's checkout
    wait_for(lambda: server.served >= 2, WAIT_S, "the first edit", rig)
    assert rig.status(card) == "in_progress"
    assert (lane / "feature.txt").read_text() == "hello from the lane\n"
    assert not (rig.repo / "feature.txt").exists()
    assert rig.git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert rig.git("-C", str(lane), "rev-parse", "--abbrev-ref", "HEAD") == f"lane/{ref}"
    lanes = rig.rows("SELECT path, branch, state FROM lanes WHERE card_id = ?", card.id)
    assert lanes == [{"path": str(lane), "branch": f"lane/{ref}", "state": "active"}]

    turns = rig.wait_turns(card, 1)
    wait_for(lambda: rig.status(card) == "awaiting", WAIT_S, "the escalation", rig)
    assert [t["outcome"] for t in turns] == ["ok"]
    first = rig.session(card)
    native, pid = first["native_id"], first["pid"]
    assert native and turns[0]["native_id"] == native and pid
    assert os.path.realpath(first["cwd"]) == os.path.realpath(lane)
    assert [r.body for r in board.reports(ref)] == ["feature.txt added"]  # move refused
    questions = [c.body for c in board.comments(ref) if c.kind.value == "question"]
    assert questions == ["The check needs CHANGELOG.txt, may I add it"]

    board.comment(rig.me, ref, answer)  # a human answer sends the card back to todo
    assert server.wait_hanging(WAIT_S), server.errors
    running = rig.turns(card)[-1]
    assert running["outcome"] == "running" and running["native_id"] == native
    assert rig.session(card)["pid"] == pid  # the resident process took the second turn
    assert rig.sup is not None
    assert [r["pid"] for r in rig.sup.pool.describe()["running"]] == [pid]
    assert (lane / "CHANGELOG.txt").read_text() == "- feature.txt\n"

    os.kill(pid, signal.SIGKILL)  # the agent's process dies mid-turn (only that process)
    rig.wait_turns(card, 2)
    server.release()  # the stalled response ends only after the turn did
    turns = rig.wait_turns(card, 3)
    assert_landed(
        rig,
        card,
        {"feature.txt": "hello from the lane\n", "CHANGELOG.txt": "- feature.txt\n"},
    )
    rig.stop()

    assert [t["outcome"] for t in turns] == ["ok", "failed", "ok"], [
        (t["outcome"], t["error"], t["prompt"][:300]) for t in turns
    ]
    assert "exited before the turn finished" in (turns[1]["error"] or "")
    assert {t["native_id"] for t in turns} == {native}
    last = rig.session(card)
    assert last["native_id"] == native and not last["resumed_by_replay"]
    assert last["pid"] is None and group_gone(pid)  # stopped: the record names no process
    pids = rig.turn_pids(card)
    assert pids[:2] == [pid, pid] and pids[2] != pid  # the retry ran in a new process
    assert len(pids) == 3 and group_gone(pids[2])
    rows = rig.queue(card)
    assert [(r["state"], r["recoveries"]) for r in rows] == [("done", 0), ("done", 1)]
    reports = board.reports(ref)
    assert [r.body for r in reports][-1] == "feature.txt and CHANGELOG.txt added"
    assert reports[-1].author == "worker"
    assert board.get(ref).meta.get("accepted_by") == "loop-auto"
    assert server.errors == [] and server.pending() == 0


def test_a_hanging_turn_is_cut_at_the_timeout_then_interrupted_by_shutdown_and_resumed(
    rig: Rig,
) -> None:
    """The model hangs: the turn timeout (on the injected clock) cuts the turn and closes its
    process; the retry reopens the stored session and hangs again; the supervisor shuts down,
    interrupting it; the next supervisor resumes the same session and the card completes."""
    kind, server = rig.kind, rig.server
    rig.turn_timeout = 20 * 60
    card = rig.card("Survive a hanging model", acceptance_mode="off")
    deliver = f"lb card report {card.ref} --body 'done after two hangs' && " + (
        f"lb card move {card.ref} in_review"
    )
    server.add(
        Reply(text="Thinking", hang=True, expect=(card.ref,)),
        Reply(text="Thinking again", hang=True, expect=("the previous turn timed_out",)),
        Reply(tool_calls=[kind.bash(deliver)], expect=("the supervisor restarted",)),
        Reply(text=f"Delivered {card.ref}."),
    )
    rig.start()
    assert server.wait_hanging(WAIT_S), server.errors
    first = rig.session(card)
    native, pid1 = first["native_id"], first["pid"]
    rig.clock.advance(minutes=21)  # past the 20-minute turn timeout
    assert server.wait_hanging(WAIT_S, count=2), server.errors

    turns = rig.turns(card)
    assert [t["outcome"] for t in turns] == ["timed_out", "running"]
    wait_for(lambda: group_gone(pid1), 30, "the timed-out agent's processes to end")
    pid2 = rig.session(card)["pid"]
    assert pid2 != pid1 and rig.session(card)["native_id"] == native

    rig.stop()  # shutdown interrupts the running turn
    turns = rig.turns(card)
    assert [t["outcome"] for t in turns] == ["timed_out", "interrupted"]
    wait_for(lambda: group_gone(pid2), 30, "the interrupted agent's processes to end")
    held = rig.board.get(card.ref)
    assert held.status.value == "in_progress" and held.holder == "worker"
    rows = rig.queue(card)
    assert [(r["state"], r["recoveries"]) for r in rows] == [("interrupted", 1)]
    assert rig.session(card)["state"] == "idle"

    rig.start()  # the next supervisor resumes the interrupted row in the same session
    turns = rig.wait_turns(card, 3)
    assert_landed(rig, card, {})
    rig.stop()
    assert [t["outcome"] for t in turns] == ["timed_out", "interrupted", "ok"]
    assert {t["native_id"] for t in turns} == {native}
    assert rig.session(card)["native_id"] == native
    assert [r.body for r in rig.board.reports(card.ref)] == ["done after two hangs"]
    assert server.errors == [] and server.pending() == 0


def test_a_reviewer_on_the_same_kind_is_refused_writes_then_approves(rig: Rig) -> None:
    """An ``auto`` card: the workflow pass hands its delivery to a reviewer running the same
    CLI in the card's lane; the reviewer's file write and shell redirect are refused, its
    APPROVE verdict (written with ``lb``) accepts the card and the card is landed."""
    kind, server, board = rig.kind, rig.server, rig.board
    card = rig.card("Add the feature file for review", acceptance=["feature.txt exists"])
    ref, lane = card.ref, rig.lane(card)
    review_ref = "WEB-2"  # the next card of the project: the review card
    server.add(
        Reply(tool_calls=[kind.write(lane, "feature.txt", "reviewed\n")], expect=(ref,)),
        Reply(
            tool_calls=[
                kind.bash(
                    f"lb card report {ref} --body 'feature.txt added' "
                    f"--evidence '0:test -f feature.txt' && lb card move {ref} in_review"
                )
            ]
        ),
        Reply(text=f"Delivered {ref}."),
    )
    verdict = (
        f"lb card report {review_ref} --body 'VERDICT: APPROVE' "
        f"--evidence '0:test -f feature.txt' && lb card move {review_ref} in_review"
    )
    server.add(
        Reply(tool_calls=[kind.write(lane, "review.txt", "not allowed\n")], expect=(ref,)),
        Reply(tool_calls=[kind.bash("echo sneaky > sneaky.txt")]),
        Reply(tool_calls=[kind.bash(verdict)]),
        Reply(text="Approved."),
        route=REVIEWER,
    )
    rig.start()
    done = rig.wait_landed(card)
    review = board.get(review_ref)
    wait_for(lambda: rig.status(review) == "done", WAIT_S, "the review card closed", rig)
    assert [t["outcome"] for t in rig.wait_turns(card, 1)] == ["ok"]
    assert [t["outcome"] for t in rig.wait_turns(review, 1)] == ["ok"]
    rig.stop()

    assert review.meta.get("review_of") == card.id
    assert rig.session(review)["role"] == "reviewer"
    assert os.path.realpath(rig.session(review)["cwd"]) == os.path.realpath(lane)
    for name in ("review.txt", "sneaky.txt"):
        assert not (lane / name).exists() and not (rig.repo / name).exists()
    verdicts = board.reports(review_ref)
    assert [(r.body, r.author) for r in verdicts] == [("VERDICT: APPROVE", "reviewer")]
    assert done.meta["accepted_by"] == "loop-review"
    assert done.meta["review_verdict"] == "APPROVE"
    assert_landed(rig, card, {"feature.txt": "reviewed\n"})
    assert len(server.turns(REVIEWER)) == 4 and server.errors == []
    assert server.pending() == 0 and server.pending(REVIEWER) == 0


BROKEN_TURN_ERROR = {
    "claude": "API Error",
    "codex": "stream disconnected",
    "pi": "pi gave up retrying the model",
}


def test_a_broken_model_stream_fails_the_turn_and_the_retry_delivers(rig: Rig) -> None:
    """The model's response breaks off mid-stream with a line that is not JSON: the turn fails
    with the agent's error recorded on the turn and the queue row, the card stays claimed by
    the same session, and the retry (same process, same session) delivers."""
    kind, server = rig.kind, rig.server
    card = rig.card("Deliver after a broken response", acceptance_mode="off")
    deliver = f"lb card report {card.ref} --body 'delivered after a broken stream' && " + (
        f"lb card move {card.ref} in_review"
    )
    broken = Reply(text="This reply breaks off", malformed="garbage")
    server.add(*[broken] * kind.requests_per_broken_reply)
    server.add(
        Reply(tool_calls=[kind.bash(deliver)], expect=("the previous turn failed",)),
        Reply(text=f"Delivered {card.ref}."),
    )
    rig.start()
    turns = rig.wait_turns(card, 2)
    assert_landed(rig, card, {})
    rig.stop()

    assert [t["outcome"] for t in turns] == ["failed", "ok"]
    error = turns[0]["error"] or ""
    assert BROKEN_TURN_ERROR[kind.name] in error, error
    rows = rig.queue(card)
    assert [(r["state"], r["recoveries"]) for r in rows] == [("done", 1)]
    assert BROKEN_TURN_ERROR[kind.name] in (rows[0]["last_error"] or "")
    assert turns[0]["native_id"] == turns[1]["native_id"] == rig.session(card)["native_id"]
    pids = rig.turn_pids(card)
    assert len(pids) == 2 and pids[0] == pids[1]  # the process outlived the model's error
    assert [r.body for r in rig.board.reports(card.ref)] == ["delivered after a broken stream"]
    assert server.errors == [] and server.pending() == 0


def test_the_transcript_of_a_real_cli_turn_has_the_one_shape(rig: Rig) -> None:
    """The real CLI's stream, through the supervisor, becomes the normalized transcript:
    the prompt, the lb call it made with its result, its message and the turn's end."""
    kind, server = rig.kind, rig.server
    card = rig.card("Show your work", acceptance_mode="off")
    deliver = f"lb card report {card.ref} --body 'shown' && lb card move {card.ref} in_review"
    server.add(
        Reply(tool_calls=[kind.bash(deliver)], expect=(card.ref,)),
        Reply(text=f"Delivered {card.ref} with a transcript."),
    )
    rig.start()
    rig.wait_turns(card, 1)
    rig.stop()
    got = rig.board.transcript(card.ref)
    types = [e["type"] for e in got["entries"]]
    assert types[0] == "prompt" and card.ref in got["entries"][0]["text"]
    call = next(e for e in got["entries"] if e["type"] == "lb")
    assert f"lb card report {card.ref}" in call["text"]
    assert "tool_result" in types[types.index("lb") :] or kind.name == "codex"
    messages = [e["text"] for e in got["entries"] if e["type"] == "message"]
    assert f"Delivered {card.ref} with a transcript." in messages
    assert types[-1] == "result" and got["turns"][0]["outcome"] == "ok"
    assert all(
        set(e) >= {"type", "text", "tool", "args", "output", "paths"} for e in got["entries"]
    )


def test_a_follow_up_steers_a_running_codex_turn_and_queues_for_other_kinds(rig: Rig) -> None:
    """``lb card tell`` during a turn: the supervisor steers it into a running Codex turn
    (the model's next request of that turn has it, and the follow-up is recorded as steered
    into that turn, not left for the next prompt); Claude Code and Pi cannot be steered, so
    it stays queued for the card's next turn."""
    kind, server = rig.kind, rig.server
    card = rig.card("Work on a plan", acceptance_mode="off")
    deliver = f"lb card report {card.ref} --body 'Planned' && lb card move {card.ref} in_review"
    steers = kind.name == "codex"
    if steers:  # Codex drops the sampling in flight and asks again with the steer
        server.add(
            Reply(text="Thinking about the red plan.", hold=True),
            Reply(tool_calls=[kind.bash(deliver)], expect=("use the blue plan instead",)),
            Reply(text="Delivered."),
        )
    else:
        server.add(
            Reply(tool_calls=[kind.bash(deliver)], expect=(card.ref,), hold=True),
            Reply(text="Delivered."),
        )
    rig.start()
    assert server.wait_hanging(WAIT_S), rig.describe()
    rig.board.tell(rig.me, card.ref, "use the blue plan instead")

    def followup() -> dict[str, Any]:
        return rig.rows("SELECT * FROM followups WHERE card_id = ?", card.id)[0]

    if steers:
        wait_for(lambda: followup()["turn_id"] is not None, WAIT_S, "the steer", rig)
    server.release()
    turns = rig.wait_turns(card, 1)
    rig.stop()
    assert [t["outcome"] for t in turns] == ["ok"], rig.describe()
    assert server.errors == [], server.errors
    got = followup()
    if steers:
        assert got["turn_id"] == turns[0]["id"] and got["steered_at"] is not None
        events = rig.rows("SELECT payload FROM events WHERE type = 'followup.steered'")
        assert json.loads(events[0]["payload"]) == {
            "turn": turns[0]["id"],
            "followups": [got["id"]],
        }
        assert "use the blue plan instead" not in turns[0]["prompt"]
    else:
        assert got["turn_id"] is None and got["steered_at"] is None
        assert rig.rows("SELECT id FROM events WHERE type = 'followup.steered'") == []
