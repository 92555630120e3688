"""The sandbox a card's checks run in: the agent's code, run by the runtime, kept in the
agent's own bounds.

A check (``lb card add --check``, a project's ``review_gate``, an orchestrated goal's
checks) runs whatever the lane holds — the tests, a ``conftest.py``, a build script the
agent wrote. Run as the user, that code could read every token, the board's database and
the user's home, or reach ``lb serve`` and a trusting database on the loopback. So a check
runs in the sandbox an agent session gets (``agents.sandbox_spec``), with less:

* the lane (or the directory being checked) writable, the user's checkout read-only;
* a home of its own under the state directory (``agents/homes/check-<lane>``, kept for
  caches across rounds and removed with the card's session files) and an empty ``/tmp``
  for each command (``agents/tmp/check-<lane>.<run>``, removed after it);
* no token and no board socket (the check's environment carries no ``LANEBOARD_*``, and
  no variable an agent kind keeps from its agents with ``secret_env``);
* the network of ``[supervisor] check_network`` (unset: a network of its own that does
  not reach this machine's loopback; ``"none"``; ``"host"``) with the loopback ports named
  in ``check_host_ports`` relayed in.

With ``sandbox = "off"`` (and its reason) checks run as the user, as agents do.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from laneboard.agents.sandbox import (
    INSTALL_HINT,
    Sandbox,
    SandboxSettings,
    SandboxStatus,
    sandbox_status,
)
from laneboard.agents.sandbox_spec import SessionPaths, build_spec, sqlite_file
from laneboard.errors import LaneboardError

if TYPE_CHECKING:
    from laneboard.config import SupervisorConfig

# the sandbox of one run of checks: (a name for its home, the directory the commands run
# in, the directory they may write, the checkout they may read) -> the sandbox, or None
# when the sandbox is off
CheckSandbox = Callable[[str, str, str, "str | None"], "Sandbox | None"]


def home_name(name: str) -> str:
    """``worker-WEB-1`` → ``check-worker-WEB-1``: one home per card lane, all rounds."""
    return "check-" + re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")


def check_sandbox(
    config: SupervisorConfig,
    database_url: str,
    name: str,
    cwd: str,
    writable: str,
    checkout: str | None,
) -> Sandbox | None:
    """The sandbox a check runs in (None: the sandbox is off); refuses with
    ``SANDBOX_UNAVAILABLE`` when it is on and none can be made here."""
    from laneboard.config import config_dir
    from laneboard.store import data_dir

    status = sandbox_status(SandboxSettings(config.sandbox, config.sandbox_reason))
    if status.mode == "off":
        return None
    if not status.ok:
        raise LaneboardError(
            "SANDBOX_UNAVAILABLE",
            f"checks run the lane's code in the OS sandbox and none can be created: "
            f"{status.problem}",
            f'{INSTALL_HINT.get(status.backend or "bwrap")}, or set sandbox = "off" with a '
            "sandbox_reason in [supervisor]",
        )
    label = home_name(name)
    tmp_root = config.state_path("agents", "tmp")
    os.makedirs(tmp_root, mode=0o700, exist_ok=True)
    # a directory of this run alone (each command empties it: ``workspace.verify``)
    tmp = tempfile.mkdtemp(prefix=label + ".", dir=tmp_root)
    paths = SessionPaths(
        kind="check",
        cwd=cwd,
        home=config.state_path("agents", "homes", label),
        tmp=tmp,
        state_dir=config.state_path(),
        checkout=os.path.realpath(checkout) if checkout else None,
        lane=writable,
        data_dir=data_dir(),
        config_dir=config_dir(),
        network=config.check_network != "none",
        host_network=config.check_network == "host",
        host_ports=tuple(config.check_host_ports),
        database=sqlite_file(database_url),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    spec = build_spec(paths, env, None)
    unset = tuple(sorted(secret_names(config)))
    return Sandbox(spec, str(status.backend), str(status.path), slirp=status.slirp, unset=unset)


def secret_names(config: SupervisorConfig) -> set[str]:
    """Every variable some agent kind keeps from its agents (``secret_env``): a check runs
    an agent's code, so none of them reaches a check either."""
    names: set[str] = set()
    for kind in config.agent_kinds.values():
        names.update(str(n) for n in kind.get("secret_env", ()) or ())
    return names


def summary(config: SupervisorConfig, status: SandboxStatus) -> dict[str, Any]:
    """How checks run here, for ``lb status``, ``lb doctor`` and ``lb agents check``:
    ``sandboxed``, ``network`` (own, none, host, shared: the host's for want of
    slirp4netns), the relayed ``host_ports`` and a one-line ``line``."""
    ports = list(config.check_host_ports)
    if status.mode == "off":
        return {"sandboxed": False, "network": "host", "host_ports": ports,
                "line": "run as you, outside any sandbox (sandbox = \"off\")"}  # fmt: skip
    if not status.ok:
        return {"sandboxed": False, "network": None, "host_ports": ports,
                "line": "NONE: a delivery with checks is refused (no sandbox can be made)"}  # fmt: skip
    network = config.check_network or "own"
    if network == "own" and status.network == "shared":
        network = "shared"
    words = {
        "own": "a network of their own, this machine's loopback out of reach",
        "none": "no network",
        "host": 'the host\'s network, loopback included (check_network = "host")',
        "shared": "the host's network, loopback included: install slirp4netns",
    }
    line = f"in the sandbox; {words[network]}"
    if ports and network in ("own", "none"):
        line += f"; loopback ports relayed: {', '.join(str(p) for p in ports)}"
    return {"sandboxed": True, "network": network, "host_ports": ports, "line": line}


def for_config(config: SupervisorConfig, database_url: str) -> CheckSandbox:
    """``check_sandbox`` bound to a configuration and a board."""

    def make(name: str, cwd: str, writable: str, checkout: str | None) -> Sandbox | None:
        return check_sandbox(config, database_url, name, cwd, writable, checkout)

    return make


def from_user_config(database_url: str) -> CheckSandbox:
    """The check sandbox of the user's configuration, read when a check first runs."""

    def make(name: str, cwd: str, writable: str, checkout: str | None) -> Sandbox | None:
        from laneboard.config import load_supervisor_config

        config = load_supervisor_config()
        return check_sandbox(config, database_url, name, cwd, writable, checkout)

    return make
