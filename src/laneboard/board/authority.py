"""Who may call what: the one place the board decides a caller's authority.

Every operation declares one ``Caller`` class; every surface (CLI, HTTP, MCP) reaches the
board through the same invoke path, which calls ``require`` before the service call. The
service methods themselves then apply the finer rules defined here: an agent writes only
its own card (``may_write``), never the fields in ``AGENT_FIXED_FIELDS``, never a key of
``RESERVED_META`` (``check_edit``, ``check_new_meta``), gives a verdict only on a review
card (``check_verdict``), and reads only what ``access`` allows. Error codes are the same
on every surface.

The runtime (a ``system`` actor) acts for the person who started it: no credential can
produce a ``system`` actor, so what a person may do, the runtime may do too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, Protocol

from laneboard.domain.model import Actor, ActorKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError


class Caller(StrEnum):
    """Who may call an operation."""

    PERSON = "person"  # a human credential (or the runtime acting for one); never an agent
    OWN_CARD = "own_card"  # a human, the runtime, or an agent writing the card it is scoped to
    CARD_READER = "card_reader"  # anyone; an agent reads only its card, dependencies, events
    SYSTEM = "system"  # the runtime only (supervisor, workflow)


class CardLike(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def ref(self) -> str: ...

    @property
    def claim_epoch(self) -> int: ...


# Fields of a card only a person (or the runtime) sets: the statement of the work, what
# it is checked against, and where it sits on the board. An agent edits only its own
# card's labels and its non-reserved meta keys.
AGENT_FIXED_FIELDS = frozenset(
    {
        "title",
        "description",
        "acceptance",
        "acceptance_mode",
        "checks",
        "allowed_paths",
        "assignee",
        "parent",
        "kind",
        "priority",
    }
)

# The director lane's board identity. It routes an unassigned todo card by setting its
# assignee, under a credential scoped to that card, and decides stage handoffs.
DIRECTOR = "Director"

# Every ``meta`` key laneboard itself writes or steers by, grouped by its writer. Only a
# person (or the runtime) sets them; an agent credential never does, on any card.
RESERVED_META_BY_WRITER: dict[str, frozenset[str]] = {
    "review workflow": frozenset(
        {
            "review_of",
            "review_of_ref",
            "review_round",
            "flow",
            "script",
            "review_verdict",
            "review_verdict_round",
            "review_verdict_author",
            "review_verdict_at",
            "review_card",
            "review_retry",
            "review_problem",
            "accepted_by",
            "acceptance_blocked",
            "rework_round",
            "rework_base_round",
            "loop_resume",
            "fix_of",
            "fix_round",
            "human_reject",
        }
    ),
    "landing": frozenset(
        {"merge_commit", "landing_conflict", "conflict_resolve", "conflict_attempts"}
    ),
    "moves and holds": frozenset(
        {
            "awaiting",
            "blocked",
            "released_key",
            "hold_cycle",
            "hold_bound",
            "hold_reason",
            "hold_round",
            "hold_at",
            "hold_comment",
            "hold_fix",
        }
    ),
    "question lane": frozenset({"answer_comment"}),
    "supervisor": frozenset({"dispatch_failures", "dispatch_error", "dispatch_failed_at"}),
    "the sandbox boundary": frozenset({"boundary_violation_round", "review_evidence"}),
    "director and stage handoffs": frozenset(
        {
            "handoff_from",
            "handoff_round",
            "handoff_consumed_round",
            "handoff_declined_round",
            "handoff_reason",
            "handoff_follow_ups",
        }
    ),
    "schedules": frozenset({"schedule", "occurrence"}),
    "orchestrated runs": frozenset({"assignment", "coordinator"}),
    # set by a person, read by the runtime to decide what it does
    "workflow settings": frozenset(
        {
            "stage_handoff",
            "review_script",
            "fix_assignee",
            "fix_child_meta",
            "director_script",
            "accepted_round",
        }
    ),
}
RESERVED_META: frozenset[str] = frozenset().union(*RESERVED_META_BY_WRITER.values())


def is_scoped_agent(actor: Actor) -> bool:
    return actor.kind is ActorKind.AGENT and actor.card_id is not None


def require(actor: Actor, caller: Caller, what: str) -> None:
    """Refuse ``actor`` for an operation declared with ``caller`` (``FORBIDDEN``).

    ``OWN_CARD`` and ``CARD_READER`` refuse nobody here: which card an agent may write or
    read is decided by the service call (``may_write``, ``access``)."""
    if caller is Caller.PERSON and actor.kind is ActorKind.AGENT:
        raise LaneboardError(
            "FORBIDDEN",
            f"only a person may {what}; this is an agent credential ({actor.name})",
            "ask a person to do it with their own lb",
        )
    if caller is Caller.SYSTEM and actor.kind is not ActorKind.SYSTEM:
        raise LaneboardError(
            "FORBIDDEN", f"only the runtime may {what}", "this happens on its own; do not call it"
        )


def may_write(actor: Actor, card: CardLike) -> None:
    """A card-scoped agent credential writes only its own card, and only while its claim
    is the card's current one: once the card was claimed again (taken over from a fenced
    host, or a later round), whatever status it is in now, the older credential's
    writes are refused (a late agent would otherwise replace the report under review,
    move or edit the card)."""
    if is_scoped_agent(actor) and actor.card_id != card.id:
        raise LaneboardError(
            "FORBIDDEN",
            f"this agent credential is scoped to card {actor.card_id}, not {card.ref}",
            "agents write only the card they were dispatched for",
        )
    if (
        actor.kind is ActorKind.AGENT
        and actor.card_id == card.id
        and actor.epoch is not None
        and actor.epoch < card.claim_epoch  # superseded (a newer one is minted ahead)
    ):
        raise stale_epoch(actor.epoch, card)


def stale_epoch(epoch: int, card: CardLike) -> LaneboardError:
    """The refusal of a write made under a claim epoch that is not the card's."""
    return LaneboardError(
        "STALE_CLAIM",
        f"claim epoch {epoch} on {card.ref} is stale (current {card.claim_epoch})",
        "your claim was taken over; stop working on this card",
    )


def reserved_keys(keys: Iterable[str]) -> list[str]:
    return sorted(k for k in keys if k in RESERVED_META)


def _refuse_meta(actor: Actor, keys: list[str], ref: str) -> LaneboardError:
    return LaneboardError(
        "FORBIDDEN",
        f"meta {', '.join(keys)} on {ref} is written by laneboard itself, "
        f"not by an agent credential ({actor.name})",
        "keep your own notes under other meta keys; see docs/security.md for the reserved keys",
    )


def check_new_meta(actor: Actor, meta: Mapping[str, Any], ref: str = "a new card") -> None:
    """An agent never sets a reserved ``meta`` key."""
    if actor.kind is not ActorKind.AGENT:
        return
    taken = reserved_keys(meta)
    if taken:
        raise _refuse_meta(actor, taken, ref)


def _routes(actor: Actor, card: Any, fields: Mapping[str, Any]) -> bool:
    """The director assigning an unassigned todo card it was handed to route."""
    return (
        actor.name == DIRECTOR
        and actor.card_id == card.id
        and card.status is Status.TODO
        and card.assignee is None
        and fields.get("assignee") is not None
    )


def check_edit(actor: Actor, card: Any, fields: Mapping[str, Any]) -> None:
    """What an agent may change on its own card: labels and non-reserved meta keys."""
    if actor.kind is not ActorKind.AGENT:
        return
    fixed = sorted(AGENT_FIXED_FIELDS & set(fields))
    if fixed == ["assignee"] and _routes(actor, card, fields):
        fixed = []
    if fixed:
        raise LaneboardError(
            "FORBIDDEN",
            f"an agent credential ({actor.name}) may not change {', '.join(fixed)} of {card.ref}",
            "ask a person to change them; an agent edits only labels and its own meta keys",
        )
    meta = fields.get("meta")
    if isinstance(meta, Mapping):
        check_new_meta(actor, meta, card.ref)


def check_verdict(actor: Actor, card: Any, verdict: str | None) -> None:
    """An agent's report carries a verdict only on a review card (never on the work)."""
    if verdict is None or actor.kind is not ActorKind.AGENT:
        return
    if card.meta.get("review_of") is None:
        raise LaneboardError(
            "ACCEPTANCE_FORBIDDEN",
            f"{card.ref} is not a review card: {actor.name} cannot give it a verdict",
            "report without a verdict; its review card decides",
        )
