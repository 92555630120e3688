"""The poll pass — the cost gate: pool → candidates → budget → admit → brief → claim → enqueue.

Cards of a run that is not active or degraded are not claimed (a paused, stopping or
ended run takes no new claims); under ``lb run`` only the run's own cards are. Nothing
before the claim writes the card; a failure there defers it unclaimed. A
card-scoped failure is counted (backoff 30 s doubling to 1 h from the 3rd, hold at the
5th). The claim and the handoff row are one transaction.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from laneboard.board.service import Candidate
from laneboard.config import project_cap
from laneboard.domain.clock import HOUR_MS, MINUTE_MS
from laneboard.domain.model import Card, CardKind, CommentKind, Project
from laneboard.domain.runs import CLAIMING
from laneboard.errors import LaneboardError
from laneboard.store.tx import Tx
from laneboard.supervisor import admission_alerts, boundary, director, instances, records
from laneboard.supervisor.alerts import clear_alert, raise_alert
from laneboard.supervisor.holds import place_hold
from laneboard.supervisor.outcomes import dispatch_backoff_ms
from laneboard.supervisor.runtime import Runtime
from laneboard.workspace.admit import AdmissionError
from laneboard.workspace.brief import write_brief
from laneboard.workspace.lane_admit import LaneAdmitter

BACKOFF_FROM = 3
# while a resident pool runs here, nobody raises its absence: its alert is read this often
ABSENCE_READ_MS = 60_000
REREAD_MS = 50  # a candidate is read again before its admission after this long
SPREAD = 2  # after a lost claim: the next candidates its budget covers, and this many more,
_rng = random.Random()  # are taken in a random order
HOLD_AT = 5
# a remote project's card one machine failed to admit HOLD_AT times is left to the other
# live machines until its failures here reach this (its backoff doubling: about an hour)
LEAVE_UNTIL = 2 * HOLD_AT
BASE_BACKOFF_MS = 30_000
# a failure of a card's project, not the card (its remote cannot be fetched, its settings
# file is broken): counted toward no card; the poll tries again this long after
PROJECT_RETRY_MS = 30_000
# a card back in todo mid-round (an escalation answered, a person's move) waits this long
# for the live machine that holds its round's lane, with the work so far and its session
LANE_AFFINITY_MS = 15 * MINUTE_MS


@dataclass
class PollResult:
    skipped: str | None = None
    budget: int = 0
    claimed: list[str] = field(default_factory=list)
    deferred: list[dict[str, Any]] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    plan: list[dict[str, Any]] = field(default_factory=list)
    # a card waits for a queue row to close (no slot, its project's cap, its own row still
    # open): the row's closing, which logs no event, is news for the next tick
    waits_on_rows: bool = False
    lost: int = 0  # claims another machine's poll made first
    # when the first card passed over for a backoff may be tried again (epoch ms): the
    # next tick is due then (no news would wake the loop for it)
    retry_at: int | None = None
    # projects whose failure (not a card's) deferred a card this pass: project id -> why;
    # their other cards wait without another try
    failing: dict[int, str] = field(default_factory=dict)

    def retry_from(self, at: int) -> None:
        self.retry_at = at if self.retry_at is None else min(self.retry_at, at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "skipped": self.skipped,
            "budget": self.budget,
            "claimed": self.claimed,
            "deferred": self.deferred,
            "held": self.held,
            "plan": self.plan,
            "waits_on_rows": self.waits_on_rows,
            "retry_at": self.retry_at,
        }

    @property
    def wrote(self) -> bool:
        return bool(self.claimed or self.held or any(d.get("counted") for d in self.deferred))


def backoff_ms(failures: int) -> int:
    if failures < BACKOFF_FROM:
        return 0
    return int(min(BASE_BACKOFF_MS * 2 ** (failures - BACKOFF_FROM), HOUR_MS))


def pool_is_alive(rt: Runtime) -> bool:
    if rt.pool_alive is not None:
        return rt.pool_alive()
    with rt.store.read() as tx:
        row = instances.current(tx, rt.machine)
        v = instances.verdict(row, tx.now(), rt.config.time)
    return v.state in ("running", "starting")


def poll(rt: Runtime, *, dry_run: bool = False) -> PollResult:
    res = PollResult()
    cfg = rt.config
    if not pool_is_alive(rt):
        res.skipped = "no resident pool on this machine (start one with: lb start)"
        if not dry_run:
            no_resident(rt)
            rt.absence_read = None  # the next poll with a pool clears it at once
        return res
    look = rt.absence_read is None or rt.now() - rt.absence_read >= ABSENCE_READ_MS
    with rt.store.autocommit() as tx:  # what every poll reads; most stop after it
        absent = look and tx.alert_row(f"no_resident|{rt.machine}") is not None
        live = records.queue_rows(tx, machine=rt.machine)
        # a pass admits with these settings; a resident ticker keeps them until a project's
        # news (``Runtime.projects_seen``)
        seen = rt.projects_seen if rt.keep_projects else None
        listed, stored = seen if seen is not None else tx.projects_and_configs()
        if rt.keep_projects and seen is None:
            rt.projects_seen = (listed, stored)
        projects = {p.id: p for p in listed}
    if look:
        rt.absence_read = rt.now()
    if absent and not dry_run:  # a pool runs again: the next absence is news
        with rt.store.write() as tx:
            clear_alert(tx, f"no_resident|{rt.machine}")
    per_project: dict[int, int] = {}
    for row in live:
        per_project[row.project_id] = per_project.get(row.project_id, 0) + 1
    res.budget = budget = cfg.max_concurrency - len(live)
    if budget <= 0:
        res.waits_on_rows = True
        res.skipped = f"budget exhausted ({len(live)} live or queued of {cfg.max_concurrency})"
        return res
    read_at = rt.now()  # a candidate dispatched REREAD_MS after this is read again
    cands = rt.board.candidates(
        assignees=list(rt.claim_set(projects.values())),
        include_unassigned=cfg.claim_unassigned,
        stale=cfg.recover_stale,
        run_id=rt.run_scope,
        run_statuses=tuple(s.value for s in CLAIMING),
        limit=max(budget * 4, 20),
    )
    if not cands:
        return res
    fetch_after = time.monotonic()  # a remote fetched since holds what these cards need
    not_claiming: set[int] = set()
    with rt.store.autocommit() as tx:  # each read stands alone: the claim checks the card
        deferred = records.deferred_until(tx, rt.machine)  # this machine's own
        busy = records.active_card_ids(tx)
        if any(c.card.run_id is not None for c in cands):
            not_claiming = set(tx.run_ids_not_claiming(tuple(s.value for s in CLAIMING)))
            not_claiming |= tx.orchestrated_run_ids()  # lb orchestrate dispatches their cards
        now = tx.now()
        elsewhere = _lanes_elsewhere(tx, rt, cands, projects)
    _remotes_still_failing(rt, res, now)
    caps: dict[int, int] = {}
    order, at = list(cands), 0
    while at < len(order):
        cand, at = order[at], at + 1
        card = cand.card
        if card.kind is CardKind.EPIC:
            continue  # an epic is rolled up by the workflow pass, never handed to an agent
        if card.run_id is not None and card.run_id in not_claiming:
            continue  # its run is paused, stopping or ended: no new claims
        if rt.run_scope is not None and card.run_id != rt.run_scope:
            continue  # lb run claims its own run's cards only
        if budget <= 0:
            res.waits_on_rows = True
            res.deferred.append({"card": card.ref, "reason": "budget", "counted": False})
            continue
        if card.id in busy:
            res.waits_on_rows = True
            continue  # a handoff for it is already queued or running
        if card.id in elsewhere and _waits_for_its_lane(rt, res, card, elsewhere[card.id], now):
            continue
        if deferred.get(card.id, 0) > now:
            res.deferred.append({"card": card.ref, "reason": "backoff", "counted": False})
            res.retry_from(deferred[card.id])
            continue
        if (wait := dispatch_backoff_ms(card, now)) > 0:  # its agent could not be started
            res.deferred.append({"card": card.ref, "reason": "dispatch backoff", "counted": False})
            res.retry_from(now + wait)
            continue
        if card.project_id in res.failing:
            why = res.failing[card.project_id]
            res.deferred.append({"card": card.ref, "reason": why, "counted": False})
            continue
        if card.project_id not in caps:  # a project's settings are resolved once a pass
            caps[card.project_id] = project_cap(cfg, projects.get(card.project_id))
        if per_project.get(card.project_id, 0) >= caps[card.project_id]:
            res.waits_on_rows = True
            res.deferred.append({"card": card.ref, "reason": "project cap", "counted": False})
            continue
        role = rt.role_for(card.assignee, projects.get(card.project_id))
        if role is None:
            res.deferred.append(
                {"card": card.ref, "reason": f"no role {card.assignee}", "counted": False}
            )
            continue
        kind = rt.kind_for(role)
        if kind is None:
            boundary.no_kind(rt, role, rt.choice_for(role).detail)
            res.deferred.append(
                {
                    "card": card.ref,
                    "counted": False,
                    "reason": f"no available agent kind carries role {role.id}",
                }
            )
            continue
        step = {"card": card.ref, "role": role.id, "kind": kind, "stale": cand.stale}
        if dry_run:
            res.plan.append({**step, "action": "claim"})
            budget -= 1
            continue
        lost = res.lost
        if _dispatch(rt, cand, role.id, kind, Projects(projects, stored, fetch_after), res,
                     read_at):  # fmt: skip
            budget -= 1
            per_project[card.project_id] = per_project.get(card.project_id, 0) + 1
        elif res.lost > lost:
            # another machine claims these cards in this same order right now: take the
            # next ones in a random order, so racing machines spread instead of losing each
            # claim in turn
            window = order[at : at + budget + SPREAD]
            _rng.shuffle(window)
            order[at : at + len(window)] = window
    return res


def _remotes_still_failing(rt: Runtime, res: PollResult, now: int) -> None:
    """The projects whose remote this machine failed to clone or fetch less than
    ``PROJECT_RETRY_MS`` ago: their cards wait, uncounted, without another try until then
    (a remote that does not answer holds a fetch for its whole timeout, and the pass with
    it: every other project's cards would wait behind it at each wake-up)."""
    for pid, (until, why) in list(rt.remote_failing.items()):
        if now >= until:
            del rt.remote_failing[pid]
        else:
            res.failing[pid] = why
            res.retry_from(until)


def _lanes_elsewhere(
    tx: Tx, rt: Runtime, cands: list[Candidate], projects: Mapping[int, Project]
) -> dict[int, str]:
    """Ready cards of remote projects whose current round has a lane on another live
    machine: card id -> that machine. Claimed here, the round would start again from the
    remote's base, without the work made there so far and without its session."""
    rounds = {
        c.card.id: c.card.delivery_round
        for c in cands
        if not c.stale and (p := projects.get(c.card.project_id)) is not None and p.remote
    }
    held = tx.lanes_elsewhere(rounds, rt.machine) if rounds else {}
    if not held:
        return {}
    live = {str(r["machine"]) for r in tx.live_supervisors_everywhere()}
    return {cid: machine for cid, machine in held.items() if machine in live}


def _waits_for_its_lane(rt: Runtime, res: PollResult, card: Card, machine: str, now: int) -> bool:
    """Leave a card to the machine holding its round's lane, for ``LANE_AFFINITY_MS`` after
    it went back to todo; then claim it here (its round starts again), said in the log."""
    until = card.status_since + LANE_AFFINITY_MS
    if now < until:
        res.deferred.append({
            "card": card.ref, "counted": False,
            "reason": f"its round {card.delivery_round} lane, with the work so far, is on "
                      f"machine {machine}",
        })  # fmt: skip
        res.retry_from(until)
        return True
    rt.log.warn("poll", f"its round's lane on machine {machine} was not resumed within "
                f"{LANE_AFFINITY_MS // MINUTE_MS} min: the round starts again here",
                card=card.ref)  # fmt: skip
    return False


class Projects(NamedTuple):
    """A poll pass's one read of the projects: each by id, and its board settings; and
    when (``time.monotonic``) the pass had read its ready cards."""

    by_id: dict[int, Any]
    settings: Mapping[int, Mapping[str, Any]]
    read_at: float


def _dispatch(
    rt: Runtime, cand: Candidate, role: str, kind: str, projects: Projects, res: PollResult,
    read_at: int,
) -> bool:  # fmt: skip
    """Admit, claim and enqueue one candidate; False when it was not. A card whose admission
    failed before, here or elsewhere, ends its deferrals and admission alert with the claim."""
    card = cand.card
    project = projects.by_id.get(card.project_id)
    if rt.now() - read_at >= REREAD_MS and _moved_since(rt, card):
        return False  # claimed or changed meanwhile (another machine's poll): its event ticks
    try:
        if project is None:
            raise AdmissionError(f"project {card.project_id} is missing")
        assert rt.admitter is not None
        with _within_pass(rt, projects):
            if review_target_of(card) is not None:
                target = review_target(rt, card, project)
            else:
                target = rt.admitter.admit(card, project)
        write_brief(target, card)
    except (AdmissionError, OSError) as exc:
        scoped = not isinstance(exc, AdmissionError) or exc.card_scoped
        if not scoped:  # the project's failure: its other cards wait without a try
            res.failing[card.project_id] = str(exc)
            res.retry_from(rt.now() + PROJECT_RETRY_MS)
            if isinstance(exc, AdmissionError) and exc.remote:
                rt.remote_failing[card.project_id] = (rt.now() + PROJECT_RETRY_MS, str(exc))
            if project is not None:
                code = exc.code if isinstance(exc, AdmissionError) else "WORKSPACE_ERROR"
                admission_alerts.failing(rt, project, str(exc), code, PROJECT_RETRY_MS // 1000)
        _defer(rt, card.id, card.ref, str(exc), scoped, res, bool(project and project.remote))
        return False
    rt.remote_failing.pop(card.project_id, None)
    admission_alerts.admitted(rt, project)
    try:
        with rt.store.write() as tx:
            new = rt.board.claim_in(tx, rt.actor, card.id, role, None)
            if isinstance(rt.admitter, LaneAdmitter):
                rt.admitter.own(tx, new)  # a remote's lane: the record names this machine's
            row = records.enqueue(
                tx,
                "handoff",
                card.id,
                role,
                card.project_id,
                rt.machine,
                target,
                new.delivery_round,
                new.claim_epoch,
                {
                    "agent_kind": kind,
                    "stale": cand.stale,
                    **director.resume_payload(tx, new),
                    **resume_payload(card),
                },
            )
            if row is None:
                raise LaneboardError(
                    "CONFLICT", f"{card.ref} already has a live handoff", "nothing to do"
                )
            # every machine's, even one written just now; then its admission alert, if any, is
            # over: a next one is sent
            if records.clear_deferral(tx, card.id):
                clear_alert(tx, f"admission|{card.ref}")
            tx.append_event(
                "dispatch.enqueued",
                rt.actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={
                    "queue": row.id,
                    "role": role,
                    "kind": kind,
                    "target_dir": target,
                    "epoch": new.claim_epoch,
                },
            )
    except LaneboardError as err:
        if err.code == "CLAIM_CONFLICT":  # the supervisors of a cluster claim under one name
            rt.log.info("poll", "claim lost: claimed meanwhile, most often by another "
                        "supervisor", card=card.ref, refusal=err.message)  # fmt: skip
        else:
            rt.log.info("poll", f"claim refused: {err.message}", card=card.ref)
        if isinstance(rt.admitter, LaneAdmitter):
            rt.admitter.abandon(card)  # what the admission made here is the winner's to make
        if err.code == "CLAIM_CONFLICT":
            res.lost += 1
        return False
    res.claimed.append(card.ref)
    rt.log.info("poll", "claimed and enqueued", card=card.ref, role=role, kind=kind)
    return True


def _within_pass(rt: Runtime, projects: Projects) -> AbstractContextManager[None]:
    if isinstance(rt.admitter, LaneAdmitter):
        return rt.admitter.within_pass(projects.settings, projects.read_at)
    return nullcontext()


def _moved_since(rt: Runtime, card: Card) -> bool:
    """Whether the card changed since the candidates were read (one indexed read): its
    admission (a lane, a brief) and a claim that would lose are then not worth making.
    Asked only once ``REREAD_MS`` have passed since that read (earlier admissions took
    that long): a read just made is as fresh as this one."""
    with rt.store.autocommit() as tx:
        fresh = tx.card(card.id)
    return fresh is None or fresh.version != card.version


def review_target_of(card: Card) -> int | None:
    """The id of the card a review card reviews (None for any other card)."""
    value = card.meta.get("review_of")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _in_my_clone(rt: Runtime, repo: str) -> bool:
    return os.path.realpath(repo).startswith(os.path.realpath(rt.clones) + os.sep)


def review_target(rt: Runtime, card: Card, project: Any) -> str:
    """A review runs in the reviewed card's own directory, never the shared checkout.

    The directory is the reviewed round's lane, else the one the original's last
    handoff ran in. A card with neither — an epic, or a round a person delivered by hand —
    has its review admitted like any card (in a git project, a fresh lane of the current
    branch, where that work was landed or committed). A review whose original's lane or
    directory is gone is deferred.
    """
    from laneboard.workspace.lanes import lane_for

    oid = review_target_of(card)
    target: str | None = None
    with rt.store.read() as tx:
        original = tx.card(oid) if oid is not None else None
        rnd = card.meta.get("review_round")
        lane = lane_for(tx, original.id, rnd) if original and isinstance(rnd, int) else None
        elsewhere = False
        if lane is not None and lane.state != "cleaned" and original is not None:
            project = tx.project(id=original.project_id)
            target = lane.target_dir(project.path if project else None)
            elsewhere = bool(project and project.remote) and not _in_my_clone(rt, lane.repo)
        else:
            target = tx.last_handoff_target(oid)
    if elsewhere and isinstance(rt.admitter, LaneAdmitter) and lane is not None:
        # a round another machine ran: reviewed here, at its commit as pushed to the remote
        return rt.admitter.admit_review(card, project, lane)
    if target is None and original is not None and lane is None:
        # no lane and no handoff ever ran it: an epic (its children landed on the current
        # branch) or a round a person delivered by hand (committed on the current branch):
        # the review runs in a fresh lane of the current branch, which holds that work
        assert rt.admitter is not None
        return rt.admitter.admit(card, project)
    if target is None or not os.path.isdir(target):
        what = original.ref if original else f"card {oid}"
        raise AdmissionError(
            f"the workspace of {what} is missing; its review cannot run in the shared "
            f"checkout (deliver {what} again, or restore its lane)",
            code="WORKSPACE_REVIEW_TARGET_MISSING",
        )
    return target


def resume_payload(card: Card) -> dict[str, Any]:
    """What a resumed session is told when the workflow sent the card back to its holder.

    ``meta.loop_resume`` (written by the workflow pass with a rework or a reopened review)
    counts only for the first claim after it was written.
    """
    info = card.meta.get("loop_resume")
    if not isinstance(info, dict) or info.get("round") != card.delivery_round:
        return {}
    if card.claimed_at is not None and card.claimed_at > int(info.get("at") or 0):
        return {}
    out: dict[str, Any] = {
        "resume_reason": str(info.get("reason") or "the card was sent back to you"),
        "resume_detail": str(info.get("detail") or ""),
    }
    if isinstance(info.get("from_round"), int) and info["from_round"] != card.delivery_round:
        out["resume_from_round"] = info["from_round"]
    return out


def no_resident(rt: Runtime) -> None:
    """Cards cannot be claimed here while no resident pool runs: one alert per absence."""
    with rt.store.write() as tx:
        raise_alert(
            tx,
            f"no_resident|{rt.machine}",
            "absent",
            "warning",
            {"alert": "no_resident", "row": "no_resident", "machine": rt.machine,
             "detail": "no resident pool runs on this machine: nothing is claimed here",
             "fix": "start one with: lb start"},
            actor=rt.actor,
        )  # fmt: skip


def _defer(
    rt: Runtime, card_id: int, ref: str, error: str, scoped: bool, res: PollResult, remote: bool
) -> None:
    """Count a failed admission on this machine's own deferral of the card (``scoped``: a
    failure of the card, not of its project), back off, and hold the card at ``HOLD_AT``.

    A card of a project with a remote can be admitted on any machine of the cluster: one
    machine's failures (its disk, its clone) back off only that machine, and hold the card
    only once every live machine has failed ``HOLD_AT`` times; until then it is left to the
    others (``_others_may_admit``), for at most ``LEAVE_UNTIL`` failures here (a machine
    that never tries it — its roles do not take it — does not keep it from a person)."""
    entry: dict[str, Any] = {"card": ref, "reason": error, "counted": scoped}
    res.deferred.append(entry)
    rt.log.warn("poll", f"admission deferred: {error}", card=ref)
    if not scoped:
        return
    with rt.store.write() as tx:
        prev = records.deferral(tx, card_id, rt.machine)
        failures = (int(prev["failures"]) if prev else 0) + 1
        entry["failures"] = failures
        next_at = tx.now() + backoff_ms(failures)
        records.record_deferral(tx, card_id, rt.machine, failures, next_at, error)
        res.retry_from(next_at)
        card = tx.card(card_id)
        tx.append_event(
            "dispatch.deferred",
            rt.actor,
            card_id=card_id,
            project_id=card.project_id if card else None,
            payload={"failures": failures, "error": error, "machine": rt.machine},
        )
        if failures == BACKOFF_FROM and card is not None:  # the backoff starts: say so
            note = (
                f"laneboard could not prepare {card.ref} {failures} times on machine "
                f"{rt.machine} (last: {error}); it now retries with a backoff and holds the "
                f"card at the {HOLD_AT}th failure"
                + (" of every machine of the cluster." if remote else ".")
            )
            tx.insert_comment(card_id, CommentKind.NOTE.value, note, rt.actor)
            raise_alert(
                tx,
                f"admission|{card.ref}",
                f"failures={failures}",
                "warning",
                {"alert": "admission_failing", "card": card.ref, "failures": failures,
                 "error": error, "hold_at": HOLD_AT, "machine": rt.machine},
                actor=rt.actor, card_id=card_id, project_id=card.project_id,
            )  # fmt: skip
        if failures >= HOLD_AT and card is not None:
            others = _others_may_admit(tx, rt, card_id) if remote else []
            if others and failures < LEAVE_UNTIL:
                entry["left_to"] = others
                if failures == HOLD_AT:
                    rt.log.warn("poll", f"admission failed {failures} times here: the card is "
                                f"left to machine(s) {', '.join(others)}", card=ref)  # fmt: skip
                return
            place_hold(
                rt,
                tx,
                card,
                "admission",
                HOLD_AT,
                f"admission failed {failures} times; last error: {error}",
            )
            records.clear_deferral(tx, card_id)
            res.held.append(ref)


def _others_may_admit(tx: Tx, rt: Runtime, card_id: int) -> list[str]:
    """The other live machines of the cluster that have not yet failed ``HOLD_AT`` times
    to admit the card (a stopped or fenced machine is not live)."""
    failed = records.deferral_failures(tx, card_id)
    live = {str(r["machine"]) for r in tx.live_supervisors_everywhere()}
    return sorted(m for m in live - {rt.machine} if failed.get(m, 0) < HOLD_AT)
