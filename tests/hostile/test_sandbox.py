"""The agent sandbox: its rendering for bubblewrap and sandbox-exec, and real bubblewrap
holding a hostile shell to what the spec allows."""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from laneboard.agents import sandbox
from laneboard.agents.sandbox import (
    Sandbox,
    SandboxSettings,
    SandboxSpec,
    bwrap_argv,
    require_sandbox,
    sandbox_status,
    seatbelt_profile,
)
from laneboard.agents.sandbox_spec import SessionPaths, build_spec, install_root
from laneboard.errors import LaneboardError


def spec_for(
    world: dict[str, Path],
    kind: str = "codex",
    network: bool = True,
    database: str | None = None,
    host_network: bool = False,
    host_ports: tuple[int, ...] = (),
) -> SandboxSpec:
    paths = SessionPaths(
        kind=kind,
        cwd=str(world["lane"]),
        home=str(world["state"] / "agents" / "homes" / "s1"),
        tmp=str(world["state"] / "agents" / "tmp" / "s1"),
        state_dir=str(world["state"]),
        checkout=str(world["repo"]),
        lane=str(world["lane"]),
        token_dir=str(world["state"] / "tokens" / "WEB-1"),
        network=network,
        host_network=host_network,
        host_ports=host_ports,
        database=database,
    )
    env = {"HOME": str(world["home"]), "PATH": os.environ["PATH"]}
    return build_spec(paths, env, None)


SLIRP = shutil.which("slirp4netns")


def run_in(spec: SandboxSpec, script: str) -> subprocess.CompletedProcess[str]:
    """The script's run in the sandbox as the pool starts it (a network of its own)."""
    proc = sandbox.start(
        Sandbox(spec, slirp=SLIRP),
        ["/bin/sh", "-c", script],
        {"PATH": os.environ["PATH"]},
        cwd=spec.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_spec_hides_home_and_state_and_binds_lane_and_credential(
    world: dict[str, Path],
) -> None:
    spec = spec_for(world)
    assert str(world["home"]) in spec.hidden and str(world["state"]) in spec.hidden
    assert str(world["repo"]) in spec.readonly
    assert str(world["state"] / "tokens" / "WEB-1") in spec.readonly
    assert str(world["lane"]) in spec.writable
    home = world["state"] / "agents" / "homes" / "s1"
    assert (str(world["home"] / ".codex" / "auth.json"), str(home / ".codex" / "auth.json")) in (
        spec.files
    )
    assert spec.env["HOME"] == str(home) and spec.env["CODEX_HOME"] == str(home / ".codex")
    # nothing that would show a hidden directory again is read-only re-exposed
    assert not any(str(world["tmp"]).startswith(p) for p in spec.readonly if p != "/")


def test_bwrap_argv_orders_hiding_before_binding(world: dict[str, Path]) -> None:
    spec = spec_for(world, network=False)
    argv = bwrap_argv(spec, ["codex", "app-server"])
    assert argv[:3] == ["bwrap", "--cap-drop", "ALL"]
    assert "--unshare-net" in argv and "--unshare-pid" in argv
    assert argv[-3:] == ["--", "codex", "app-server"]
    pairs = list(itertools.pairwise(argv))
    hide = pairs.index(("--tmpfs", str(world["home"])))
    reexpose = pairs.index(("--ro-bind", str(world["repo"])))
    lane = pairs.index(("--bind", str(world["lane"])))
    assert hide < reexpose < lane
    assert argv[argv.index("--chdir") + 1] == str(world["lane"])
    # a read-only path outside everything hidden is read-only with the root: no bind of its
    # own (each mount costs the agent's start); one under another kept path is covered
    binds = {b for a, b in pairs if a == "--ro-bind"}
    outside = [p for p in spec.readonly if not p.startswith(("/tmp/", str(world["tmp"])))]
    assert outside and not binds & set(outside), (binds, outside)
    kept = sorted(binds - {"/", "/dev/null"})
    assert not any(p != q and p.startswith(q + "/") for p in kept for q in kept), kept
    assert "--unshare-net" not in bwrap_argv(spec_for(world), ["x"])


def test_seatbelt_profile_denies_writes_and_hidden_reads(world: dict[str, Path]) -> None:
    spec = spec_for(world, network=False)
    profile = seatbelt_profile(spec)
    assert profile.startswith("(version 1)\n(allow default)\n")
    assert "(deny file-write*)" in profile
    assert f'(allow file-write* (subpath "{world["lane"]}"))' in profile
    assert f'(deny file-read* file-write* (subpath "{world["home"]}"))' in profile
    assert f'(allow file-read* (subpath "{world["repo"]}"))' in profile
    assert '(deny network* (remote ip "*:*"))' in profile
    # the order matters in SBPL: the last matching rule wins
    assert profile.index(f'(deny file-read* file-write* (subpath "{world["home"]}"))') < (
        profile.index(f'(allow file-read* (subpath "{world["repo"]}"))')
    )
    quoted = seatbelt_profile(SandboxSpec(cwd="/x", tmp='/t/a"b'))
    assert '(subpath "/t/a\\"b")' in quoted


def test_a_hostile_shell_stays_in_its_lane(world: dict[str, Path]) -> None:
    """Real bubblewrap: every escape fails or has no effect outside."""
    spec = spec_for(world)
    home, repo, state = world["home"], world["repo"], world["state"]
    script = f"""
        echo lane-ok > {world["lane"]}/done.txt
        echo hacked > {repo}/README.md 2>/dev/null && echo WROTE-CHECKOUT
        cat {home}/.ssh/id_ed25519 2>/dev/null && echo READ-SSH
        cat {state}/tokens/WEB-2/token 2>/dev/null && echo READ-OTHER-TOKEN
        cat {state}/tokens/WEB-1/token
        echo x > {state}/tokens/WEB-1/token 2>/dev/null && echo WROTE-TOKEN
        touch /etc/escaped 2>/dev/null && echo WROTE-ETC
        mount -o remount,rw / 2>/dev/null && echo REMOUNTED
        touch /proc/1/root/etc/escaped 2>/dev/null && echo WROTE-PROC-ROOT
        echo scratch > /tmp/scratch && echo tmp-ok
        cat $CODEX_HOME/auth.json
        echo x > $CODEX_HOME/auth.json 2>/dev/null && echo WROTE-CREDENTIAL
        echo cfg > $CODEX_HOME/notes && echo home-ok
    """
    out = run_in(spec, script)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert "lane-ok" not in lines and (world["lane"] / "done.txt").read_text() == "lane-ok\n"
    assert {"tmp-ok", "home-ok", "lbt_mine", '{"key":'} <= set(lines)
    for bad in ("WROTE-CHECKOUT", "READ-SSH", "READ-OTHER-TOKEN", "WROTE-TOKEN", "WROTE-ETC",
                "REMOUNTED", "WROTE-PROC-ROOT", "WROTE-CREDENTIAL", "lbt_other"):  # fmt: skip
        assert bad not in lines, out.stdout
    assert (repo / "README.md").read_text() == "user's file\n"
    assert not os.path.exists("/etc/escaped")
    assert (home / ".codex" / "auth.json").read_text() == '{"key": "user-login"}\n'
    assert not (world["tmp"] / "scratch").exists()


def _sqlite_board(path: Path) -> sqlite3.Connection:
    """A board in WAL mode, held open as a running supervisor holds it (-wal, -shm)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE tokens (secret TEXT)")
    db.execute("INSERT INTO tokens VALUES ('lbt_in_the_database')")
    db.commit()
    return db


@pytest.mark.parametrize("where", ["its own directory", "beside the user's files"])
def test_the_sqlite_board_is_hidden_wherever_it_lives(world: dict[str, Path], where: str) -> None:
    """Real bubblewrap: the board's database — here inside the checkout, which the agent
    may read — is neither readable nor writable, whether its directory can be hidden whole
    or only its files (it shares a directory with the user's files)."""
    own = where == "its own directory"
    folder = world["repo"] / ".laneboard" if own else world["repo"]
    db = folder / "board.db"
    held = _sqlite_board(db)
    spec = spec_for(world, database=str(db))
    assert spec.masked == ((str(folder),) if own else tuple(
        str(db) + s for s in ("", "-wal", "-shm", "-journal")))  # fmt: skip
    before = db.read_bytes()
    script = f"""
        cat {db} | grep -c lbt_in_the_database
        echo junk >> {db} 2>/dev/null; printf 'SQLite format 3' > {db} 2>/dev/null
        rm -f {db}-wal {db}-shm 2>/dev/null
        {sys.executable} -c "import sqlite3; c = sqlite3.connect('{db}'); \
            print(c.execute('select count(*) from tokens').fetchone())" 2>/dev/null \
            && echo OPENED
        cat {world["repo"]}/README.md
    """
    out = run_in(spec, script)
    assert "user's file" in out.stdout, out.stderr  # the checkout stays readable
    assert out.stdout.split()[0] == "0"  # nothing of the database's content is seen
    assert "OPENED" not in out.stdout
    # whatever the writes did, they did inside the sandbox: the board is untouched
    assert db.read_bytes() == before and (folder / "board.db-wal").exists()
    assert held.execute("SELECT secret FROM tokens").fetchall() == [("lbt_in_the_database",)]
    held.close()
    assert f'(deny file-read* file-write* (subpath "{spec.masked[0]}"))' in seatbelt_profile(spec)


def test_network_none_has_only_loopback(world: dict[str, Path]) -> None:
    script = "tail -n +3 /proc/net/dev | cut -d: -f1"
    out = run_in(spec_for(world, network=False), script)
    assert out.stdout.split() == ["lo"], out.stderr
    assert "lo" in run_in(spec_for(world), script).stdout.split()


def test_killing_the_sandbox_stops_everything_in_it(world: dict[str, Path]) -> None:
    box = Sandbox(spec_for(world))
    box.prepare()
    marker = world["lane"] / "child.pid"
    proc = subprocess.Popen(
        box.wrap(["/bin/sh", "-c", f"sleep 300 & echo $! > {marker}; wait"]),
        cwd=str(world["lane"]),
        env=box.environ({"PATH": os.environ["PATH"]}),
        start_new_session=True,
    )
    for _ in range(200):
        if marker.exists() and marker.read_text().strip():
            break
        subprocess.run(["sleep", "0.05"], check=True)
    os.killpg(proc.pid, 9)
    proc.wait(timeout=10)
    leftover = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True)
    mine = [p for p in leftover.stdout.split() if _in_group(int(p), proc.pid)]
    assert mine == []


def _in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except ProcessLookupError:
        return False


def test_settings_refuse_off_without_a_reason_and_unknown_modes() -> None:
    with pytest.raises(LaneboardError) as err:
        SandboxSettings("off").validate()
    assert err.value.code == "CONFIG_INVALID" and "sandbox_reason" in err.value.fix
    with pytest.raises(LaneboardError):
        SandboxSettings("docker").validate()
    off = sandbox_status(SandboxSettings("off", "a disposable VM"))
    assert off.ok and off.line() == 'OFF (sandbox = "off": a disposable VM)'


def test_no_bubblewrap_refuses_with_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    status = sandbox_status(SandboxSettings("auto"), platform="linux")
    assert not status.ok and "bubblewrap" in str(status.problem)
    with pytest.raises(LaneboardError) as err:
        require_sandbox(SandboxSettings("auto"))
    assert err.value.code == "SANDBOX_UNAVAILABLE" and "apt-get install bubblewrap" in str(
        err.value
    )


def test_install_root_of_a_node_cli_is_its_node_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "lib" / "node_modules" / "@openai" / "codex" / "bin"
    pkg.mkdir(parents=True)
    (pkg / "codex.js").write_text("")
    link = tmp_path / "codex"
    link.symlink_to(pkg / "codex.js")
    assert install_root(str(link)) == str(tmp_path / "lib" / "node_modules")


def test_every_session_sandbox_masks_the_supervisors_sqlite_board(world: dict[str, Path]) -> None:
    """The sandbox the pool, the director and an orchestrated run ask for names the board:
    a SQLite board is masked; another database has no file to mask."""
    from laneboard.config import SupervisorConfig
    from laneboard.supervisor.sandboxing import session_sandbox

    cfg = SupervisorConfig(state_dir=str(world["state"])).validate()
    db = world["repo"] / ".laneboard" / "board.db"
    held = _sqlite_board(db)
    env = {"HOME": str(world["home"]), "PATH": os.environ["PATH"]}
    box = session_sandbox(cfg, kind="scripted", lane_key="worker:WEB-1:r1", cwd=str(world["lane"]),
                          env=env, checkout=str(world["repo"]), token=None,
                          database_url=f"sqlite:///{db}")  # fmt: skip
    assert box is not None and box.spec.masked == (str(db.parent),)
    other = session_sandbox(cfg, kind="scripted", lane_key="worker:WEB-1:r1",
                            cwd=str(world["lane"]), env=env, checkout=str(world["repo"]),
                            token=None, database_url="postgresql://127.0.0.1/test")  # fmt: skip
    assert other is not None and other.spec.masked == ()
    held.close()


@pytest.fixture
def host_socket() -> Iterator[Path]:
    """A listening unix socket under ``/run``, where a host keeps its services' sockets
    (PostgreSQL's, the system D-Bus, a container engine's, a user's ssh-agent)."""
    import socket
    import tempfile

    # root's services keep theirs in /run; a user's (an ssh-agent's) in /run/user/UID
    places = ("/run", f"/run/user/{os.getuid()}")
    writable = [p for p in places if os.access(p, os.W_OK | os.X_OK)]
    if not writable:
        pytest.skip("no runtime directory under /run is writable by this user")
    folder = Path(tempfile.mkdtemp(prefix="lb-sock-", dir=writable[0]))
    path = folder / "service.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(4)
    try:
        yield path
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        folder.rmdir()


CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    s.connect(sys.argv[1])\n"
    "    print('CONNECTED')\n"
    "except OSError as e:\n"
    "    print('refused', type(e).__name__)\n"
)


def test_host_sockets_under_run_are_out_of_reach(world: dict[str, Path], host_socket: Path) -> None:
    """A read-only bind does not stop ``connect``: a socket on the read-only root is as
    usable as outside. The host's runtime directory is hidden instead, so an agent
    cannot reach the database's socket (peer or trust authentication lets it in as the
    user), the system bus (``systemd-run`` runs a command outside the sandbox) or a
    container engine; name resolution still works."""
    py = sys.executable
    outside = subprocess.run([py, "-c", CONNECT, str(host_socket)], capture_output=True, text=True)
    assert outside.stdout.split()[0] == "CONNECTED"  # the socket listens
    for network in (True, False):
        script = f'{py} -c "{CONNECT}" {host_socket}; ls /run/postgresql /run/dbus 2>&1 | head -3'
        out = run_in(spec_for(world, network=network), script)
        assert "CONNECTED" not in out.stdout, out.stdout
        assert "refused" in out.stdout, (out.stdout, out.stderr)
        assert ".s.PGSQL" not in out.stdout and "system_bus_socket" not in out.stdout
    resolv = os.path.realpath("/etc/resolv.conf")
    if os.path.exists(resolv):  # the resolver's file is there, wherever it lives
        out = run_in(spec_for(world, host_network=True), "cat /etc/resolv.conf")
        assert out.stdout == Path(resolv).read_text(), out.stderr
        if SLIRP:  # a network of its own resolves through slirp4netns's resolver
            out = run_in(spec_for(world), "cat /etc/resolv.conf")
            assert out.stdout.startswith("nameserver 10.0.2.3\n"), out.stderr


def test_a_resolver_file_linked_into_a_hidden_directory_is_bound_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from laneboard.agents import sandbox_spec

    run = tmp_path / "run"
    (run / "systemd" / "resolve").mkdir(parents=True)
    stub = run / "systemd" / "resolve" / "stub-resolv.conf"
    stub.write_text("nameserver 127.0.0.53\n")
    link = tmp_path / "resolv.conf"
    link.symlink_to(stub)
    monkeypatch.setattr(sandbox_spec, "RESOLVER", str(link))
    assert sandbox_spec.resolver_files([str(run)]) == [str(stub)]
    assert sandbox_spec.resolver_files([str(tmp_path / "elsewhere")]) == []
    assert sandbox_spec.runtime_dirs("darwin") == []
    linux = sandbox_spec.runtime_dirs("linux")
    assert "/run" in linux and len(linux) == len(set(linux))  # /var/run is a link to it
