"""What an agent session's sandbox hides and binds: the one declaration.

=================  ===========================================================  ==========
what               paths                                                        inside
=================  ===========================================================  ==========
the lane           the card's lane directory, with the lane's own git directory  writable
temporary files    a private directory of the session, mounted on ``/tmp``       writable
agent home         a per-session ``HOME`` holding the CLI's config directory     writable
the board          the unix socket named by ``LANEBOARD_URL``                    writable
the user's home    ``$HOME``                                                     hidden
laneboard's state  the state directory (logs, tokens, other sessions' homes),    hidden
                   the data directory and the config directory
host sockets       the runtime directory ``/run`` (``/var/run``): the database's   hidden
                   socket, the system bus, a container engine's (Linux; the
                   resolver's file in it is bound again read-only)
the database       a SQLite board's directory (its files alone, where that       hidden
                   directory holds something the session needs)
the checkout       the user's repository (working tree and ``.git``)             read-only
programs           the interpreter running ``lb``, ``PATH``, ``PYTHONPATH`` and    read-only
                   the agent CLI's install
the credential     the user's login for that CLI (e.g. ``.credentials.json``,    read-only
                   ``auth.json``), bound into the agent home
the card's token   the directory holding only this session's token file          read-only
=================  ===========================================================  ==========

Everything else is the host's file system, read-only. The network stays unless the kind
sets ``network = "none"``: a network of the session's own, which does not reach the host's
loopback (``agents.netns``), or the host's own with ``network = "host"``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from laneboard.agents.sandbox import RESOLVER, SandboxSpec

# per kind: (environment variable naming its config dir, default below HOME, its directory
# inside the agent home, credential files bound read-only, settings copied once)
CLI_HOMES: dict[str, tuple[str, str, str, tuple[str, ...], tuple[str, ...]]] = {
    "claude": (
        "CLAUDE_CONFIG_DIR", ".claude", ".claude", (".credentials.json",), ("settings.json",)
    ),
    "codex": ("CODEX_HOME", ".codex", ".codex", ("auth.json", "config.toml"), ()),
    "pi": (
        "PI_CODING_AGENT_DIR", ".pi/agent", ".pi/agent",
        ("auth.json", "models.json", "settings.json"), (),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class SessionPaths:
    """The host paths of one agent session."""

    kind: str
    cwd: str
    home: str  # the session's agent home (persistent: a resumed session finds its files)
    tmp: str
    state_dir: str
    checkout: str | None = None  # the user's repository: read-only
    lane: str | None = None  # the lane: writable
    token_dir: str | None = None  # holds only this session's token file
    data_dir: str | None = None
    config_dir: str | None = None
    network: bool = True
    host_network: bool = False  # network = "host": the host's network, loopback included
    host_ports: tuple[int, ...] = ()  # ports of the host's loopback relayed in (``relay``)
    extra_writable: tuple[str, ...] = ()
    database: str | None = None  # a SQLite board's file: hidden with its journals


def user_home(env: Mapping[str, str]) -> str:
    return os.path.realpath(env.get("HOME") or os.path.expanduser("~"))


def cli_config_dir(kind: str, env: Mapping[str, str]) -> str | None:
    """The user's config directory of an agent CLI (where its login lives)."""
    spec = CLI_HOMES.get(kind)
    if spec is None:
        return None
    var, default, _inside, _creds, _copied = spec
    return env.get(var) or os.path.join(user_home(env), default)


def board_paths(env: Mapping[str, str]) -> list[str]:
    """How the agent reaches the board: the supervisor's socket (never the database)."""
    url = env.get("LANEBOARD_URL", "")
    return [url.removeprefix("unix:")] if url.startswith("unix:") else []


SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def sqlite_file(url: str) -> str | None:
    """The file of a ``sqlite:///`` board URL (None for another database)."""
    return os.path.abspath(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def database_hidden(paths: SessionPaths, needed: list[str]) -> list[str]:
    """What hides a SQLite board: its directory, unless that directory holds a path the
    session needs — then each of its files."""
    if not paths.database:
        return []
    db = os.path.realpath(paths.database)
    folder = os.path.dirname(db)
    if not any(_contains(folder, p) for p in needed):
        return [folder]
    return [db + suffix for suffix in SQLITE_SUFFIXES]


def install_root(binary: str | None) -> str | None:
    """The directory an agent CLI is installed in (a node package's ``node_modules``)."""
    if not binary:
        return None
    real = os.path.realpath(binary)
    parts = real.split(os.sep)
    if "node_modules" in parts:
        return os.sep.join(parts[: len(parts) - parts[::-1].index("node_modules")])
    return os.path.dirname(real)


def program_paths(env: Mapping[str, str], binary: str | None) -> list[str]:
    """What must stay readable for the agent and ``lb`` to run."""
    home = user_home(env)
    out = [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)]
    out.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # laneboard
    for var in ("PATH", "PYTHONPATH"):
        out += [p for p in env.get(var, "").split(os.pathsep) if p]
    root = install_root(binary)
    if root:
        out.append(root)
    real = [os.path.realpath(p) for p in out]
    # re-exposing the home itself (or a parent of it) would undo hiding it
    return [p for p in dict.fromkeys(real) if not _contains(p, home)]


def _contains(parent: str, child: str) -> bool:
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def agent_home_files(
    kind: str, home: str, env: Mapping[str, str]
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The credential binds and the environment that point the CLI at its session home."""
    spec = CLI_HOMES.get(kind)
    inside_env = {
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
    }
    if spec is None:
        return [], inside_env
    var, _default, inside, creds, copied = spec
    user_dir = cli_config_dir(kind, env) or ""
    target = os.path.join(home, inside)
    os.makedirs(target, mode=0o700, exist_ok=True)
    inside_env[var] = target
    files = [
        (os.path.join(user_dir, name), os.path.join(target, name))
        for name in creds
        if os.path.isfile(os.path.join(user_dir, name))
    ]
    for name in copied:
        _copy_once(os.path.join(user_dir, name), os.path.join(target, name))
    if kind == "claude":  # Claude keeps its account state beside the config dir by default
        legacy = os.path.join(user_dir, ".claude.json")
        if not os.path.isfile(legacy) and not env.get(var):
            legacy = os.path.join(user_home(env), ".claude.json")
        _copy_once(legacy, os.path.join(target, ".claude.json"))
    return files, inside_env


def _copy_once(src: str, dest: str) -> None:
    if os.path.isfile(src) and not os.path.exists(dest):
        shutil.copyfile(src, dest)
        os.chmod(dest, 0o600)


# where a Linux host keeps its services' sockets. A read-only bind does not stop a
# ``connect``: a socket on the read-only root is as usable inside as outside (the
# database's with peer or trust authentication, the system bus — ``systemd-run`` starts a
# command outside the sandbox —, a container engine's, an ssh or gpg agent's)
RUNTIME_DIRS = ("/run", "/var/run")


def runtime_dirs(platform: str = sys.platform) -> list[str]:
    """The host's runtime directories the sandbox hides (Linux; macOS keeps its own:
    name resolution goes through a socket in ``/var/run`` there)."""
    if not platform.startswith("linux"):
        return []
    return list(dict.fromkeys(os.path.realpath(d) for d in RUNTIME_DIRS if os.path.isdir(d)))


def resolver_files(hidden: list[str]) -> list[str]:
    """The resolver's configuration, when it lives under a hidden directory: bound again
    read-only, so the agent still resolves its model's host name."""
    real = os.path.realpath(RESOLVER)
    if real != RESOLVER and os.path.isfile(real) and any(_contains(h, real) for h in hidden):
        return [real]
    return []


def build_spec(paths: SessionPaths, env: Mapping[str, str], binary: str | None) -> SandboxSpec:
    """The sandbox of one session, from its paths and the environment it inherits."""
    files, inside_env = agent_home_files(paths.kind, paths.home, env)
    hidden = [user_home(env), paths.state_dir, *runtime_dirs()]
    hidden += [p for p in (paths.data_dir, paths.config_dir) if p]
    real_hidden = [os.path.realpath(p) for p in hidden]
    # a read-only entry holding a hidden directory would show it again
    readonly = [
        p for p in program_paths(env, binary) if not any(_contains(p, h) for h in real_hidden)
    ]
    readonly += resolver_files(real_hidden)
    if paths.checkout:
        readonly.append(os.path.realpath(paths.checkout))
    if paths.token_dir:
        readonly.append(os.path.realpath(paths.token_dir))
    writable = [p for p in (paths.lane, paths.home) if p]
    writable += list(paths.extra_writable)
    board = [os.path.realpath(p) for p in board_paths(env)]
    needed = [os.path.realpath(p) for p in (*readonly, *writable, *board, paths.cwd, paths.tmp)]
    return SandboxSpec(
        cwd=paths.cwd,
        tmp=paths.tmp,
        writable=tuple(dict.fromkeys(os.path.realpath(p) for p in writable)),
        readonly=tuple(dict.fromkeys(readonly)),
        hidden=tuple(dict.fromkeys(real_hidden)),
        masked=tuple(database_hidden(paths, needed)),
        files=tuple(files),
        board=tuple(dict.fromkeys(board)),
        network=paths.network,
        host_network=paths.host_network,
        host_ports=paths.host_ports,
        env=inside_env,
    )
