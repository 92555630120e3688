"""The environment an agent session runs with.

The agent inherits the user's environment (its API keys, PATH, HOME, proxies), but never
laneboard's own secrets: every ``LANEBOARD_*`` variable is dropped, then the three the
session is meant to see are set — the card-scoped ``LANEBOARD_TOKEN``, ``LANEBOARD_CARD``
and ``LANEBOARD_URL`` (the supervisor's board socket, where the session's ``lb`` sends its
calls) — and any variable named in the configured secret list (``secret_env`` in an
agent kind's settings) is dropped too. No database URL or path is ever passed. The one
setting of laneboard's that the session's ``lb`` reads, ``LANEBOARD_RETRY_S`` (how long a
call refused while the board is out of reach is made again), is passed on when set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

GIVEN = ("LANEBOARD_TOKEN", "LANEBOARD_CARD", "LANEBOARD_URL")
# session-specific values the pool may pass in ``extra`` (never inherited from the parent)
SESSION = (
    "LANEBOARD_TOKEN_FILE",
    "LANEBOARD_AGENT_STATE",
    "LANEBOARD_AGENT_STDERR",
    "LANEBOARD_NOW",
)
# the supervisor's own settings its sessions' ``lb`` honours too (passed on when set)
INHERITED = ("LANEBOARD_RETRY_S",)


def agent_env(
    base: Mapping[str, str],
    *,
    token: str | None,
    card_ref: str | None,
    board_url: str | None,
    extra: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> dict[str, str]:
    drop = set(secrets)
    env = {k: v for k, v in base.items() if not k.startswith("LANEBOARD_") and k not in drop}
    for key in INHERITED:
        if base.get(key):
            env[key] = base[key]
    for key, value in zip(GIVEN, (token, card_ref, board_url), strict=True):
        if value:
            env[key] = value
    for key, value in (extra or {}).items():
        if key.startswith("LANEBOARD_") and key not in GIVEN and key not in SESSION:
            continue  # laneboard's own settings never reach the agent
        env[key] = value
    return env
