"""Local mode: ``lb`` opens the board's database itself and calls the operation in-process,
through the same invoke path the servers use."""

from __future__ import annotations

import json
import os
from functools import cached_property
from typing import Any

from laneboard.cli.common import clock_from_env, keep_token, token_from_env, user_name
from laneboard.errors import LaneboardError
from laneboard.ops.invoke import Call, invoke
from laneboard.ops.spec import Op, Params

# operations that make the board when there is none yet (as lb init does); every other
# operation refuses a board that does not exist
CREATES_BOARD = frozenset({"project.add"})
# operations that read this machine's configuration: a bad file is refused (CONFIG_INVALID,
# with its line) before the board is looked for
READS_CONFIG = frozenset({"status", "doctor"})


class LocalRunner:
    def __init__(self, db: str | None) -> None:
        self.db = db
        self.create = False

    @cached_property
    def store(self) -> Any:
        from laneboard.store import open_store

        return open_store(self.db, clock_from_env(), create=self.create)

    @cached_property
    def board(self) -> Any:
        from laneboard.board.service import Board
        from laneboard.workspace.hooks import install

        return install(Board(self.store))  # delivery verification and landing gates

    def actor(self) -> Any:
        token = token_from_env()
        if token:
            from laneboard.board.tokens import Tokens

            return Tokens(self.store).resolve(token)
        from laneboard.domain.model import human

        return human(user_name())

    def call(self, op: Op, params: Params) -> tuple[Any, dict[str, Any]]:
        self.create = op.name in CREATES_BOARD
        if op.name in READS_CONFIG:
            from laneboard.config import load_supervisor_config

            load_supervisor_config()
        token_file = os.environ.get("LANEBOARD_TOKEN_FILE") or None
        call = Call(self.board, self.actor(), renew=token_file is not None)
        try:
            data = invoke(op, call, params)
        except Exception as exc:  # the database went away mid-call: one line, not a trace
            from laneboard.ops.endpoint import store_error

            known = None if isinstance(exc, LaneboardError) else store_error(exc)
            if known is None:
                raise
            raise known from exc
        if call.token and token_file:
            keep_token(token_file, call.token)
        # what a remote board would send: the same JSON, so the same rendering
        return json.loads(json.dumps(data)), call.notes
