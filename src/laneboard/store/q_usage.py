"""What agent turns used, for the dashboard's charts."""

from __future__ import annotations

from collections.abc import Sequence

from laneboard.store.base import Row
from laneboard.store.q_base import Queries

CHUNK = 500  # ids per IN list


class UsageQueries(Queries):
    def turn_usage_rows(self, card_ids: Sequence[int]) -> list[Row]:
        """Each turn of these cards: card, agent kind, tokens, cost, duration and start."""
        out: list[Row] = []
        ids = list(card_ids)
        for k in range(0, len(ids), CHUNK):
            part = ids[k : k + CHUNK]
            out.extend(
                self.all(
                    "SELECT card_id, agent_kind, input_tokens, output_tokens, cost_usd, "
                    "duration_ms, started_at FROM turns WHERE card_id IN ("
                    + ",".join("?" * len(part))
                    + ") ORDER BY id",
                    part,
                )
            )
        return out
