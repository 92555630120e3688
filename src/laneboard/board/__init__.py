"""Board services: the one API behind the CLI, the HTTP API and MCP."""

from laneboard.board.service import Board

__all__ = ["Board"]
