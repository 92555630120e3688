"""Install the runtime's delivery and landing gates, and the check of a shared git remote
a person names, on a Board.

Kept import-light: the workspace code loads only when a gate actually runs, so a read
command such as ``lb card get`` starts as fast as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laneboard.errors import LaneboardError

if TYPE_CHECKING:
    from laneboard.agents.check_sandbox import CheckSandbox
    from laneboard.board.service import Board
    from laneboard.domain.model import Card, Evidence


def install(board: Board, clones: str | None = None, checks: CheckSandbox | None = None) -> Board:
    """Give ``board`` the delivery gate (verify), the landing gate (land) and the remote
    check (``git ls-remote`` when a project's remote is named); returns it.
    ``clones``: where this machine keeps its clones of projects' remotes (default: the
    state directory's ``clones``). ``checks``: the sandbox a delivery's checks run in
    (default: the one the user's configuration gives, read when a check first runs)."""
    store = board.store

    def delivery_gate(card: Card) -> list[Evidence]:
        from laneboard.board.turns import record_checks
        from laneboard.workspace.verify import verify_delivery

        sandbox_for = checks
        if sandbox_for is None:
            from laneboard.agents.check_sandbox import from_user_config

            sandbox_for = from_user_config(store.url)
        v = verify_delivery(store, card, sandbox_for)
        record_checks(store, card, v.evidence)
        if not v.ok:
            raise LaneboardError("VERIFICATION_FAILED", v.message, v.fix, **v.details())
        return v.evidence

    def landing_gate(card: Card) -> str | None:
        from laneboard.workspace.land import land

        res = land(store, card, clones)
        if res.blocked is not None:
            raise LaneboardError(
                "LANDING_BLOCKED",
                f"{card.ref} was not landed: {res.blocked}",
                f"see the note on the card, then run: lb land {card.ref}",
                commands=res.commands,
            )
        return res.merge_commit

    def remote_check(url: str, base_ref: str | None, set_base: str) -> None:
        from laneboard.workspace.remote import check_remote

        problem = check_remote(url, base_ref, set_base=set_base)
        if problem is not None:
            raise LaneboardError(problem.code, problem.message, problem.fix)

    board.delivery_gate = delivery_gate
    board.landing_gate = landing_gate
    board.remote_check = remote_check
    return board
