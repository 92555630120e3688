"""The board API. Every write is one transaction that appends its event."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from laneboard.board import inputs
from laneboard.domain import acceptance as authority
from laneboard.domain import claims, deps, weights
from laneboard.domain.model import (
    AWAITING_REASONS,
    AcceptanceMode,
    Actor,
    ActorKind,
    Card,
    CardKind,
    Comment,
    CommentKind,
    Event,
    Evidence,
    Project,
    Report,
    check_priority,
    parse_enum,
)
from laneboard.domain.status import (
    TERMINAL,
    TRANSITIONS,
    Status,
    check_transition,
    parse_status,
)
from laneboard.errors import LaneboardError, bad_input, not_found
from laneboard.store import IntegrityError, Row, Store, rows
from laneboard.store.rows import dumps
from laneboard.store.tx import Tx, claim_probe_sql

TRANSITIONS_TO_BLOCKED = frozenset(s for s, dst in TRANSITIONS.items() if Status.BLOCKED in dst)

EDITABLE = frozenset(
    {
        "title",
        "description",
        "assignee",
        "priority",
        "labels",
        "acceptance",
        "acceptance_mode",
        "checks",
        "allowed_paths",
        "parent",
        "meta",
        "kind",
    }
)


@dataclass(frozen=True)
class Candidate:
    card: Card
    weight: float
    fanout: int
    stale: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.card.ref,
            "id": self.card.id,
            "title": self.card.title,
            "status": self.card.status.value,
            "assignee": self.card.assignee,
            "priority": self.card.priority,
            "weight": round(self.weight, 3),
            "fanout": self.fanout,
            "stale": self.stale,
        }


# the runtime's hooks (laneboard.workspace.hooks.install): verify a delivery before
# in_progress -> in_review (evidence, or LaneboardError VERIFICATION_FAILED), land the
# lane before -> done (the merge commit or None, or LaneboardError LANDING_BLOCKED)
DeliveryGate = Callable[[Card], list[Evidence]]
LandingGate = Callable[[Card], "str | None"]


class Board:
    def __init__(
        self,
        store: Store,
        windows: claims.ClaimWindows = claims.DEFAULT_WINDOWS,
        *,
        delivery_gate: DeliveryGate | None = None,
        landing_gate: LandingGate | None = None,
    ) -> None:
        self.store = store
        self.windows = windows
        self.delivery_gate = delivery_gate
        self.landing_gate = landing_gate

    # -- lookups -------------------------------------------------------------------
    def _card(self, tx: Tx, ref: str | int, *, lock: bool = False) -> Card:
        r = inputs.card_ref(ref)
        cid = r if isinstance(r, int) else tx.card_id_by_ref(r)
        card = tx.card(cid, lock=lock) if cid is not None else None
        if card is None:
            raise not_found("card", ref, "list cards with: lb card list")
        return card

    def _project(self, tx: Tx, ref: str | int) -> Project:
        p: Project | None
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
            p = tx.project(id=int(ref))
        else:
            p = tx.project(key=ref) or tx.project(name=ref)
        if p is None:
            raise not_found("project", ref, "add it with: lb project add KEY --path DIR")
        return p

    @staticmethod
    def _may_write(actor: Actor, card: Card | claims.ClaimProbe) -> None:
        if actor.kind is ActorKind.AGENT and actor.card_id is not None and actor.card_id != card.id:
            raise LaneboardError(
                "FORBIDDEN",
                f"this agent credential is scoped to card {actor.card_id}, not {card.ref}",
                "agents write only the card they were dispatched for",
            )

    @staticmethod
    def _fence(actor: Actor, card: Card) -> None:
        """A claimant's write must carry the current claim epoch."""
        if actor.kind is not ActorKind.AGENT or card.status is not Status.IN_PROGRESS:
            return
        if actor.epoch is not None and actor.epoch != card.claim_epoch:
            raise LaneboardError(
                "STALE_CLAIM",
                f"claim epoch {actor.epoch} on {card.ref} is stale (current {card.claim_epoch})",
                "your claim was taken over; stop working on this card",
            )
        if actor.epoch is not None and actor.card_id == card.id:
            return  # a credential issued for this very claim (e.g. the Director's, per row)
        if card.holder is not None and actor.name != card.holder:
            raise LaneboardError(
                "STALE_CLAIM",
                f"{card.ref} is held by {card.holder}, not {actor.name}",
                "claim the card before writing to it",
            )

    def _save(self, tx: Tx, card: Card, fields: dict[str, Any]) -> Card:
        if not tx.update_card(card.id, card.version, fields):
            raise LaneboardError(
                "VERSION_CONFLICT",
                f"{card.ref} changed while it was being written",
                "read it again and retry",
            )
        fresh = tx.card(card.id)
        assert fresh is not None
        return fresh

    # -- projects ------------------------------------------------------------------
    def add_project(
        self,
        actor: Actor,
        key: str,
        name: str | None = None,
        path: str | None = None,
        base_ref: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> Project:
        self._human_only(actor, "add a project")
        key = inputs.project_key(key)
        name = inputs.text(name or key, "project name", limit=200)
        try:
            with self.store.write() as tx:
                if tx.project(key=key) or tx.project(name=name):
                    raise LaneboardError(
                        "CONFLICT",
                        f"project {key} ({name}) already exists",
                        "pick another key and name, or use the existing project",
                    )
                pid = tx.insert_project(key, name, path, base_ref)
                if config:
                    tx.update_project(pid, config=config)
                tx.append_event(
                    "project.added",
                    actor,
                    project_id=pid,
                    payload={"key": key, "name": name, "path": path},
                )
                p = tx.project(id=pid)
        except IntegrityError:
            raise LaneboardError(
                "CONFLICT", f"project {key} already exists", "use the existing project"
            ) from None
        assert p is not None
        return p

    def projects(self) -> list[Project]:
        with self.store.read() as tx:
            return tx.projects()

    def project(self, ref: str | int) -> Project:
        with self.store.read() as tx:
            return self._project(tx, ref)

    def project_config(self, ref: str | int) -> dict[str, Any]:
        with self.store.read() as tx:
            return tx.project_config(self._project(tx, ref).id)

    def set_project_config(
        self, actor: Actor, ref: str | int, changes: dict[str, Any], unset: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Change a project's settings (workspace, review_gate, check_timeout, base_ref)."""
        self._human_only(actor, "change project settings")
        checked = {k: _project_setting(k, v) for k, v in changes.items()}
        for key in unset:
            _project_setting(key, None)
        with self.store.write() as tx:
            p = self._project(tx, ref)
            cfg = {**tx.project_config(p.id), **checked}
            for key in unset:
                cfg.pop(key, None)
            tx.update_project(p.id, config=cfg)
            tx.append_event(
                "project.configured",
                actor,
                project_id=p.id,
                payload={"set": sorted(checked), "unset": sorted(unset)},
            )
            return cfg

    @staticmethod
    def _human_only(actor: Actor, what: str) -> None:
        if actor.kind is ActorKind.AGENT:
            raise LaneboardError("FORBIDDEN", f"agents may not {what}", "ask a human to do it")

    # -- cards ---------------------------------------------------------------------
    def create_card(
        self,
        actor: Actor,
        project: str | int,
        title: str,
        *,
        description: str = "",
        kind: str = "task",
        parent: str | int | None = None,
        assignee: str | None = None,
        priority: int = 2,
        labels: Iterable[str] = (),
        acceptance: Iterable[Any] = (),
        acceptance_mode: str = "auto",
        checks: Iterable[str] = (),
        allowed_paths: Iterable[str] = (),
        status: str = "todo",
        depends_on: Iterable[str | int] = (),
        meta: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        run_id: int | None = None,
        tx: Tx | None = None,
    ) -> Card:
        """Create a card. With ``tx`` the card is written inside that open write
        transaction (the caller commits it, and a constraint failure propagates)."""
        title = inputs.text(title, "title", limit=500)
        inputs.text(description, "description", empty=True)
        kind_v = parse_enum(CardKind, kind, "card kind")
        mode = parse_enum(AcceptanceMode, acceptance_mode, "acceptance mode")
        st = parse_status(status)
        if st not in (Status.BACKLOG, Status.TODO):
            raise bad_input(f"a new card cannot start in {st.value}", "use backlog or todo")
        check_priority(priority)
        crit = inputs.criteria(acceptance)
        label_l = inputs.strings(labels, "labels")
        check_l = inputs.strings(checks, "checks")
        paths = [inputs.repo_path(p) for p in allowed_paths]
        if assignee is not None:
            assignee = inputs.text(assignee, "assignee", limit=200).strip()
        if idempotency_key is not None:
            inputs.text(idempotency_key, "idempotency key", limit=500)
        try:
            return self._create(
                actor,
                project,
                title,
                description,
                kind_v,
                parent,
                assignee,
                priority,
                label_l,
                crit,
                mode,
                check_l,
                paths,
                st,
                list(depends_on),
                dict(meta or {}),
                idempotency_key,
                run_id,
                tx,
            )
        except IntegrityError:
            if idempotency_key is None or tx is not None:
                raise
            with self.store.read() as rtx:  # lost a race on the same key: return the winner
                found = rtx.card_by_key(idempotency_key)
            if found is None:
                raise
            return found

    def _create(
        self,
        actor: Actor,
        project: str | int,
        title: str,
        description: str,
        kind: CardKind,
        parent: str | int | None,
        assignee: str | None,
        priority: int,
        labels: list[str],
        crit: list[Any],
        mode: AcceptanceMode,
        checks_: list[str],
        paths: list[str],
        st: Status,
        depends_on: list[str | int],
        meta: dict[str, Any],
        key: str | None,
        run_id: int | None,
        outer: Tx | None = None,
    ) -> Card:
        if outer is not None:
            return self._create_in(
                outer, actor, project, title, description, kind, parent, assignee, priority,
                labels, crit, mode, checks_, paths, st, depends_on, meta, key, run_id,
            )  # fmt: skip
        with self.store.write() as tx:
            return self._create_in(
                tx, actor, project, title, description, kind, parent, assignee, priority,
                labels, crit, mode, checks_, paths, st, depends_on, meta, key, run_id,
            )  # fmt: skip

    def _create_in(
        self,
        tx: Tx,
        actor: Actor,
        project: str | int,
        title: str,
        description: str,
        kind: CardKind,
        parent: str | int | None,
        assignee: str | None,
        priority: int,
        labels: list[str],
        crit: list[Any],
        mode: AcceptanceMode,
        checks_: list[str],
        paths: list[str],
        st: Status,
        depends_on: list[str | int],
        meta: dict[str, Any],
        key: str | None,
        run_id: int | None,
    ) -> Card:
        if key is not None:
            existing = tx.card_by_key(key)
            if existing is not None:
                return existing
        p = self._project(tx, project)
        parent_id = None
        if parent is not None:
            pc = self._card(tx, parent)
            if pc.kind is not CardKind.EPIC:
                raise bad_input(f"{pc.ref} is not an epic", "a parent must be an epic card")
            if pc.terminal:
                raise bad_input(f"epic {pc.ref} is {pc.status.value}", "pick an open epic")
            parent_id = pc.id
        if actor.kind is ActorKind.AGENT and actor.card_id is not None:
            raise LaneboardError(
                "FORBIDDEN",
                "a card-scoped agent credential cannot create cards",
                "comment on your card with the proposed work instead",
            )
        dep_cards = [self._card(tx, d) for d in depends_on]
        now = tx.now()
        number = tx.take_card_number(p.id)
        cid = tx.insert_card(
            {
                "project_id": p.id,
                "number": number,
                "ref": f"{p.key}-{number}",
                "title": title,
                "description": description,
                "kind": kind.value,
                "parent_id": parent_id,
                "status": st.value,
                "assignee": assignee,
                "priority": priority,
                "labels": labels,
                "acceptance": [c.to_dict() for c in crit],
                "acceptance_mode": mode.value,
                "delivery_round": 1,
                "checks": checks_,
                "allowed_paths": paths,
                "meta": meta,
                "idempotency_key": key,
                "run_id": run_id,
                "status_since": now,
                "created_at": now,
                "updated_at": now,
            }
        )
        for d in dep_cards:
            tx.insert_link(cid, d.id)
        card = tx.card(cid)
        assert card is not None
        tx.append_event(
            "card.created",
            actor,
            card_id=cid,
            project_id=p.id,
            run_id=run_id,
            payload={
                "ref": card.ref,
                "title": title,
                "status": st.value,
                "assignee": assignee,
                "idempotency_key": key,
            },
        )
        return card

    def get(self, ref: str | int) -> Card:
        with self.store.read() as tx:
            return self._card(tx, ref)

    def card_detail(self, ref: str | int) -> dict[str, Any]:
        with self.store.read() as tx:
            card = self._card(tx, ref)
            out = card.to_dict()
            out["comments"] = [c.to_dict() for c in tx.comments(card.id)]
            out["reports"] = [r.to_dict() for r in tx.reports(card.id)]
            out["dependencies"] = [
                {"ref": d.ref, "status": d.status.value}
                for d in (tx.list_cards(ids=list(card.depends_on)) if card.depends_on else [])
            ]
            out["turns"] = tx.turn_usage(card.id)
            return out

    def list_cards(
        self,
        *,
        project: str | int | None = None,
        statuses: Sequence[str] = (),
        assignee: str | None = None,
        unassigned: bool = False,
        label: str | None = None,
        parent: str | int | None = None,
        run_id: int | None = None,
        limit: int = 500,
    ) -> list[Card]:
        for s in statuses:
            parse_status(s)
        if limit < 1 or limit > 10_000:
            raise bad_input(f"limit {limit} is out of range", "use a limit from 1 to 10000")
        with self.store.read() as tx:
            pid = self._project(tx, project).id if project is not None else None
            parent_id = self._card(tx, parent).id if parent is not None else None
            return tx.list_cards(
                project_id=pid,
                statuses=statuses,
                assignee=assignee,
                unassigned=unassigned,
                label=label,
                parent_id=parent_id,
                run_id=run_id,
                limit=limit,
            )

    def edit(self, actor: Actor, ref: str | int, **changes: Any) -> Card:
        unknown = set(changes) - EDITABLE
        if unknown:
            raise bad_input(
                f"cannot edit {', '.join(sorted(unknown))}",
                f"editable fields: {', '.join(sorted(EDITABLE))}",
            )
        if not changes:
            raise bad_input("nothing to edit", "pass at least one field to change")
        fields: dict[str, Any] = {}
        for k, v in changes.items():
            if k == "title":
                fields[k] = inputs.text(v, "title", limit=500)
            elif k == "description":
                fields[k] = inputs.text(v, "description", empty=True)
            elif k == "priority":
                fields[k] = check_priority(int(v))
            elif k == "labels":
                fields[k] = inputs.strings(v, "labels")
            elif k == "checks":
                fields[k] = inputs.strings(v, "checks")
            elif k == "allowed_paths":
                fields[k] = [inputs.repo_path(p) for p in v]
            elif k == "acceptance":
                fields[k] = [c.to_dict() for c in inputs.criteria(v)]
            elif k == "acceptance_mode":
                fields[k] = parse_enum(AcceptanceMode, v, "acceptance mode").value
            elif k == "kind":
                fields[k] = parse_enum(CardKind, v, "card kind").value
            elif k == "assignee":
                fields[k] = None if v in (None, "") else inputs.text(v, "assignee", limit=200)
            elif k == "meta":
                if not isinstance(v, dict):
                    raise bad_input("meta must be a JSON object", "pass meta as {...}")
                fields[k] = v
            else:
                fields[k] = v
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            self._may_write(actor, card)
            self._fence(actor, card)
            if card.terminal:
                raise LaneboardError(
                    "ILLEGAL_TRANSITION",
                    f"{card.ref} is {card.status.value}",
                    "terminal cards cannot be edited",
                )
            if actor.kind is ActorKind.AGENT and ({"acceptance", "acceptance_mode"} & set(fields)):
                raise LaneboardError(
                    "FORBIDDEN",
                    "agents may not change acceptance",
                    "ask a human to change the acceptance of the card",
                )
            if "parent" in fields:
                pv = fields.pop("parent")
                if pv is None:
                    fields["parent_id"] = None
                else:
                    pc = self._card(tx, pv)
                    if pc.kind is not CardKind.EPIC or pc.id == card.id:
                        raise bad_input(f"{pc.ref} cannot be the parent", "choose an epic card")
                    fields["parent_id"] = pc.id
            if "meta" in fields:
                fields["meta"] = {**card.meta, **fields["meta"]}
            new = self._save(tx, card, fields)
            tx.append_event(
                "card.edited",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"fields": sorted(changes)},
            )
            return new

    # -- moves ---------------------------------------------------------------------
    def move(
        self,
        actor: Actor,
        ref: str | int,
        to: str,
        *,
        reason: str | None = None,
        question: str | None = None,
        note: str | None = None,
        idempotency_key: str | None = None,
    ) -> Card:
        dst = parse_status(to)
        if idempotency_key is not None:
            inputs.text(idempotency_key, "idempotency key", limit=500)
        if dst is Status.IN_PROGRESS:
            # todo -> in_progress is a claim; in_review -> in_progress is rework
            with self.store.read() as tx:
                current = self._card(tx, ref)
            if current.status is Status.TODO:
                return self.claim(actor, ref, idempotency_key=idempotency_key)
        if dst is Status.AWAITING:
            if reason not in AWAITING_REASONS:
                raise bad_input(
                    f"awaiting needs a reason {'/'.join(AWAITING_REASONS)}",
                    "pass --reason E1..E5 and --question TEXT",
                )
            question = inputs.text(question or "", "question", limit=20_000)
        gated = self._run_gates(actor, ref, dst, idempotency_key)
        with self.store.write() as tx:
            if idempotency_key is not None:
                seen = tx.idempotent_response(idempotency_key)
                if seen is not None:
                    return self._card(tx, int(seen["card_id"]))
            card = self._card(tx, ref, lock=True)
            self._close_rule_first(actor, card, dst)
            self._may_write(actor, card)
            self._fence(actor, card)
            check_transition(card.status, dst)
            fields = self._move_fields(tx, actor, card, dst)
            extra = self._gated_fields(tx, card, fields, gated)
            if dst is Status.AWAITING:
                assert question is not None
                c = tx.insert_comment(card.id, CommentKind.QUESTION.value, question, actor)
                fields["meta"] = {**card.meta, "awaiting": {"reason": reason, "comment": c.id}}
            elif dst is Status.BLOCKED and (reason or note):
                fields["meta"] = {**card.meta, "blocked": {"reason": reason or "", "note": note}}
            new = self._save(tx, card, fields)
            if note and dst is not Status.BLOCKED:
                tx.insert_comment(card.id, CommentKind.NOTE.value, note, actor)
            tx.append_event(
                "card.moved",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={
                    "ref": card.ref,
                    "from": card.status.value,
                    "to": dst.value,
                    "reason": reason,
                    "round": new.delivery_round,
                    **extra,
                },
            )
            if idempotency_key is not None:
                tx.remember(
                    idempotency_key, "move", card.id, {"card_id": card.id, "status": dst.value}
                )
            return new

    @staticmethod
    def _close_rule_first(actor: Actor, card: Card, dst: Status) -> None:
        """An agent closing a card outside its credential's scope hears the acceptance
        rule first when that rule refuses it too (``ACCEPTANCE_FORBIDDEN``, e.g. a reviewer
        closing a ``human`` card); otherwise the scope refusal follows as usual."""
        if (
            dst is Status.DONE
            and card.status in (Status.IN_REVIEW, Status.IN_PROGRESS)
            and actor.kind is ActorKind.AGENT
            and actor.card_id not in (None, card.id)
        ):
            authority.check_close(card, actor)

    def _run_gates(
        self, actor: Actor, ref: str | int, dst: Status, key: str | None
    ) -> tuple[Card, list[Evidence], str | None] | None:
        """Verify a delivery / land an acceptance before the move's write transaction.

        The move is first checked as the write would check it (so a refused move runs
        nothing); a gate's refusal refuses the move and nothing else changes."""
        if dst not in (Status.IN_REVIEW, Status.DONE):
            return None
        if self.delivery_gate is None and self.landing_gate is None:
            return None
        with self.store.read() as tx:
            if key is not None and tx.idempotent_response(key) is not None:
                return None
            card = self._card(tx, ref)
            self._close_rule_first(actor, card, dst)
            self._may_write(actor, card)
            self._fence(actor, card)
            check_transition(card.status, dst)
            self._move_fields(tx, actor, card, dst)
        evidence: list[Evidence] = []
        merge: str | None = None
        if card.status is Status.IN_PROGRESS and self.delivery_gate is not None:
            evidence = list(self.delivery_gate(card))
        if dst is Status.DONE and self.landing_gate is not None:
            merge = self.landing_gate(card)
        return card, evidence, merge

    @staticmethod
    def _gated_fields(
        tx: Tx,
        card: Card,
        fields: dict[str, Any],
        gated: tuple[Card, list[Evidence], str | None] | None,
    ) -> dict[str, Any]:
        """Inside the move: the verified evidence joins the round's report and the merge
        commit joins ``meta``. Returns what the move event adds to its payload."""
        if gated is None:
            return {}
        checked, evidence, merge = gated
        if (checked.status, checked.delivery_round) != (card.status, card.delivery_round):
            raise LaneboardError(
                "VERSION_CONFLICT",
                f"{card.ref} changed while it was being verified",
                "read it again and retry the move",
            )
        extra: dict[str, Any] = {}
        rep = tx.report(card.id, card.delivery_round) if evidence else None
        if rep is not None:
            items = [e.to_dict() for e in (*rep.evidence, *evidence)]
            tx.run("UPDATE reports SET evidence = ? WHERE id = ?", (dumps(items), rep.id))
            extra["verified"] = len(evidence)
        if merge is not None:
            fields["meta"] = {**fields.get("meta", card.meta), "merge_commit": merge}
            extra["merge_commit"] = merge
        return extra

    def _move_fields(self, tx: Tx, actor: Actor, card: Card, dst: Status) -> dict[str, Any]:
        fields: dict[str, Any] = {"status": dst.value, "status_since": tx.now()}
        if (
            dst is Status.IN_REVIEW
            and card.status is Status.IN_PROGRESS
            and tx.report(card.id, card.delivery_round) is None
        ):
            raise LaneboardError(
                "REPORT_REQUIRED",
                f"{card.ref} has no delivery report for round {card.delivery_round}",
                f"write one first: lb card report {card.ref} --body TEXT",
            )
        if dst is Status.DONE:
            authority.check_close(card, actor)
        if dst in TERMINAL and card.idempotency_key is not None:
            fields["idempotency_key"] = None
            fields["meta"] = {**card.meta, "released_key": card.idempotency_key}
        if dst in (Status.TODO, Status.BACKLOG):
            fields.update(holder=None, holder_kind=None, session_id=None, heartbeat_at=None)
        elif dst is not Status.IN_PROGRESS:
            fields["heartbeat_at"] = None
        else:  # rework: the holder may re-claim at once
            fields["heartbeat_at"] = None
        return fields

    def claim(
        self,
        actor: Actor,
        ref: str | int,
        *,
        holder: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Card:
        """Take a card (compare-and-swap). Losers get ``CLAIM_CONFLICT``."""
        who = holder or actor.name
        if holder is not None:
            inputs.text(holder, "holder", limit=200)
        if idempotency_key is not None:
            inputs.text(idempotency_key, "idempotency key", limit=500)
        if actor.kind is ActorKind.AGENT and holder not in (None, actor.name):
            raise LaneboardError(
                "FORBIDDEN", "an agent claims only under its own name", "drop --holder"
            )
        probe = self._claim_probe(actor, ref, who) if idempotency_key is None else None
        if probe is not None:
            with self.store.write() as tx:  # the lock is held for two statements
                row = self._claim_expected(tx, actor, probe, who, session_id)
                if row is None:  # the card changed since the probe: the exact path decides
                    return self.claim_in(tx, actor, ref, who, session_id)
            deps = str(probe["deps"] or "")
            return rows.card(row, tuple(int(d) for d in deps.split(",") if d))
        with self.store.write() as tx:
            if idempotency_key is not None:
                seen = tx.idempotent_response(idempotency_key)
                if seen is not None:
                    return self._card(tx, int(seen["card_id"]))
            new = self.claim_in(tx, actor, ref, who, session_id)
            if idempotency_key is not None:
                tx.remember(idempotency_key, "claim", new.id, {"card_id": new.id})
            return new

    def claim_next(
        self,
        actor: Actor,
        *,
        assignees: Sequence[str] = (),
        include_unassigned: bool = False,
        project: str | int | None = None,
        holder: str | None = None,
        session_id: str | None = None,
    ) -> Card:
        """Claim the heaviest ready card of a claim set (``lb card claim --next``).

        The set is the given assignees (default: the claimant's own name), plus
        unassigned cards when asked. The pick and the claim are one statement over the
        weight-ordered candidates; when racing claimants took all of them, it reads the
        candidates again (three times at most) before answering ``CLAIM_CONFLICT``.
        """
        who = holder or actor.name
        if holder is not None:
            inputs.text(holder, "holder", limit=200)
        if actor.kind is ActorKind.AGENT and holder not in (None, actor.name):
            raise LaneboardError(
                "FORBIDDEN", "an agent claims only under its own name", "drop --holder"
            )
        if actor.kind is ActorKind.AGENT and actor.card_id is not None:
            raise LaneboardError(
                "FORBIDDEN",
                "this agent credential is scoped to one card and cannot pick another",
                "claim the credential's own card: lb card claim CARD",
            )
        wanted = list(assignees) or [who]
        for name in wanted:
            inputs.text(name, "assignee", limit=200)
        for _ in range(3):
            got = self.candidates(
                assignees=wanted, include_unassigned=include_unassigned, project=project
            )
            if not got:
                raise LaneboardError(
                    "NOTHING_READY",
                    f"no ready card for {', '.join(wanted)}"
                    + (" or unassigned" if include_unassigned else ""),
                    "see what is waiting with: lb card candidates --include-unassigned",
                )
            with self.store.write() as tx:
                row = tx.claim_next(
                    [c.card.id for c in got],
                    who,
                    actor.kind.value,
                    session_id,
                    bypass_assignee=actor.is_human,
                )
                if row is not None:
                    self._after_claim(tx, actor, row, who)
                    return rows.card(row, tx.dependencies(int(row["id"])))
        raise LaneboardError(
            "CLAIM_CONFLICT",
            "every ready card was claimed by someone else meanwhile",
            "try again, or see: lb card candidates",
        )

    def _claim_probe(self, actor: Actor, ref: str | int, who: str) -> Row | None:
        """Refuse a claim that cannot win without taking the write lock.

        One read statement on its own snapshot: refusing on it is the same as losing
        the race at that instant. A claim that looks winnable goes on to the CAS with
        the row read here (None: the card does not exist; the write path says so).
        Only the claim fields are read and decoded: losing is the common case in a race.
        """
        r = inputs.card_ref(ref)
        by = "id" if isinstance(r, int) else "ref"
        got = self.store.query(claim_probe_sql(by, self.store.dialect == "postgresql"), (r,))
        if not got:
            return None
        row = got[0]
        probe = claims.ClaimProbe(
            int(row["id"]),
            str(row["ref"]),
            Status(row["status"]),
            row["assignee"],
            row["holder"],
            row["heartbeat_at"],
        )
        self._may_write(actor, probe)
        self._refuse_claim(probe, actor, who, bool(row["deps_done"]), self.store.clock.now_ms())
        return row

    def _claim_expected(
        self, tx: Tx, actor: Actor, probe: Row, who: str, session_id: str | None
    ) -> Row | None:
        """The CAS against the probed version, then the event. None if the card moved on."""
        row = tx.claim(
            int(probe["id"]),
            who,
            actor.kind.value,
            session_id,
            self.windows,
            bypass_assignee=actor.is_human,
            expect=probe,
        )
        if row is not None:
            self._after_claim(tx, actor, row, who)
        return row

    def _after_claim(self, tx: Tx, actor: Actor, row: Row, who: str) -> None:
        """The takeover comment and the ``card.claimed`` event of a successful CAS."""
        prev_status, prev_holder = row["prev_status"], row["prev_holder"]
        takeover = prev_status == Status.IN_PROGRESS.value and prev_holder not in (None, who)
        if takeover:
            tx.insert_comment(
                row["id"],
                CommentKind.CHANGE.value,
                f"{who} took over {row['ref']} from {prev_holder} (heartbeat stale)",
                actor,
            )
        tx.append_event(
            "card.claimed",
            actor,
            card_id=row["id"],
            project_id=row["project_id"],
            run_id=row["run_id"],
            payload={
                "ref": row["ref"],
                "holder": who,
                "epoch": row["claim_epoch"],
                "from": prev_status,
                "takeover": takeover,
                "previous_holder": prev_holder,
            },
        )

    def _refuse_claim(
        self, card: Card | claims.ClaimProbe, actor: Actor, who: str, deps_done: bool, now: int
    ) -> None:
        verdict = claims.claim_verdict(
            card, who, deps_done, now, self.windows, may_bypass_assignee=actor.is_human
        )
        if not verdict.ok:
            raise LaneboardError(
                "CLAIM_CONFLICT",
                f"{card.ref} cannot be claimed: {verdict.reason}",
                "pick another card from: lb card candidates",
            )

    def claim_in(
        self, tx: Tx, actor: Actor, ref: str | int, who: str, session_id: str | None
    ) -> Card:
        """The claim inside an open write transaction (used by the supervisor)."""
        r = inputs.card_ref(ref)
        cid = r if isinstance(r, int) else tx.card_id_by_ref(r)
        if cid is None:
            raise not_found("card", ref, "list cards with: lb card list")
        if actor.kind is ActorKind.AGENT and actor.card_id not in (None, cid):
            self._may_write(actor, self._card(tx, cid))
        row = tx.claim(
            cid,
            who,
            actor.kind.value,
            session_id,
            self.windows,
            bypass_assignee=actor.is_human,
        )
        if row is None:
            card = self._card(tx, cid)
            self._refuse_claim(card, actor, who, tx.deps_done(cid), tx.now())
            raise LaneboardError(  # the CAS and the rules disagree: never expected
                "CLAIM_CONFLICT",
                f"{card.ref} cannot be claimed right now",
                "pick another card from: lb card candidates",
            )
        self._after_claim(tx, actor, row, who)
        return rows.card(row, tx.dependencies(cid))

    def hold(
        self,
        tx: Tx,
        actor: Actor,
        card: Card,
        cycle: str,
        bound: int,
        message: str,
        *,
        reason: str = "resource",
    ) -> Card:
        """Park a card for a human at a loop bound: blocked, a question, ``meta.hold_*``."""
        if card.status not in TRANSITIONS_TO_BLOCKED:
            return card
        question = (
            f"laneboard stopped {cycle} on {card.ref} at its bound ({bound}): {message} "
            f"A human decides what happens next: fix the cause and move the card to todo "
            f"(lb card move {card.ref} todo), or cancel it."
        )
        c = tx.insert_comment(card.id, CommentKind.QUESTION.value, question, actor)
        meta = {
            **card.meta,
            "hold_cycle": cycle,
            "hold_bound": bound,
            "hold_reason": reason,
            "hold_round": card.delivery_round,
            "hold_at": tx.now(),
            "hold_comment": c.id,
        }
        fields: dict[str, Any] = {
            "status": Status.BLOCKED.value,
            "status_since": tx.now(),
            "heartbeat_at": None,
            "meta": meta,
        }
        new = self._save(tx, card, fields)
        tx.append_event(
            "card.held",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={"ref": card.ref, "from": card.status.value, "cycle": cycle, "bound": bound},
        )
        return new

    def move_in(
        self,
        tx: Tx,
        actor: Actor,
        card: Card,
        to: Status,
        *,
        reason: str | None = None,
        new_round: bool = False,
        fields: dict[str, Any] | None = None,
    ) -> Card:
        """A move inside an open write transaction (used by the workflow pass).

        The same rules as ``move`` (transition table, delivery report); ``new_round``
        starts the next delivery round (a rework); ``fields`` may set ``meta`` or
        ``acceptance`` in the same write. ``done`` is not accepted here: acceptance goes
        through ``move`` so that landing runs inside it.
        """
        if to is Status.DONE:
            raise bad_input("move_in does not close cards", "close a card with Board.move")
        check_transition(card.status, to)
        changes = self._move_fields(tx, actor, card, to)
        extra = dict(fields or {})
        if "meta" in extra and "meta" in changes:
            extra["meta"] = {**changes["meta"], **extra["meta"]}
        changes.update(extra)
        if new_round:
            changes["delivery_round"] = card.delivery_round + 1
        new = self._save(tx, card, changes)
        tx.append_event(
            "card.moved",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={
                "ref": card.ref,
                "from": card.status.value,
                "to": to.value,
                "reason": reason,
                "round": new.delivery_round,
            },
        )
        return new

    def annotate_in(self, tx: Tx, actor: Actor, card: Card, meta: dict[str, Any]) -> Card:
        """Merge ``meta`` into a card's meta inside an open write transaction."""
        new = self._save(tx, card, {"meta": {**card.meta, **meta}})
        tx.append_event(
            "card.edited",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={"fields": ["meta"], "keys": sorted(meta)},
        )
        return new

    def heartbeat(self, actor: Actor, ref: str | int) -> Card:
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            self._may_write(actor, card)
            self._fence(actor, card)
            if card.status is not Status.IN_PROGRESS:
                raise LaneboardError(
                    "STALE_CLAIM",
                    f"{card.ref} is {card.status.value}",
                    "only an in_progress card takes heartbeats",
                )
            if actor.kind is not ActorKind.HUMAN and card.holder not in (None, actor.name):
                raise LaneboardError(
                    "STALE_CLAIM", f"{card.ref} is held by {card.holder}", "claim the card first"
                )
            new = self._save(tx, card, {"heartbeat_at": tx.now()})
            tx.append_event(
                "card.heartbeat",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"epoch": card.claim_epoch},
            )
            return new

    def release(self, actor: Actor, ref: str | int, *, note: str | None = None) -> Card:
        return self.move(actor, ref, "todo", note=note)

    # -- comments, reports, links --------------------------------------------------
    def comment(self, actor: Actor, ref: str | int, body: str, kind: str = "note") -> Comment:
        k = parse_enum(CommentKind, kind, "comment kind")
        body = inputs.text(body, "comment", limit=100_000)
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            self._may_write(actor, card)
            c = tx.insert_comment(card.id, k.value, body, actor)
            tx.append_event(
                "comment.added",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"comment": c.id, "kind": k.value},
            )
            if card.status is Status.AWAITING and actor.is_human:
                self._save(
                    tx,
                    card,
                    {
                        "status": Status.TODO.value,
                        "status_since": tx.now(),
                        "holder": None,
                        "holder_kind": None,
                        "session_id": None,
                        "heartbeat_at": None,
                        "meta": {**card.meta, "answer_comment": c.id},
                    },
                )
                tx.append_event(
                    "card.moved",
                    actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    run_id=card.run_id,
                    payload={
                        "ref": card.ref,
                        "from": "awaiting",
                        "to": "todo",
                        "reason": "human answered",
                        "round": card.delivery_round,
                    },
                )
            return c

    def comments(self, ref: str | int, *, after: int = 0) -> list[Comment]:
        with self.store.read() as tx:
            return tx.comments(self._card(tx, ref).id, after=after)

    def report(
        self,
        actor: Actor,
        ref: str | int,
        body: str,
        *,
        commit: str | None = None,
        evidence: Iterable[Evidence | dict[str, Any]] = (),
        verdict: str | None = None,
        round_: int | None = None,
    ) -> Report:
        body = inputs.text(body, "report body", limit=200_000)
        ev = [e if isinstance(e, Evidence) else Evidence.from_dict(e) for e in evidence]
        if verdict is not None and verdict not in ("APPROVE", "REJECT"):
            raise bad_input(f"verdict {verdict!r} is not valid", "use APPROVE or REJECT")
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            self._may_write(actor, card)
            self._fence(actor, card)
            rnd = round_ if round_ is not None else card.delivery_round
            if rnd != card.delivery_round:
                raise bad_input(
                    f"round {rnd} is not {card.ref}'s round ({card.delivery_round})",
                    "report on the current round",
                )
            if card.terminal:
                raise LaneboardError(
                    "ILLEGAL_TRANSITION",
                    f"{card.ref} is {card.status.value}",
                    "terminal cards take no reports",
                )
            rep = tx.upsert_report(
                card.id, rnd, body, commit, [e.to_dict() for e in ev], verdict, actor
            )
            tx.append_event(
                "report.added",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"round": rnd, "evidence": len(ev), "verdict": verdict},
            )
            return rep

    def reports(self, ref: str | int) -> list[Report]:
        with self.store.read() as tx:
            return tx.reports(self._card(tx, ref).id)

    def link(self, actor: Actor, ref: str | int, depends_on: str | int) -> Card:
        self._human_or_system(actor, "link cards")
        with self.store.write() as tx:
            tx.advisory_lock(tx.store.pg_lock_key("links"))
            card = self._card(tx, ref, lock=True)
            dep = self._card(tx, depends_on)
            if deps.would_cycle(tx.dependency_edges(), card.id, dep.id):
                raise LaneboardError(
                    "DEPENDENCY_CYCLE",
                    f"{card.ref} -> {dep.ref} would close a cycle",
                    "dependencies must form a DAG; remove the opposite link first",
                )
            if tx.insert_link(card.id, dep.id):
                tx.append_event(
                    "link.added",
                    actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    run_id=card.run_id,
                    payload={"depends_on": dep.ref},
                )
            new = tx.card(card.id)
            assert new is not None
            return new

    def unlink(self, actor: Actor, ref: str | int, depends_on: str | int) -> Card:
        self._human_or_system(actor, "unlink cards")
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            dep = self._card(tx, depends_on)
            if not tx.delete_link(card.id, dep.id):
                raise not_found("link", f"{card.ref} -> {dep.ref}")
            tx.append_event(
                "link.removed",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"depends_on": dep.ref},
            )
            new = tx.card(card.id)
            assert new is not None
            return new

    @staticmethod
    def _human_or_system(actor: Actor, what: str) -> None:
        if actor.kind is ActorKind.AGENT:
            raise LaneboardError("FORBIDDEN", f"agents may not {what}", "ask a human")

    # -- candidates and events -----------------------------------------------------
    def candidates(
        self,
        *,
        assignees: Sequence[str] = (),
        include_unassigned: bool = False,
        stale: bool = False,
        project: str | int | None = None,
        limit: int = 50,
    ) -> list[Candidate]:
        with self.store.read() as tx:
            pid = self._project(tx, project).id if project is not None else None
            now = tx.now()
            unassigned = include_unassigned or not assignees
            ready = tx.ready_cards(
                assignees=assignees,
                unassigned=unassigned,
                project_id=pid,
                limit=max(limit * 4, 200),
            )
            stale_cards: list[Card] = []
            if stale:
                stale_cards = [
                    c
                    for c in tx.stale_cards(
                        now - self.windows.stale_ms, assignees=assignees, unassigned=unassigned
                    )
                    if pid is None or c.project_id == pid
                ]
            pool = ready + stale_cards
            fan = deps.downstream_counts(tx.open_dependents(), [c.id for c in pool]) if pool else {}
        stale_ids = {c.id for c in stale_cards}
        ordered = weights.order(pool, now, fan)
        return [
            Candidate(w.card, w.weight, w.fanout, w.card.id in stale_ids) for w in ordered[:limit]
        ]

    def events(
        self,
        after: int = 0,
        *,
        card: str | int | None = None,
        project: str | int | None = None,
        run_id: int | None = None,
        limit: int = 100,
    ) -> list[Event]:
        with self.store.read() as tx:
            cid = self._card(tx, card).id if card is not None else None
            pid = self._project(tx, project).id if project is not None else None
            return tx.events(after, card_id=cid, project_id=pid, run_id=run_id, limit=limit)

    def last_events(self, n: int = 20, *, card: str | int | None = None) -> list[Event]:
        with self.store.read() as tx:
            cid = self._card(tx, card).id if card is not None else None
            return tx.last_events(n, card_id=cid)


PROJECT_SETTINGS = ("workspace", "review_gate", "check_timeout", "base_ref")


def _project_setting(key: str, value: Any) -> Any:
    """Validate one project setting (``None`` only checks the key)."""
    if key not in PROJECT_SETTINGS:
        raise bad_input(
            f"unknown project setting {key!r}", f"settings: {', '.join(PROJECT_SETTINGS)}"
        )
    if value is None:
        return None
    if key == "workspace" and value not in ("lanes", "shared"):
        raise bad_input(f"workspace {value!r} is not valid", "use lanes or shared")
    if key == "review_gate":
        items = value if isinstance(value, list) else [value]
        return inputs.strings(items, "review_gate")
    if key == "check_timeout":
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise bad_input(
                f"check_timeout {value!r} is not a number", "give seconds, e.g. 120"
            ) from None
        if not 0 < seconds <= 3600:
            raise bad_input(f"check_timeout {seconds} is out of range", "use 0 < seconds <= 3600")
        return seconds
    if key == "base_ref":
        return inputs.text(str(value), "base_ref", limit=200).strip()
    return value
