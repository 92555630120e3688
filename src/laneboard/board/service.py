"""The board API. Every write is one transaction that appends its event.

``Board`` is composed of one part per concern: projects (``projects``), cards
(``cards``), moves and holds (``moves``), claims and heartbeats (``claims``), comments,
reports and events (``history``), links and candidates (``links``), runs (``runs``), agent
turns — their transcripts, stop requests and follow-ups (``turns``), a person's answers and
rejections (``decisions``); the lookups and write guards they share are in ``base``, and
the copies of the cards its writes returned, where its next write on them starts, in
``recent``.
"""

from __future__ import annotations

from laneboard.board.base import DeliveryGate, LandingGate, RemoteCheck
from laneboard.board.cards import EDITABLE, CardsMixin
from laneboard.board.decisions import DecisionsMixin
from laneboard.board.deliveries import DeliveriesMixin
from laneboard.board.history import HistoryMixin
from laneboard.board.links import Candidate, LinksMixin
from laneboard.board.moves import TRANSITIONS_TO_BLOCKED, MovesMixin
from laneboard.board.projects import PROJECT_SETTINGS, ProjectsMixin
from laneboard.board.recent import RecentCards, RecentClaimsMixin
from laneboard.board.runs import RunsMixin
from laneboard.board.turns import TurnsMixin
from laneboard.domain import claims, weights
from laneboard.store import Store

__all__ = [
    "EDITABLE",
    "PROJECT_SETTINGS",
    "TRANSITIONS_TO_BLOCKED",
    "Board",
    "Candidate",
    "DeliveryGate",
    "LandingGate",
    "RemoteCheck",
]


class Board(
    DeliveriesMixin,
    ProjectsMixin,
    CardsMixin,
    DecisionsMixin,
    MovesMixin,
    RecentClaimsMixin,
    HistoryMixin,
    LinksMixin,
    RunsMixin,
    TurnsMixin,
):
    def __init__(
        self,
        store: Store,
        windows: claims.ClaimWindows = claims.DEFAULT_WINDOWS,
        *,
        delivery_gate: DeliveryGate | None = None,
        landing_gate: LandingGate | None = None,
        remote_check: RemoteCheck | None = None,
        sla: weights.SlaLimits = weights.DEFAULT_SLA,
    ) -> None:
        self.store = store
        self.windows = windows
        self.sla = sla
        self.delivery_gate = delivery_gate
        self.landing_gate = landing_gate
        self.remote_check = remote_check
        self.recent = RecentCards()
