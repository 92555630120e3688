"""The real Claude Code, Codex and Pi CLIs, driven through laneboard's adapters against the
scripted model server: a worker delivers through ``lb``, a second turn stays in the same
native session, a killed session resumes by id, an interrupt stops a hanging turn, and a
reviewer is refused a write."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from agent_kit import BoardSetup, Kind
from model_server import ModelServer, Reply

from laneboard.agents.base import AgentEvent, TurnResult
from laneboard.agents.registry import adapter_for
from laneboard.domain.roles import Role

WORKER = Role(
    id="worker",
    agent="claude",
    lanes=("worker",),
    title="Worker",
    responsibilities=("Implement the card.",),
)
REVIEWER = Role(
    id="reviewer",
    agent="claude",
    lanes=("reviewer",),
    title="Reviewer",
    boundaries=("Do not edit files.",),
)
TURN_S = 90.0


def test_worker_delivers_through_lb_then_a_second_turn_in_the_same_session(
    kind: Kind, server: ModelServer, repo: Path, tmp_path: Path, claimed_card: BoardSetup
) -> None:
    card = claimed_card.card
    deliver = (
        f"lb card report {card} --body 'Added feature.txt' --evidence '0:true' && "
        f"lb card move {card} in_review"
    )
    server.add(
        Reply(tool_calls=[kind.write(repo, "feature.txt", "hello from the lane\n")]),
        Reply(tool_calls=[kind.bash(deliver)]),
        Reply(text="Delivered WEB-1."),
        Reply(text="Second turn answer.", expect=("Delivered WEB-1.", "What did you do?")),
    )
    adapter = adapter_for(kind.name, kind.config(tmp_path))
    env = kind.env(token=claimed_card.token, card=card, url=claimed_card.board_url)
    assert "LANEBOARD_SECRET_THING" not in env and env["LANEBOARD_TOKEN"] == claimed_card.token
    session = adapter.open_session(str(repo), None, WORKER, env)
    try:
        opened_id = session.session_id
        assert opened_id  # known before the first turn
        events: list[AgentEvent] = []
        first = session.send(f"Work on card {card}.", timeout=TURN_S, on_event=events.append)
        assert first.ok, (first.error, server.errors)
        assert first.final_text.strip().endswith("Delivered WEB-1.")
        assert first.session_id == opened_id
        assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
        assert (repo / "feature.txt").read_text() == "hello from the lane\n"
        delivered = claimed_card.board.get(card)
        assert delivered.status.value == "in_review"
        reports = claimed_card.board.reports(card)
        assert [r.body for r in reports] == ["Added feature.txt"]
        assert reports[0].author == "worker"
        assert any(e.kind in ("tool_use", "command", "file_change") for e in events)
        pid = session.pid

        second = session.send("What did you do?", timeout=TURN_S)
        assert second.ok, (second.error, server.errors)
        assert second.final_text.strip() == "Second turn answer."
        assert session.pid == pid and session.alive()
        assert second.session_id == opened_id
    finally:
        session.close()
    assert server.errors == []
    assert server.served == 4


def test_a_killed_session_resumes_by_its_stored_id(
    kind: Kind, server: ModelServer, repo: Path, tmp_path: Path
) -> None:
    server.add(
        Reply(text="Remember the word PELICAN."),
        Reply(
            text="The word was PELICAN.",
            expect=("Remember the word PELICAN.", "Which word?", "First prompt here."),
        ),
    )
    adapter = adapter_for(kind.name, kind.config(tmp_path))
    env = kind.env()
    first = adapter.open_session(str(repo), None, WORKER, env)
    try:
        stored = first.session_id
        assert stored
        result = first.send("First prompt here.", timeout=TURN_S)
        assert result.ok, (result.error, server.errors)
        old_pid = first.pid
    finally:
        first.proc.kill()  # type: ignore[attr-defined]  # the adapter process dies
    assert not first.alive()

    resumed = adapter.open_session(str(repo), stored, WORKER, env)
    try:
        assert resumed.session_id == stored
        assert resumed.pid != old_pid
        again = resumed.send("Which word?", timeout=TURN_S)
        assert again.ok, (again.error, server.errors)
        assert again.final_text.strip() == "The word was PELICAN."
        assert again.session_id == stored
    finally:
        resumed.close()
    assert server.errors == []


def test_an_interrupt_stops_a_turn_hanging_on_the_model(
    kind: Kind, server: ModelServer, repo: Path, tmp_path: Path
) -> None:
    server.add(Reply(text="This reply never finishes", hang=True), Reply(text="Back again."))
    adapter = adapter_for(kind.name, kind.config(tmp_path))
    session = adapter.open_session(str(repo), None, WORKER, kind.env())
    out: list[TurnResult] = []
    try:
        runner = threading.Thread(
            target=lambda: out.append(session.send("Start something slow.", timeout=TURN_S))
        )
        runner.start()
        assert server.wait_hanging(60), server.errors
        session.interrupt()
        runner.join(60)
        assert not runner.is_alive()
        result = out[0]
        assert result.interrupted and not result.ok and not result.timed_out
        server.release()
        after = session.send("Are you there?", timeout=TURN_S)  # the stream stayed in step
        assert after.ok, (after.error, server.errors)
        assert after.final_text.strip() == "Back again."
    finally:
        server.release()
        session.close()
    assert server.errors == []


def test_a_reviewer_is_refused_writes(
    kind: Kind, server: ModelServer, repo: Path, tmp_path: Path
) -> None:
    server.add(
        Reply(tool_calls=[kind.write(repo, "review.txt", "not allowed\n")]),
        Reply(tool_calls=[kind.bash("echo sneaky > sneaky.txt")]),
        Reply(text="I could not write."),
    )
    adapter = adapter_for(kind.name, kind.config(tmp_path))
    session = adapter.open_session(str(repo), None, REVIEWER, kind.env())
    try:
        result = session.send("Write review.txt.", timeout=TURN_S)
    finally:
        session.close()
    assert result.ok, (result.error, server.errors)
    assert not (repo / "review.txt").exists()
    assert not (repo / "sneaky.txt").exists()
    assert server.errors == []
    # the model was told both attempts failed
    follow_ups = [json.dumps(e.body) for e in server.turns()[1:]]
    assert len(follow_ups) == 2
    if kind.name == "codex":  # and why: Codex itself would say only "rejected"
        assert "laneboard refused" in follow_ups[0] and "laneboard refused" in follow_ups[1]


def test_pi_retries_an_overloaded_model_within_the_turn_and_is_never_prompted_while_busy(
    server: ModelServer, repo: Path, tmp_path: Path
) -> None:
    """Pi ends a run whose model request failed, then retries it itself: the turn lasts
    until that retry ends, so the next prompt finds Pi idle (never "already processing")."""
    home = tmp_path / "home"
    home.mkdir()
    kind = Kind("pi", home, server)
    server.add(
        Reply(overloaded=True),
        Reply(text="Recovered after a retry."),
        Reply(text="Still here."),
    )
    adapter = adapter_for(kind.name, kind.config(tmp_path))
    session = adapter.open_session(str(repo), None, WORKER, kind.env())
    try:
        first = session.send("Do the work.", timeout=TURN_S)
        assert first.ok, (first.error, server.errors)
        assert first.final_text.strip() == "Recovered after a retry."
        assert "retry" in [e.kind for e in first.events]
        second = session.send("Are you there?", timeout=TURN_S)
        assert second.ok, (second.error, server.errors)
        assert second.final_text.strip() == "Still here."
    finally:
        session.close()
    assert server.errors == []
    assert len(server.turns()) == 3


def test_codex_is_told_why_laneboard_refused_an_approval(
    server: ModelServer, repo: Path, tmp_path: Path
) -> None:
    """Codex passes a declined approval to the model as "rejected" only: laneboard's
    reason (the role's command list) reaches the model too, within the same turn."""
    home = tmp_path / "home"
    home.mkdir()
    kind = Kind("codex", home, server)
    server.add(
        Reply(tool_calls=[kind.bash("curl -s http://127.0.0.1:9/")]),
        Reply(text="Understood.", expect=("laneboard refused", "not in this role's command list")),
    )
    adapter = adapter_for(kind.name, kind.config(tmp_path))
    session = adapter.open_session(str(repo), None, WORKER, kind.env())
    try:
        result = session.send("Fetch the page.", timeout=TURN_S)
    finally:
        session.close()
    assert server.errors == [], server.errors
    assert result.ok, result.error
    refused = [e for e in result.events if e.kind == "approval" and not e.data["allowed"]]
    assert refused and "curl" in json.dumps(refused[0].data["command"])


def test_codex_is_steered_within_its_running_turn(
    server: ModelServer, repo: Path, tmp_path: Path
) -> None:
    """A message steered into a running Codex turn (``turn/steer``) is in the model's next
    request of the same turn; with no turn running, ``steer`` refuses (the caller queues)."""
    home = tmp_path / "home"
    home.mkdir()
    kind = Kind("codex", home, server)
    server.add(
        Reply(tool_calls=[kind.bash("git status --short")], hold=True),
        Reply(text="Switched to the blue plan.", expect=("use the blue plan instead",)),
    )
    adapter = adapter_for(kind.name, kind.config(tmp_path))
    session = adapter.open_session(str(repo), None, WORKER, kind.env())
    out: list[TurnResult] = []
    try:
        assert not session.steer("nothing is running")
        runner = threading.Thread(
            target=lambda: out.append(session.send("Start the red plan.", timeout=TURN_S))
        )
        runner.start()
        assert server.wait_hanging(60), server.errors
        assert session.steer("from alice: use the blue plan instead")
        server.release()
        runner.join(TURN_S)
        assert not runner.is_alive()
    finally:
        server.release()
        session.close()
    assert server.errors == [], server.errors
    assert out and out[0].ok, out and out[0].error
    assert out[0].final_text.strip() == "Switched to the blue plan."
    assert len(server.turns()) == 2  # one turn: the steer did not start another
