"""Board services: the one API behind the CLI, the HTTP API and MCP.

``Board`` is loaded on first use, so importing a light module of this package (the
``authority`` declarations the operation table names) does not open the store layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laneboard.board.service import Board

__all__ = ["Board"]


def __getattr__(name: str) -> Any:
    if name == "Board":
        from laneboard.board.service import Board

        return Board
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
