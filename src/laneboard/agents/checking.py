"""``lb agents check``: per kind found, version, protocol, login, endpoint; and the sandbox."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from laneboard.agents.check_sandbox import summary as check_summary
from laneboard.agents.credentials import Login, login
from laneboard.agents.discovery import KINDS, check_all
from laneboard.agents.permissions import permission_summary
from laneboard.agents.sandbox import SandboxSettings, sandbox_status
from laneboard.config import SupervisorConfig


def check_report(cfg: SupervisorConfig, kinds: Sequence[str], handshake: bool) -> dict[str, Any]:
    kinds_cfg = {k: dict(v) for k, v in cfg.agent_kinds.items()}
    results = check_all(kinds_cfg, handshake=handshake, kinds=tuple(kinds) or KINDS)
    perms = permission_summary(kinds_cfg)["kinds"]
    box = sandbox_status(SandboxSettings(cfg.sandbox, cfg.sandbox_reason))
    rows = []
    for r in results:
        state = login(r.kind, os.environ, kinds_cfg.get(r.kind, {})) if r.found else None
        settings = kinds_cfg.get(r.kind, {})
        if state is not None and _contained(box.mode, box.network, settings):
            state = out_of_the_sandbox(state, r.kind, settings)
        rows.append(
            {**r.to_dict(), "permissions": perms.get(r.kind),
             "login": state.to_dict() if state else None}
        )  # fmt: skip
    return {
        "kinds": rows,
        "available": [
            r["kind"] for r in rows if r["found"] and r["handshake"] is not False and _ready(r)
        ],
        "sandbox": {**box.to_dict(), "line": box.line()},
        "checks": check_summary(cfg, box),
    }


def _contained(mode: str, network: str, settings: dict[str, Any]) -> bool:
    """Whether a kind's sandbox keeps the host's loopback out (a network of its own, or
    macOS's profile) or has no network at all (``network = "none"``)."""
    if mode == "off" or settings.get("network") == "host":
        return False
    return network in ("isolated", "profile") or settings.get("network") == "none"


def out_of_the_sandbox(state: Login, kind: str, settings: dict[str, Any]) -> Login:
    """An endpoint the kind's sandbox does not reach, however well it answers here:
    unreachable, with the fix. One on this machine's loopback is reached only through
    ``host_ports`` (``agents.relay``); with ``network = "none"``, nothing else is."""
    if not state.endpoint or settings.get("network") == "host":
        return state
    url = urlsplit(state.endpoint)
    loopback = _loopback(url.hostname or "")
    none = settings.get("network") == "none"
    if not loopback and not none:
        return state
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        port = None
    if loopback and port in (settings.get("host_ports") or ()):  # checked when loaded
        return state  # relayed into the sandbox
    table = f"[supervisor.agent_kinds.{kind}]"
    problem = (
        f"endpoint {state.endpoint} is on this machine's loopback, which the agents' sandbox "
        f"does not reach: set host_ports = [{port or 'PORT'}] in {table} (docs/sandbox.md)"
        if loopback
        else f'endpoint {state.endpoint} is out of reach of a sandbox with network = "none": '
        f"unset network in {table} (docs/sandbox.md)"
    )
    return Login(state.logged_in, state.how, state.endpoint, False, state.problem or problem)


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
