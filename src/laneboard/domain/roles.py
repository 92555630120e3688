"""Roles: what a worker, reviewer or director is asked to be, and which tools it gets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LANES = ("worker", "reviewer", "director")


@dataclass(frozen=True)
class Role:
    id: str
    agent: str = "scripted"  # agent kind that carries the role: claude|codex|pi|command|scripted
    lanes: tuple[str, ...] = ("worker",)
    title: str = ""
    responsibilities: tuple[str, ...] = ()
    boundaries: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()
    self_check: tuple[str, ...] = ()
    reviewer_prompt: str = ""
    source: str = "builtin"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def lane(self) -> str:
        """The role's primary lane."""
        return self.lanes[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent": self.agent,
            "lanes": list(self.lanes),
            "title": self.title,
            "responsibilities": list(self.responsibilities),
            "boundaries": list(self.boundaries),
            "shapes": list(self.shapes),
            "self_check": list(self.self_check),
            "reviewer_prompt": self.reviewer_prompt,
            "source": self.source,
        }
