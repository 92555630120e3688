"""``lb agents check``: per kind found, version, protocol, login, endpoint; and the sandbox."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from laneboard.agents.credentials import login
from laneboard.agents.discovery import KINDS, check_all
from laneboard.agents.permissions import permission_summary
from laneboard.agents.sandbox import SandboxSettings, sandbox_status
from laneboard.config import SupervisorConfig


def check_report(cfg: SupervisorConfig, kinds: Sequence[str], handshake: bool) -> dict[str, Any]:
    kinds_cfg = {k: dict(v) for k, v in cfg.agent_kinds.items()}
    results = check_all(kinds_cfg, handshake=handshake, kinds=tuple(kinds) or KINDS)
    perms = permission_summary(kinds_cfg)["kinds"]
    rows = []
    for r in results:
        state = login(r.kind, os.environ, kinds_cfg.get(r.kind, {})) if r.found else None
        rows.append(
            {**r.to_dict(), "permissions": perms.get(r.kind),
             "login": state.to_dict() if state else None}
        )  # fmt: skip
    box = sandbox_status(SandboxSettings(cfg.sandbox, cfg.sandbox_reason))
    return {
        "kinds": rows,
        "available": [
            r["kind"] for r in rows if r["found"] and r["handshake"] is not False and _ready(r)
        ],
        "sandbox": {**box.to_dict(), "line": box.line()},
    }


def _ready(row: dict[str, Any]) -> bool:
    state = row.get("login")
    return state is None or (state["logged_in"] and state["reachable"] is not False)


def status_word(row: dict[str, Any]) -> str:
    state = row.get("login")
    if not row["found"]:
        return "-"
    if row["handshake"] is False:
        return "FAILED"
    if state is not None and not state["logged_in"]:
        return "not logged in"
    if state is not None and state["reachable"] is False:
        return "unreachable"
    return "ok"
