"""The OS sandbox every agent process runs in.

One declared ``SandboxSpec`` says what an agent session may touch: the directories it may
write (the card's lane with its own git directory, a private temporary directory, its own
agent home, laneboard's way to the board), the directories it may only read again after
they were hidden (the user's checkout, the agent CLI's install, the interpreter), the
directories hidden outright (the user's home, laneboard's state and data directories),
single files bound read-only (the user's credential for the agent CLI, the card's token),
and whether the network stays. Two renderings of the same spec:

* Linux — ``bwrap`` (bubblewrap): the root file system read-only, ``/dev`` and a fresh
  ``/proc``, the private temporary directory on ``/tmp``, hidden directories replaced by
  empty ones, then the read-only and writable binds, every capability dropped (as root,
  too), a new PID namespace (killing the sandbox kills everything in it; other processes'
  ``/proc`` entries are out of sight) and a network namespace of its own: with
  ``network = "none"`` it holds only a loopback; otherwise ``slirp4netns`` gives it a
  route out (``agents.netns``) that never reaches the host's loopback, where ``lb serve``
  and a database may listen. Without ``slirp4netns``, or with ``network = "host"``, the
  session shares the host's network, loopback included (``lb doctor`` says so).
* macOS — ``sandbox-exec`` with a rendered profile: writes denied except the writable
  paths, reads of the hidden paths denied except the re-exposed ones, network denied on
  request, the host's loopback denied otherwise (unless ``network = "host"``). It is
  rendered and unit-tested here; it has not been run on real macOS.

Where no sandbox can be created, agents do not start (``SANDBOX_UNAVAILABLE``) unless the
user turns it off with ``sandbox = "off"`` and a written ``sandbox_reason``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from laneboard.errors import LaneboardError

MODES = ("auto", "bwrap", "sandbox-exec", "off")
RESOLVER = "/etc/resolv.conf"  # often a link into /run (systemd-resolved, NetworkManager)
PROBE_TIMEOUT_S = 10.0
INSTALL_HINT = {
    "bwrap": "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; "
    "Fedora: dnf install bubblewrap)",
    "sandbox-exec": "sandbox-exec ships with macOS at /usr/bin/sandbox-exec",
}
SLIRP_HINT = (
    "install slirp4netns (Debian/Ubuntu: apt-get install slirp4netns; Fedora: dnf install "
    "slirp4netns)"
)


@dataclass(frozen=True)
class SandboxSettings:
    """``sandbox`` and ``sandbox_reason`` of the ``[supervisor]`` table."""

    mode: str = "auto"
    reason: str = ""

    def validate(self) -> SandboxSettings:
        if self.mode not in MODES:
            raise LaneboardError(
                "CONFIG_INVALID",
                f"sandbox = {self.mode!r} is not a sandbox mode",
                f"use one of: {', '.join(MODES)}",
            )
        if self.mode == "off" and not self.reason.strip():
            raise LaneboardError(
                "CONFIG_INVALID",
                'sandbox = "off" needs a written reason',
                'add sandbox_reason = "who decided it and why" to [supervisor], '
                'or remove sandbox = "off"',
            )
        return self

    @property
    def off(self) -> bool:
        return self.mode == "off"


@dataclass(frozen=True)
class SandboxSpec:
    """What one agent session may see and write (paths are absolute host paths)."""

    cwd: str
    tmp: str
    writable: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (host file, path inside), read-only
    board: tuple[str, ...] = ()  # writable, but under the read-only and writable binds
    masked: tuple[str, ...] = ()  # hidden over every bind (a database inside the checkout)
    network: bool = True
    host_network: bool = False  # network = "host": the host's own, loopback included
    host_ports: tuple[int, ...] = ()  # ports of the host's loopback relayed in (``relay``)
    env: dict[str, str] = field(default_factory=dict)  # set inside (HOME, TMPDIR, ...)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cwd": self.cwd,
            "tmp": self.tmp,
            "writable": list(self.writable),
            "readonly": list(self.readonly),
            "hidden": list(self.hidden),
            "files": [list(f) for f in self.files],
            "board": list(self.board),
            "masked": list(self.masked),
            "network": self.network,
            "host_network": self.host_network,
            "host_ports": list(self.host_ports),
        }


# -- finding a backend -----------------------------------------------------------------------


def backend_for(mode: str, platform: str = sys.platform) -> str:
    if mode in ("bwrap", "sandbox-exec"):
        return mode
    return "sandbox-exec" if platform == "darwin" else "bwrap"


@functools.lru_cache(maxsize=8)
def _probe_bwrap(binary: str) -> str | None:
    """None when bubblewrap can build a sandbox here, else what went wrong."""
    try:
        out = subprocess.run(
            [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--cap-drop", "ALL", "--unshare-pid", "--", "true"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{binary} could not run: {exc}"
    if out.returncode != 0:
        return f"{binary} cannot create a sandbox here: {' '.join(out.stderr.split())[:200]}"
    return None


@dataclass(frozen=True)
class SandboxStatus:
    """What ``lb agents check``, ``lb status`` and ``lb doctor`` show about the sandbox."""

    mode: str
    backend: str | None
    path: str | None
    ok: bool
    problem: str | None = None
    reason: str | None = None
    slirp: str | None = None  # slirp4netns, which gives a bwrap sandbox a network of its own

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "network": self.network}

    @property
    def network(self) -> str:
        """``isolated`` (the host's loopback out of reach), ``shared`` (bwrap without
        slirp4netns: the host's network, loopback included), or ``profile`` (macOS)."""
        if self.backend != "bwrap" or self.mode == "off":
            return "profile"
        return "isolated" if self.slirp else "shared"

    def line(self) -> str:
        if self.mode == "off":
            return f'OFF (sandbox = "off": {self.reason})'
        if not self.ok:
            return f"UNAVAILABLE: {self.problem}"
        if self.network == "shared":
            return (
                f"{self.backend} ({self.path}); network SHARED with the host, loopback "
                f"included: {SLIRP_HINT}"
            )
        if self.network == "isolated":
            return f"{self.backend} ({self.path}); network of its own ({self.slirp})"
        return f"{self.backend} ({self.path})"


def sandbox_status(settings: SandboxSettings, platform: str = sys.platform) -> SandboxStatus:
    if settings.off:
        return SandboxStatus("off", None, None, True, reason=settings.reason.strip())
    backend = backend_for(settings.mode, platform)
    path = shutil.which(backend)
    if path is None:
        return SandboxStatus(
            settings.mode,
            backend,
            None,
            False,
            f"{backend} is not installed: {INSTALL_HINT[backend]}",
        )
    problem = _probe_bwrap(path) if backend == "bwrap" else None
    slirp = shutil.which("slirp4netns") if backend == "bwrap" else None
    return SandboxStatus(settings.mode, backend, path, problem is None, problem, slirp=slirp)


def require_sandbox(settings: SandboxSettings) -> SandboxStatus:
    """For ``lb start``: the sandbox agents will run in; refuses when none can be made."""
    status = sandbox_status(settings.validate())
    if not status.ok:
        raise LaneboardError(
            "SANDBOX_UNAVAILABLE",
            f"agents need an OS sandbox and none can be created: {status.problem}",
            f'{INSTALL_HINT.get(status.backend or "bwrap")}, or set sandbox = "off" with a '
            "sandbox_reason in [supervisor]",
        )
    return status


# -- rendering -------------------------------------------------------------------------------


def _existing(paths: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(p for p in paths if p and os.path.exists(p)))


@dataclass(frozen=True)
class NetFds:
    """How one start of an isolated sandbox hands its network over (``agents.netns``):
    bwrap writes its child's pid to ``info``, the child waits on ``block`` until the
    network is up, and ``resolver`` (a host file) is bound over the resolver's file."""

    info: int
    block: int
    resolver: str | None  # None: no route out (``network = "none"``), no resolver


def bwrap_argv(
    spec: SandboxSpec, argv: Sequence[str], binary: str = "bwrap", net: NetFds | None = None
) -> list[str]:
    """``bwrap … -- argv``: later mounts win, so hiding comes before re-exposing."""
    # as root, bubblewrap keeps every capability unless told: without --cap-drop ALL the
    # agent could remount the read-only root writable. No --die-with-parent: it fires when
    # the *thread* that started bwrap ends, and a resident session outlives its first turn's
    # thread; the pool stops a session by its process group instead.
    out = [binary, "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc"]
    if not spec.network or net is not None:
        out.append("--unshare-net")
    if net is not None:
        out += ["--info-fd", str(net.info), "--block-fd", str(net.block)]
    out += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    out += ["--bind", spec.tmp, "/tmp"]
    for path in _existing(spec.hidden):
        out += _hide(path)
    for path in _existing(spec.board):  # a board directory holding the checkout keeps it ro
        out += ["--bind", path, path]
    for path in _reexposed(spec):
        out += ["--ro-bind", path, path]
    for path in _existing(spec.writable):
        out += ["--bind", path, path]
    for src, dest in spec.files:
        if os.path.exists(src):
            out += ["--ro-bind", src, dest]
    for path in _existing(spec.masked):
        out += _hide(path)
    if net is not None and net.resolver is not None:
        out += ["--ro-bind", net.resolver, os.path.realpath(RESOLVER)]
    out += ["--chdir", spec.cwd, "--", *argv]
    return out


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _reexposed(spec: SandboxSpec) -> list[str]:
    """The read-only paths that need a bind of their own: those under something hidden,
    replaced (``/tmp``) or writable (the board); the rest are read-only already with the
    root, and each mount costs the agent's start. A path under another one kept is
    covered by it."""
    covered = [*spec.hidden, *spec.board, "/tmp"]
    wanted = [p for p in _existing(spec.readonly) if _under(p, covered)]
    return [p for p in wanted if not _under(p, [q for q in wanted if q != p])]


def _hide(path: str) -> list[str]:
    """An empty directory over a directory; an empty read-only file over a file."""
    return ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]


def _sb_str(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(spec: SandboxSpec) -> str:
    """The ``sandbox-exec`` profile of a spec (macOS Seatbelt, SBPL)."""
    lines = [
        "(version 1)",
        "(allow default)",
        ";; the file system is read-only except the session's own paths",
        "(deny file-write*)",
        '(allow file-write* (literal "/dev/null") (literal "/dev/tty") (regex #"^/dev/fd/"))',
    ]
    for path in [spec.tmp, *spec.board, *spec.writable]:
        lines.append(f"(allow file-write* (subpath {_sb_str(path)}))")
    for path in spec.readonly:  # a read-only path inside the board directory stays read-only
        if any(path.startswith(b.rstrip("/") + "/") for b in spec.board):
            lines.append(f"(deny file-write* (subpath {_sb_str(path)}))")
    for path in spec.writable:
        lines.append(f"(allow file-write* (subpath {_sb_str(path)}))")
    if spec.hidden:
        lines.append(";; hidden: the user's home and laneboard's own state")
        for path in spec.hidden:
            lines.append(f"(deny file-read* file-write* (subpath {_sb_str(path)}))")
        for path in spec.readonly:
            lines.append(f"(allow file-read* (subpath {_sb_str(path)}))")
        for path in spec.writable:
            lines.append(f"(allow file-read* file-write* (subpath {_sb_str(path)}))")
        for src, _dest in spec.files:
            lines.append(f"(allow file-read* (literal {_sb_str(src)}))")
    if spec.masked:
        lines.append(";; masked over everything: laneboard's database")
        for path in spec.masked:
            lines.append(f"(deny file-read* file-write* (subpath {_sb_str(path)}))")
    if not spec.network:
        lines.append('(deny network* (remote ip "*:*"))')
    elif not spec.host_network:
        lines.append(";; the host's loopback: lb serve and a database may listen there")
        lines.append('(deny network-outbound (remote ip "localhost:*"))')
    if not spec.host_network:
        for port in spec.host_ports:  # a later rule wins: these ports stay in reach
            lines.append(f'(allow network-outbound (remote ip "localhost:{port}"))')
    return "\n".join(lines) + "\n"


def sandbox_exec_argv(
    spec: SandboxSpec, argv: Sequence[str], binary: str = "/usr/bin/sandbox-exec"
) -> list[str]:
    return [binary, "-p", seatbelt_profile(spec), *argv]


@dataclass(frozen=True)
class Sandbox:
    """A spec bound to a backend: wraps an agent's argv and environment."""

    spec: SandboxSpec
    backend: str = "bwrap"
    binary: str = "bwrap"
    slirp: str | None = None  # slirp4netns: a network of the sandbox's own (``isolated``)
    unset: tuple[str, ...] = ()  # variables the process inside never sees

    @property
    def isolated(self) -> bool:
        """Whether the session gets a network namespace of its own with a route out."""
        return (
            self.backend == "bwrap"
            and self.spec.network
            and not self.spec.host_network
            and self.slirp is not None
        )

    @property
    def relayed(self) -> bool:
        """Whether ports of the host's loopback are relayed into the session's own
        network (``host_ports``; a shared network reaches them already)."""
        return (
            self.backend == "bwrap"
            and bool(self.spec.host_ports)
            and (self.isolated or not self.spec.network)
        )

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The argv of a sandbox that needs nothing at its start: one that is
        ``isolated`` or ``relayed`` is started by ``start`` instead."""
        if self.backend == "sandbox-exec":
            return sandbox_exec_argv(self.spec, argv, self.binary)
        return bwrap_argv(self.spec, argv, self.binary)

    def environ(self, env: Mapping[str, str]) -> dict[str, str]:
        out = {k: v for k, v in env.items() if k not in self.unset}
        out.update(self.spec.env)
        if self.backend == "bwrap":
            out["TMPDIR"] = "/tmp"
            out["XDG_RUNTIME_DIR"] = "/tmp"  # the host's is hidden (``runtime_dirs``)
        return out

    def inside(self, host_path: str) -> str:
        """The path a file under the session's temporary directory has inside."""
        if self.backend == "bwrap" and host_path.startswith(self.spec.tmp.rstrip("/") + "/"):
            return "/tmp/" + host_path[len(self.spec.tmp.rstrip("/")) + 1 :]
        return host_path

    def prepare(self) -> None:
        """Create the host directories the spec binds (tmp, home, lane git state)."""
        for path in (self.spec.tmp, *self.spec.writable):
            if not os.path.exists(path):
                os.makedirs(path, mode=0o700, exist_ok=True)


def start(
    sandbox: Sandbox | None, argv: Sequence[str], env: Mapping[str, str], **popen: Any
) -> subprocess.Popen[bytes]:
    """Start an agent process (sandboxed when given a sandbox): ``popen`` are
    ``subprocess.Popen``'s other arguments."""
    if sandbox is None:
        return subprocess.Popen(list(argv), env=dict(env), **popen)
    sandbox.prepare()
    if sandbox.isolated or sandbox.relayed:
        from laneboard.agents import netns

        return netns.start(sandbox, argv, sandbox.environ(env), **popen)
    return subprocess.Popen(sandbox.wrap(argv), env=sandbox.environ(env), **popen)
