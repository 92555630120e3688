"""Cards: create, read, list and edit."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from laneboard.board import authority, inputs
from laneboard.board.base import BoardBase
from laneboard.domain.model import (
    AcceptanceMode,
    Actor,
    ActorKind,
    Card,
    CardKind,
    Project,
    check_priority,
    parse_enum,
)
from laneboard.domain.status import Status, parse_status
from laneboard.errors import LaneboardError, bad_input
from laneboard.store import IntegrityError
from laneboard.store.tx import Tx

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


class CardsMixin(BoardBase):
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
        acceptance_mode: str | None = None,
        checks: Iterable[str] = (),
        allowed_paths: Iterable[str] | None = None,
        status: str = "todo",
        depends_on: Iterable[str | int] = (),
        meta: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        run_id: int | None = None,
        tx: Tx | None = None,
        runtime_meta: dict[str, Any] | None = None,
    ) -> Card:
        """Create a card. With ``tx`` the card is written inside that open write
        transaction (the caller commits it, and a constraint failure propagates).
        ``acceptance_mode`` and ``allowed_paths`` left as None take the project's defaults
        (``project.acceptance_mode``, ``project.allowed_paths``; docs/configuration.md).

        ``meta`` comes from the caller (an agent never sets a reserved key in it);
        ``runtime_meta`` is what a board rule stamps on the card it creates for an agent
        (a stage handoff's follow-up), never a surface's argument."""
        title = inputs.text(title, "title", limit=500)
        inputs.text(description, "description", empty=True, multiline=True)
        given = inputs.meta(meta) if meta is not None else {}
        authority.check_new_meta(actor, given)
        kind_v = parse_enum(CardKind, kind, "card kind")
        mode = (
            None
            if acceptance_mode is None
            else parse_enum(AcceptanceMode, acceptance_mode, "acceptance mode")
        )
        st = parse_status(status)
        if st not in (Status.BACKLOG, Status.TODO):
            raise bad_input(f"a new card cannot start in {st.value}", "use backlog or todo")
        check_priority(priority)
        crit = inputs.criteria(acceptance)
        label_l = inputs.strings(labels, "labels")
        check_l = inputs.strings(checks, "checks")
        paths = None if allowed_paths is None else [inputs.repo_path(p) for p in allowed_paths]
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
                {**given, **(runtime_meta or {})},
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
        mode: AcceptanceMode | None,
        checks_: list[str],
        paths: list[str] | None,
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
        mode: AcceptanceMode | None,
        checks_: list[str],
        paths: list[str] | None,
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
        if mode is None or paths is None:
            mode, paths = _project_defaults(tx, p, mode, paths)
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
        if run_id is not None:
            self.check_run_for_card(tx, run_id, p.id)
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

    def card_by_key(self, key: str) -> Card | None:
        """The card an idempotency key created (while the key is held), if any."""
        with self.store.read() as tx:
            return tx.card_by_key(key)

    def card_detail(
        self, ref: str | int, *, check: Callable[[Tx, Card], None] | None = None
    ) -> dict[str, Any]:
        """A card with its comments, reports, dependencies and turns, in one read;
        ``check`` (a read scope) sees the card first and may refuse it."""
        with self.store.read() as tx:
            card = self._card(tx, ref)
            if check is not None:
                check(tx, card)
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
        ids: Sequence[int] | None = None,
        text: str | None = None,
        limit: int = 500,
    ) -> list[Card]:
        """Cards by filter; ``ids`` (when given) keeps only these cards; ``text`` keeps the
        cards whose title, description or a comment contains it (any case)."""
        return self._listed(
            False,
            project=project,
            statuses=statuses,
            assignee=assignee,
            unassigned=unassigned,
            label=label,
            parent=parent,
            run_id=run_id,
            ids=ids,
            text=text,
            limit=limit,
        )

    def list_card_dicts(self, **filters: Any) -> list[dict[str, Any]]:
        """``list_cards`` (same filters) as the cards' dictionaries, built from the rows."""
        return self._listed(True, **filters)

    def _listed(
        self,
        as_dicts: bool,
        *,
        project: str | int | None = None,
        statuses: Sequence[str] = (),
        assignee: str | None = None,
        unassigned: bool = False,
        label: str | None = None,
        parent: str | int | None = None,
        run_id: int | None = None,
        ids: Sequence[int] | None = None,
        text: str | None = None,
        limit: int = 500,
    ) -> list[Any]:
        for s in statuses:
            parse_status(s)
        if limit < 1 or limit > 10_000:
            raise bad_input(f"limit {limit} is out of range", "use a limit from 1 to 10000")
        for name, value in (("assignee", assignee), ("label", label), ("search text", text)):
            if value is not None:
                inputs.text(value, name, limit=500, empty=True)
        if run_id is not None:
            inputs.row_id(run_id, "run")
        if ids is not None and not ids:
            return []
        with self.store.read() as tx:
            pid = self._project(tx, project).id if project is not None else None
            parent_id = self._card(tx, parent).id if parent is not None else None
            rendered = tx.list_card_dicts if as_dicts else tx.list_cards
            return rendered(
                project_id=pid,
                statuses=statuses,
                assignee=assignee,
                unassigned=unassigned,
                label=label,
                parent_id=parent_id,
                run_id=run_id,
                ids=ids or (),
                text=text or None,
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
                fields[k] = inputs.text(v, "description", empty=True, multiline=True)
            elif k == "priority":
                fields[k] = check_priority(_whole(v, "priority"))
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
                fields[k] = inputs.meta(v)
            elif k == "parent" and v is not None:
                fields[k] = inputs.card_ref(v)
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
            authority.check_edit(actor, card, fields)
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
                fields["meta"] = inputs.meta({**card.meta, **fields["meta"]})
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


def _project_defaults(
    tx: Tx, project: Project, mode: AcceptanceMode | None, paths: list[str] | None
) -> tuple[AcceptanceMode, list[str]]:
    """The project's ``acceptance_mode`` and ``allowed_paths`` where the caller gave none."""
    from laneboard.config import effective_project_config

    cfg = effective_project_config(project, tx.project_config(project.id))
    if mode is None:
        mode = parse_enum(AcceptanceMode, str(cfg["acceptance_mode"]), "acceptance mode")
    return mode, list(cfg["allowed_paths"]) if paths is None else paths


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise bad_input(f"{what} must be a whole number", f"pass {what} as 0-3")
    try:
        return int(value)
    except ValueError:
        raise bad_input(f"{what} {inputs.clean_repr(value)} is not a number", "use 0-3") from None
