"""The deterministic runtime of an orchestrated run: it, not the model, decides what is done.

``Driver.run`` continues a run from what the store holds. It wakes the coordinator with
what happened (its first turn gets the goal), dispatches each ready assignment's
revision once into a fresh lane, and after every specialist turn decides from the
board: a reported revision is verified (scope, checks) and integrated before it counts
as completed; a question makes the assignment wait for the coordinator's answer, which
then resumes the same specialist session; anything else is reported to the coordinator.
When the coordinator's ``complete`` is accepted, the combined change is checked and
published (``orchestrate_git``). Every dispatched turn is recorded before it starts and
counted against the run's budgets; after a crash a turn left dispatched is uncertain and
is never replayed (``Runtime.interrupted``). Specialist turns run on worker threads, at
most ``max_active_specialists`` at once and one per role; what an ended turn leads to is
decided on the driver's thread, so verification and integration happen one at a time.
A coordinator's ``update`` for an assignment whose turn is running is steered into that
turn where the session supports it (``Steerable``: Codex ``turn/steer``), counted as a
model call; otherwise it waits for the assignment's next turn.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from laneboard.agents import check_sandbox
from laneboard.board.orchestrate import Orchestration, Orchestrations
from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.domain import assignments as asg
from laneboard.domain import budgets as bud
from laneboard.domain import orchestrate_prompts as prompts
from laneboard.domain.assignments import COORDINATOR, Assignment, AState
from laneboard.domain.model import CommentKind
from laneboard.errors import LaneboardError
from laneboard.supervisor.orchestrate_agents import Sessions
from laneboard.supervisor.orchestrate_git import Workspace
from laneboard.workspace.patch import GoalStart

OPEN = frozenset({AState.QUEUED, AState.RUNNING, AState.WAITING_FOR_INPUT})
MAX_IDLE_WAKES = 2  # coordinator turns in a row that change nothing before the run stalls
STEER_RETRY_S = 0.3  # how soon a message not yet steered into a running turn is tried again


@dataclass(frozen=True)
class Ended:
    """What a specialist turn left for the driver's thread to decide."""

    lane_dir: str
    base: str
    error: str | None
    clarified: str | None = None  # a clarification turn's reply, for the coordinator


@dataclass
class Progress:
    """What the driver tells the person watching (``lb orchestrate`` prints it)."""

    say: Callable[[str], None] = field(default=lambda _line: None)


class Driver:
    def __init__(self, board: Board, run_id: int, sessions: Sessions,
                 progress: Progress | None = None) -> None:  # fmt: skip
        self.board = board
        self.run_id = run_id
        self.orch = Orchestrations(board)
        self.rt = Runtime(board)
        self.sessions = sessions
        self.say = (progress or Progress()).say
        self.notes: list[str] = []
        self.idle = 0
        self.late: set[tuple[str, int]] = set()
        self.running: dict[str, tuple[str, futures.Future[Ended]]] = {}
        self.pool = futures.ThreadPoolExecutor(thread_name_prefix=f"run{run_id}-specialist")

    # -- the run -----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        o = self.orch.get(self.run_id)
        if o.phase in ("completed", "failed") and o.result is not None:
            return o.result  # a finished goal: its stored result, no agent starts
        if o.phase == "publishing":
            raise LaneboardError(
                "PUBLICATION_UNCERTAIN",
                f"run {self.run_id} was interrupted while publishing",
                f"inspect {o.integration_dir} (verified.patch) and the checkout before "
                "applying anything by hand; the run does not resume on its own",
            )
        start = GoalStart.from_dict(o.start)
        checks = check_sandbox.for_config(self.sessions.config, self.board.store.url)
        ws = Workspace(start, self.run_id, o.integration_dir, checks)
        self.rt.integration(self.run_id, ws.integration.work_dir, ws.integration.head())
        for name in self.rt.interrupted(self.run_id):
            self.note(f"{name} was interrupted mid-turn: its effects are uncertain; inspect "
                      "its lane and record recover (retry, keep or cancel)")  # fmt: skip
        try:
            return self._loop(ws)
        except LaneboardError as err:
            if err.code != "BUDGET_EXHAUSTED":
                raise
            return self._fail(ws, f"budget_exhausted:{err.details.get('budget')}")
        finally:
            self.sessions.close()  # ends any turn still running
            self.pool.shutdown(wait=True)

    def _loop(self, ws: Workspace) -> dict[str, Any]:
        while True:
            o = self.orch.get(self.run_id)
            if o.phase == "completing":
                done = self._publish(ws, o)
                if done is not None:
                    return done
                continue
            which = bud.exhausted(o.budgets, o.usage)
            if which is not None and not self.running:  # turns under way end first
                return self._fail(ws, f"budget_exhausted:{which}")
            if which is not None:
                self._step(ws, o, start=False)  # collects (or waits for) running turns
                continue
            self._deadlines()
            if self.notes or not self._coordinated():
                self._debounce(ws, o)
                self._coordinate(o)
                continue
            if not self._step(ws, o):
                self.idle += 1
                if self.idle > MAX_IDLE_WAKES:
                    return self._fail(ws, "stalled: nothing is ready, running or waiting, and "
                                          "the coordinator changed nothing")  # fmt: skip
                self.note("nothing is ready or running: assign, revise, recover or complete")

    def _debounce(self, ws: Workspace, o: Orchestration) -> None:
        """Before waking the coordinator, give turns under way up to ``debounce_ms`` to end,
        so a burst of outcomes reaches it as one wake-up."""
        if not self.notes or not self.running or o.budgets.debounce_ms <= 0:
            return
        futures.wait([f for _o, f in self.running.values()],
                     timeout=o.budgets.debounce_ms / 1000)  # fmt: skip
        self._collect(ws, o)

    def _deadlines(self) -> None:
        """Tell the coordinator, once per revision, about work past its deadline."""
        now = self.board.store.clock.now_ms()
        for a in self.orch.plan(self.run_id).values():
            late = a.deadline_at is not None and now > a.deadline_at
            if late and a.state in OPEN and (a.name, a.revision) not in self.late:
                self.late.add((a.name, a.revision))
                self.note(f"{a.name} revision {a.revision} is past its deadline ({a.state}): "
                          "revise, cancel or let it finish")  # fmt: skip

    def note(self, line: str) -> None:
        self.notes.append(line)
        self.say(f"  · {line}")

    def _coordinated(self) -> bool:
        return any(t["role"] == COORDINATOR for t in self.rt.turns(self.run_id))

    # -- the coordinator ---------------------------------------------------------------
    def _coordinate(self, o: Orchestration) -> None:
        first = not self._coordinated()
        if first:
            prompt = prompts.coordinator_start(o.goal, o.allowed, o.checks)
        else:
            prompt = prompts.coordinator_wake(self.notes)
        self.notes = []
        before = self._fingerprint()
        assert o.coordinator_card_id is not None
        card = self.board.get(o.coordinator_card_id)
        cwd = os.path.join(os.path.dirname(o.integration_dir or "."), "coordinator")
        os.makedirs(cwd, exist_ok=True)
        turn = self.rt.dispatch(self.run_id, COORDINATOR, "coordinate")
        self.say(f"coordinator turn {turn}")
        done = self.sessions.run_turn(COORDINATOR, card, cwd, prompt)
        self.rt.end_turn(self.run_id, turn, done.result.ok, done.output_bytes,
                         done.elapsed_ms, done.result.error or "")  # fmt: skip
        if not done.result.ok:
            self.note(f"your last turn failed: {done.result.error}")
        if self._fingerprint() != before:
            self.idle = 0
            self._print_plan()
        self._steer_updates()

    def _fingerprint(self) -> Any:
        o = self.orch.get(self.run_id)
        plan = self.orch.plan(self.run_id)
        return o.phase, [(a.name, a.revision, a.state, a.uncertain) for a in plan.values()]

    def _print_plan(self) -> None:
        for a in self.orch.plan(self.run_id).values():
            deps = f" after {', '.join(a.deps)}" if a.deps else ""
            self.say(f"  plan: {a.name} r{a.revision} {a.state} ({a.owner}: "
                     f"{', '.join(a.paths)}{deps})")  # fmt: skip

    # -- specialists -------------------------------------------------------------------
    def _step(self, ws: Workspace, o: Orchestration, *, start: bool = True) -> bool:
        """Collect ended specialist turns, start new ones up to the active limit (answered
        questions first, then ready work, one turn per role), or wait for one to end.
        False: nothing runs and nothing could start."""
        if self._collect(ws, o):
            return True
        slots = bud.slots(o.budgets, len(self.running)) if start else 0
        busy = {owner for owner, _f in self.running.values()}
        plan = self.orch.plan(self.run_id)
        answered = [a for a in plan.values() if a.state is AState.RUNNING
                    and a.detail.startswith("answered in comment")]  # fmt: skip
        clarify = [a for a in plan.values() if a.state is AState.COMPLETED and a.messages]
        started = False
        for a in [*answered, *asg.ready(plan), *clarify]:
            if slots <= 0:
                break
            if a.name in self.running or a.owner in busy:
                continue
            purpose = "answer" if a in answered else "clarify" if a in clarify else "work"
            self._start(ws, o, a, purpose)
            busy.add(a.owner)
            slots -= 1
            started = True
        if started:
            return True
        if self.running:
            # while a message waits to be steered into a running turn, look again soon
            retry = STEER_RETRY_S if self._steer_updates() else None
            futures.wait([f for _o, f in self.running.values()], timeout=retry,
                         return_when=futures.FIRST_COMPLETED)  # fmt: skip
            self._collect(ws, o)
            return True
        return False

    def _steer_updates(self) -> bool:
        """Steer the coordinator's queued messages (``update``) into the running turns of
        their assignments, where the kind supports it (Codex ``turn/steer``); each accepted
        steer counts as a model call. A kind that cannot be steered keeps them for its
        next turn. True while some message could still be steered (its turn's session is
        opening, or its turn is between model calls)."""
        pending = False
        plan = self.orch.plan(self.run_id)
        for name, (owner, fut) in list(self.running.items()):
            a = plan.get(name)
            if a is None or not a.messages or a.card_id is None or fut.done():
                continue
            o = self.orch.get(self.run_id)
            if bud.exhausted(o.budgets, o.usage) is not None:
                return False  # a steer is a model call: the budget is used up
            sent = self.sessions.steer(owner, a.card_id, prompts.messages(a).strip())
            if sent is None:
                continue
            if not sent:
                pending = True
                continue
            self.rt.steered(self.run_id, name, len(a.messages))
            self.say(f"{owner}: {len(a.messages)} message(s) steered into its running turn")
        return pending

    def _start(self, ws: Workspace, o: Orchestration, a: Assignment, purpose: str) -> None:
        """Record the turn (counted against the budgets), then run it on a worker thread."""
        assert a.card_id is not None
        card = self.board.get(a.card_id)
        if purpose == "work":
            branch, lane_dir, base = ws.lane(card.ref, a.revision)
            self.rt.lane(self.run_id, a, branch, lane_dir, base)
            prompt = prompts.specialist_work(a, lane_dir, a.owner)
            what = f"{a.name} revision {a.revision} (lane {branch})"
        else:
            rev = {r["revision"]: r for r in self.rt.revisions(a.card_id)}.get(a.revision, {})
            lane_dir, base = str(rev.get("lane_dir") or ""), str(rev.get("base") or "")
            if purpose == "clarify":
                prompt = prompts.specialist_clarify(a)
                what = f"{a.name} answers a clarification (read-only)"
            else:
                answer = self._last(a.card_id, CommentKind.ANSWER)
                prompt = prompts.specialist_answer(a, answer[1] if answer else "")
                what = f"{a.name} gets the answer"
        turn = self.rt.dispatch(self.run_id, a.owner, purpose, a)
        self.say(f"{a.owner}: {what} (turn {turn})")

        def run() -> Ended:
            head = ws.lane_head(lane_dir) if purpose == "clarify" else ""
            done = self.sessions.run_turn(a.owner, card, lane_dir, prompt)
            self.rt.end_turn(self.run_id, turn, done.result.ok, done.output_bytes,
                             done.elapsed_ms, done.result.error or "")  # fmt: skip
            if purpose != "clarify":
                return Ended(lane_dir, base, done.result.error)
            changed = ws.restore_lane(lane_dir, head)  # read-only: any change is discarded
            reply = done.result.final_text.strip()[:2000] or "(no reply)"
            extra = " (the files it changed were discarded)" if changed else ""
            return Ended(lane_dir, base, done.result.error,
                         f"{a.name}'s owner {a.owner} answers: {reply}{extra}")  # fmt: skip

        self.running[a.name] = (a.owner, self.pool.submit(run))

    def _collect(self, ws: Workspace, o: Orchestration) -> bool:
        """Decide what each ended specialist turn leads to, in the order they were started."""
        ended = [n for n, (_o, f) in self.running.items() if f.done()]
        for name in ended:
            _owner, fut = self.running.pop(name)
            e = fut.result()
            if e.clarified is not None:  # a clarification turn decides nothing
                self.note(e.clarified)
            else:
                self._after(ws, o, name, e.lane_dir, e.base, e.error)
        return bool(ended)

    def _last(self, card_id: int, kind: CommentKind) -> tuple[int, str] | None:
        with self.board.store.read() as tx:
            found = [c for c in tx.comments(card_id) if c.kind is kind]
        return (found[-1].id, found[-1].body) if found else None

    def _after(self, ws: Workspace, o: Orchestration, name: str, lane_dir: str, base: str,
               error: str | None) -> None:  # fmt: skip
        """What a finished specialist turn leads to, decided from the board."""
        a = self.orch.plan(self.run_id)[name]
        assert a.card_id is not None
        question = self._last(a.card_id, CommentKind.QUESTION)
        answer = self._last(a.card_id, CommentKind.ANSWER)
        failed = f" (the turn failed: {error})" if error else ""
        if a.state is AState.RUNNING and a.reported == a.revision:
            timeout = float(o.budgets.check_timeout_secs)
            v = ws.verify(a, lane_dir, base, timeout)
            if v.ok:
                self.rt.verified(self.run_id, name, a.revision, v.evidence, v.head)
                self.say(f"  verified: {name} revision {a.revision} integrated at {v.head[:12]}")
                self.note(f"{name} revision {a.revision} is verified and integrated")
            else:
                self.rt.rejected(self.run_id, name, a.revision, v.reason, v.evidence)
                self.say(f"  refused: {name} revision {a.revision}: {v.reason}")
                self.note(f"{name} revision {a.revision} failed verification: {v.reason}")
        elif (
            question is not None
            and (answer is None or answer[0] < question[0])
            and (a.state is AState.RUNNING)
        ):
            self.rt.waiting(self.run_id, name, question[1])
            self.note(f"{name} asks: {question[1]} (answer it with verb answer)")
        elif a.state is AState.FAILED:
            self.note(f"{name} failed: {a.detail}")
        else:
            self.note(f"{name}'s turn ended without a report (revision {a.revision}, "
                      f"{a.state}){failed}")  # fmt: skip

    # -- the end -----------------------------------------------------------------------
    def _publish(self, ws: Workspace, o: Orchestration) -> dict[str, Any] | None:
        mode = str(o.spec.get("publish") or "patch")
        self.rt.phase(self.run_id, "publishing")
        res = ws.publish(o.checks, o.allowed, float(o.budgets.check_timeout_secs), mode)
        result = {"run": self.run_id, "publish": mode, **res.to_dict()}
        if res.patch_path is None and not res.applied:  # the combined change failed a check
            self.rt.phase(self.run_id, "running", res.reason)
            self.note(f"the combined change was refused: {res.reason}; the checkout is "
                      "unchanged — revise the assignments concerned")  # fmt: skip
            return None
        phase = "completed" if res.applied else "failed"
        reason = None if res.applied else f"publication refused: {res.reason}"
        self.rt.phase(self.run_id, phase, reason, result)
        self.say(("published: " if res.applied else "not published: ") + res.reason)
        self._end(ws, remove_lanes=True)
        return result

    def _fail(self, ws: Workspace, reason: str) -> dict[str, Any]:
        self.sessions.close()  # stop the agents; every lane, patch and log stays
        o = self.orch.get(self.run_id)
        result = {"run": self.run_id, "applied": False, "reason": reason,
                  "work_dir": o.integration_dir, "integrated_head": o.integration_head}  # fmt: skip
        self.rt.phase(self.run_id, "failed", reason, result)
        self.say(f"failed: {reason}")
        self._end(ws, remove_lanes=False)
        return result

    def _end(self, ws: Workspace, *, remove_lanes: bool) -> None:
        lanes: list[str] = []
        if remove_lanes:
            for a in self.orch.plan(self.run_id).values():
                if a.card_id is not None:
                    lanes += [str(r["lane_dir"] or "") for r in self.rt.revisions(a.card_id)]
        ws.finish(lanes)
