"""The budgets of an orchestrated run and the usage counted against them.

Both are stored in the run and never reset by a resume. ``model_calls`` counts every
dispatched turn and steer, failed or uncertain ones included; ``output_bytes`` counts
reply, reasoning and tool-argument text; ``elapsed_ms`` is aggregate running time.
Specialists waiting for input release their active slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from laneboard.errors import LaneboardError

MIB = 1024 * 1024


@dataclass(frozen=True)
class Budgets:
    max_active_specialists: int = 2
    max_model_calls: int = 64
    max_output_bytes: int = MIB
    max_elapsed_secs: int = 3600
    max_depth: int = 8
    check_timeout_secs: int = 120
    debounce_ms: int = 1000

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Budgets:
        known = {f.name for f in fields(Budgets)}
        out = Budgets()
        for key, value in d.items():
            if key not in known:
                raise LaneboardError(
                    "BAD_INPUT",
                    f"unknown budget {key!r}",
                    f"use one of: {', '.join(sorted(known))}",
                )
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LaneboardError(
                    "BAD_INPUT",
                    f"budget {key} must be a whole number >= 0, not {value!r}",
                    f"give --{key.replace('_', '-')} N",
                )
            if value == 0 and key in ("max_active_specialists", "max_depth"):
                raise LaneboardError(
                    "BAD_INPUT", f"budget {key} must be at least 1", f"raise --{key}"
                )
            out = replace(out, **{key: value})
        return out


@dataclass(frozen=True)
class Usage:
    model_calls: int = 0
    output_bytes: int = 0
    elapsed_ms: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Usage:
        return Usage(
            int(d.get("model_calls", 0)), int(d.get("output_bytes", 0)), int(d.get("elapsed_ms", 0))
        )

    def add(self, *, calls: int = 0, output: int = 0, elapsed_ms: int = 0) -> Usage:
        return Usage(
            self.model_calls + calls, self.output_bytes + output, self.elapsed_ms + elapsed_ms
        )


def exhausted(b: Budgets, u: Usage) -> str | None:
    """The first budget the usage has used up (``model_calls``, ...), or None."""
    if u.model_calls >= b.max_model_calls:
        return "model_calls"
    if u.output_bytes >= b.max_output_bytes:
        return "output_bytes"
    if u.elapsed_ms >= b.max_elapsed_secs * 1000:
        return "elapsed_secs"
    return None


def report(b: Budgets, u: Usage, active: int) -> dict[str, dict[str, int]]:
    """Usage against each budget, as ``lb run show`` prints it."""
    return {
        "active_specialists": {"used": active, "limit": b.max_active_specialists},
        "model_calls": {"used": u.model_calls, "limit": b.max_model_calls},
        "output_bytes": {"used": u.output_bytes, "limit": b.max_output_bytes},
        "elapsed_secs": {"used": u.elapsed_ms // 1000, "limit": b.max_elapsed_secs},
    }


def slots(b: Budgets, running: int) -> int:
    """How many more specialist turns may start now."""
    return max(0, b.max_active_specialists - running)
