"""Finding each agent kind's CLI, asking its version, and checking its resident protocol.

A kind's binary is the ``binary`` setting of ``[supervisor.agent_kinds.<kind>]`` when set
(and then only that path: a configured path that does not exist is reported, never
silently replaced by another binary on PATH), else the first ``claude`` / ``codex`` / ``pi``
on PATH. ``probe`` reports found, path, version and — when asked — whether the resident
protocol answered a handshake that costs no model call: Claude's ``initialize`` control
request, Codex app-server's ``initialize`` request, Pi RPC's ``get_state``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from laneboard.agents.base import AdapterError, ConfigurationError, ProbeResult
from laneboard.domain.roles import Role
from laneboard.errors import LaneboardError

KINDS = ("claude", "codex", "pi")
DEFAULT_ORDER = KINDS
BINARY_NAMES = {"claude": "claude", "codex": "codex", "pi": "pi"}
VERSION_TIMEOUT_S = 20.0
HANDSHAKE_TIMEOUT_S = 20.0


def configured_binary(config: Mapping[str, Any]) -> str | None:
    raw = config.get("binary")
    return os.path.expanduser(str(raw)) if raw else None


def find_binary(kind: str, config: Mapping[str, Any], path: str | None = None) -> str | None:
    """The binary for ``kind``: the configured path, else PATH; None when there is none."""
    declared = configured_binary(config)
    if declared:
        return declared if os.path.isfile(declared) and os.access(declared, os.X_OK) else None
    search = path if path is not None else config.get("path") or os.environ.get("PATH", "")
    return shutil.which(BINARY_NAMES.get(kind, kind), path=search)


def require_binary(kind: str, config: Mapping[str, Any]) -> str:
    found = find_binary(kind, config)
    if found:
        return found
    declared = configured_binary(config)
    if declared:
        fix = f"fix [supervisor.agent_kinds.{kind}] binary"
        raise ConfigurationError(
            f"{kind}: the configured binary {declared} does not exist or is not executable — {fix}",
            fix,
        )
    fix = f"install {BINARY_NAMES.get(kind, kind)} or set [supervisor.agent_kinds.{kind}] binary"
    raise ConfigurationError(
        f"{kind}: no {BINARY_NAMES.get(kind, kind)} on PATH — install it or "
        f"set [supervisor.agent_kinds.{kind}] binary",
        fix,
    )


def log_dir(config: Mapping[str, Any]) -> str:
    if config.get("log_dir"):
        return str(config["log_dir"])
    from laneboard.config import state_dir

    return os.path.join(state_dir(), "agents")


def stderr_path(
    kind: str, config: Mapping[str, Any], env: Mapping[str, str], session_id: str | None
) -> str:
    """Where a session's stderr goes: the file the pool names for the session
    (``LANEBOARD_AGENT_STDERR``, one per lane), else ``<log_dir>/<kind>-<session id>``."""
    given = env.get("LANEBOARD_AGENT_STDERR")
    if given:
        return given
    name = f"{kind}-{session_id}" if session_id else f"{kind}-{os.getpid()}-{time.time_ns()}"
    return os.path.join(log_dir(config), f"{name}.stderr")


_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?")


def parse_version(text: str) -> str | None:
    m = _VERSION.search(text)
    return m.group(0) if m else None


def version_of(binary: str, env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(version, error)."""
    try:
        out = subprocess.run(
            [binary, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            env=dict(env or os.environ),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"--version failed: {exc}"
    text = (out.stdout or "") + (out.stderr or "")
    version = parse_version(text)
    if out.returncode != 0 or version is None:
        return None, f"--version exited {out.returncode}: {' '.join(text.split())[:200]}"
    return version, None


# -- handshakes ------------------------------------------------------------------------------


def _handshake_spec(kind: str) -> tuple[list[str], list[dict[str, Any]]]:
    if kind == "claude":
        return (
            [
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--no-session-persistence",
            ],
            [
                {
                    "type": "control_request",
                    "request_id": "lb-check",
                    "request": {"subtype": "initialize"},
                }
            ],
        )
    if kind == "codex":
        return (
            ["app-server"],
            [
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"clientInfo": {"name": "laneboard", "version": "check"}},
                }
            ],
        )
    if kind == "pi":
        return (["--mode", "rpc", "--no-session"], [{"id": "lb-check", "type": "get_state"}])
    raise AdapterError(f"no handshake for agent kind {kind!r}")


def _answered(kind: str, obj: dict[str, Any]) -> bool | None:
    """True/False once the handshake's answer arrived, None while waiting."""
    if kind == "claude" and obj.get("type") == "control_response":
        resp = obj.get("response") or {}
        return bool(resp.get("subtype") == "success")
    if kind == "codex" and obj.get("id") == 1:
        return "result" in obj
    if kind == "pi" and obj.get("type") == "response" and obj.get("id") == "lb-check":
        return bool(obj.get("success"))
    return None


def run_handshake(
    kind: str,
    binary: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = HANDSHAKE_TIMEOUT_S,
) -> tuple[bool, str | None]:
    """Start the resident protocol, send one request, wait for its answer, stop."""
    from laneboard.agents.procs import LineProcess

    args, lines = _handshake_spec(kind)
    workdir = cwd or os.getcwd()
    try:
        proc = LineProcess(
            [binary, *args], cwd=workdir, env=dict(env or os.environ), stderr_path=None
        )
    except OSError as exc:
        return False, f"could not start: {exc}"
    try:
        for obj in lines:
            proc.write_json(obj)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False, f"no answer to the handshake within {timeout:.0f} s"
            try:
                raw = proc.lines.get(timeout=left)
            except queue.Empty:
                continue
            if raw is None:
                return False, f"exited during the handshake (exit code {proc.proc.poll()})"
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                verdict = _answered(kind, obj)
                if verdict is not None:
                    return verdict, None if verdict else f"handshake refused: {raw[:200]}"
    except OSError as exc:
        return False, f"handshake failed: {exc}"
    finally:
        proc.kill()
        proc.close()


def probe(
    kind: str,
    config: Mapping[str, Any],
    *,
    handshake: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> ProbeResult:
    binary = find_binary(kind, config, path=(env or {}).get("PATH") if env else None)
    if binary is None:
        declared = configured_binary(config)
        missing = (
            f"configured binary {declared} does not exist"
            if declared
            else f"{BINARY_NAMES.get(kind, kind)} is not on PATH"
        )
        return ProbeResult(kind, False, path=declared, error=missing)
    version, error = version_of(binary, env)
    shook: bool | None = None
    herr: str | None = None
    if handshake:
        shook, herr = run_handshake(kind, binary, env=env, cwd=cwd)
        error = error if error else herr
    return ProbeResult(kind, True, path=binary, version=version, handshake=shook, error=error)


def check_all(
    kinds_config: Mapping[str, Mapping[str, Any]],
    *,
    handshake: bool = True,
    env: Mapping[str, str] | None = None,
    kinds: Sequence[str] = KINDS,
) -> list[ProbeResult]:
    return [probe(k, kinds_config.get(k) or {}, handshake=handshake, env=env) for k in kinds]


# -- role placement --------------------------------------------------------------------------


def carriers(role: Role) -> list[str]:
    """The kinds that carry a role: its ``agent`` first, then its ``agents`` list."""
    out = [role.agent] if role.agent else []
    for kind in role.extra.get("agents") or ():
        if isinstance(kind, str) and kind not in out:
            out.append(kind)
    return out


def resolve_role_kind(
    role: Role, available_kinds: Iterable[str], kind_order: Sequence[str] = DEFAULT_ORDER
) -> str | None:
    """The kind a role runs on: its own kind when available, else the first available kind
    in ``kind_order`` that also carries the role; ``agent = "any"`` takes the first available
    kind in the order. None when no available kind carries it (the caller reports that)."""
    available = list(available_kinds)
    kinds = carriers(role)
    if "any" in kinds:
        for kind in [*kind_order, *available]:
            if kind in available:
                return kind
        return None
    if kinds and kinds[0] in available:
        return kinds[0]
    for kind in kind_order:
        if kind in kinds and kind in available:
            return kind
    for kind in kinds:
        if kind in available:
            return kind
    return None


def unresolved_error(role: Role, available_kinds: Iterable[str]) -> LaneboardError:
    avail = sorted(available_kinds)
    return LaneboardError(
        "AGENT_UNAVAILABLE",
        f"role {role.id!r} is carried by {', '.join(carriers(role)) or 'no kind'}, and none of "
        f"them is available (available: {', '.join(avail) or 'none'})",
        "install the agent CLI (lb agents check) or add a kind to the role's agents list",
    )
