"""The sandbox's network: with the network on, a namespace of the session's own whose
route out (slirp4netns) never reaches the host's loopback, where ``lb serve`` trusts a
tokenless caller as the local user; ``network = "host"`` shares the host's on purpose."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.hostile.test_sandbox import CONNECT, SLIRP, run_in, spec_for

from laneboard.agents import netns, sandbox
from laneboard.agents.sandbox import (
    Sandbox,
    SandboxSettings,
    SandboxStatus,
    sandbox_status,
    seatbelt_profile,
)
from laneboard.errors import LaneboardError

needs_slirp = pytest.mark.skipif(SLIRP is None, reason="slirp4netns is not installed")
PROBE = CONNECT.replace("socket.AF_UNIX", "socket.AF_INET").replace(
    "s.connect(sys.argv[1])", "s.connect((sys.argv[1], int(sys.argv[2])))"
)


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, int]]:
    """A service on every address of this host (loopback included)."""
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen(8)
    try:
        yield sock, sock.getsockname()[1]
    finally:
        sock.close()


def probe(spec: sandbox.SandboxSpec, host: str, port: int) -> str:
    out = run_in(spec, f'{sys.executable} -c "{PROBE}" {host} {port}')
    return out.stdout + out.stderr


def global_address() -> str | None:
    """One of this host's own addresses that is not loopback."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            return parts[parts.index("inet") + 1].split("/")[0]
    return None


@needs_slirp
def test_the_hosts_loopback_services_are_out_of_reach_with_the_network_on(
    world: dict[str, Path], listener: tuple[socket.socket, int]
) -> None:
    _, port = listener
    assert "CONNECTED" in probe(spec_for(world, host_network=True), "127.0.0.1", port)
    for host in ("127.0.0.1", "10.0.2.2"):  # 10.0.2.2: slirp4netns's way to the host
        assert "refused" in probe(spec_for(world), host, port), host
    assert "refused" in probe(spec_for(world, network=False), "127.0.0.1", port)


@needs_slirp
def test_the_network_on_has_a_route_out(
    world: dict[str, Path], listener: tuple[socket.socket, int]
) -> None:
    """The route out works: a service on this host's own (non-loopback) address answers,
    as a model's API elsewhere would; ``network = "none"`` has no route at all."""
    _, port = listener
    address = global_address()
    if address is None:
        # deliberate: the route out is shown by a service on this host's own address (the
        # servers here may bind nothing else); a host with only loopback has none to use
        pytest.skip("this host has no address but loopback")
    assert "CONNECTED" in probe(spec_for(world), address, port)
    assert "refused" in probe(spec_for(world, network=False), address, port)


def _slirps() -> set[int]:
    """This process's own slirp4netns helpers: the tests running beside this one (other
    workers, supervisors in subprocesses) start theirs, which are no concern of this test."""
    out = subprocess.run(
        ["pgrep", "-x", "-P", str(os.getpid()), "slirp4netns"], capture_output=True, text=True
    )
    return {int(p) for p in out.stdout.split()}


@needs_slirp
def test_the_network_helper_ends_with_the_sandbox(world: dict[str, Path]) -> None:
    before = _slirps()
    box = Sandbox(spec_for(world), slirp=SLIRP)
    proc = sandbox.start(box, ["/bin/sh", "-c", "exit 3"], {"PATH": os.environ["PATH"]},
                         start_new_session=True)  # fmt: skip
    assert proc.wait(30) == 3
    deadline = time.monotonic() + 30
    while _slirps() - before and time.monotonic() < deadline:
        time.sleep(0.05)  # waits for the helper's exit, not for time to pass
    assert not _slirps() - before


def test_a_network_that_cannot_be_set_up_starts_nothing(world: dict[str, Path]) -> None:
    """A broken slirp4netns: SANDBOX_UNAVAILABLE, and the agent's command never ran."""
    marker = world["lane"] / "ran"
    box = Sandbox(spec_for(world), slirp="/bin/false")
    with pytest.raises(LaneboardError) as err:
        sandbox.start(box, ["/bin/sh", "-c", f"touch {marker}"], {"PATH": os.environ["PATH"]},
                      start_new_session=True)  # fmt: skip
    assert err.value.code == "SANDBOX_UNAVAILABLE"
    assert 'network = "host"' in err.value.fix
    assert not marker.exists()


def test_the_resolver_inside_names_slirps_and_keeps_the_hosts_search() -> None:
    host = "# managed\nnameserver 127.0.0.53\nsearch corp.example\noptions edns0 trust-ad\n"
    assert netns.resolver_text(host) == (
        "nameserver 10.0.2.3\nsearch corp.example\noptions edns0 trust-ad\n"
    )
    assert netns.resolver_text("") == "nameserver 10.0.2.3\n"


def test_which_sessions_get_a_network_of_their_own(world: dict[str, Path]) -> None:
    on, host, none = (
        spec_for(world),
        spec_for(world, host_network=True),
        spec_for(world, network=False),
    )
    assert Sandbox(on, slirp="/usr/bin/slirp4netns").isolated
    assert not Sandbox(on).isolated  # no slirp4netns: the host's network, said by doctor
    assert not Sandbox(host, slirp="/usr/bin/slirp4netns").isolated
    assert not Sandbox(none, slirp="/usr/bin/slirp4netns").isolated
    args = sandbox.bwrap_argv(on, ["true"], net=sandbox.NetFds(5, 6, "/x/resolv"))
    assert args[args.index("--info-fd") + 1] == "5" and "--unshare-net" in args
    assert args[args.index("/x/resolv") + 1] == os.path.realpath("/etc/resolv.conf")
    assert '(remote ip "localhost:*")' in seatbelt_profile(on)
    assert "localhost" not in seatbelt_profile(host)


def test_the_status_names_a_shared_network_and_the_fix() -> None:
    status = SandboxStatus("bwrap", "bwrap", "/usr/bin/bwrap", True)  # no slirp4netns found
    assert status.network == "shared" and status.to_dict()["network"] == "shared"
    assert "SHARED" in status.line() and "apt-get install slirp4netns" in status.line()
    isolated = SandboxStatus("bwrap", "bwrap", "/usr/bin/bwrap", True, slirp="/usr/bin/slirp4netns")
    assert isolated.network == "isolated" and "SHARED" not in isolated.line()
    found = sandbox_status(SandboxSettings("bwrap")).slirp  # what lb start will use
    assert found == shutil.which("slirp4netns")


def test_doctor_asks_for_slirp4netns_where_agents_share_the_network() -> None:
    from laneboard.supervisor.doctor import boundary_reasons

    def boundary(network: str) -> dict[str, object]:
        return {"sandbox": {"ok": True, "network": network}, "unrunnable": []}

    (reason,) = boundary_reasons(boundary("shared"))
    assert "loopback" in reason and "apt-get install slirp4netns" in reason
    assert boundary_reasons(boundary("isolated")) == []
    assert boundary_reasons(boundary("profile")) == []


@needs_slirp
def test_sandboxes_started_together_all_get_their_network(tmp_path: Path) -> None:
    """bwrap brings its loopback up with netlink requests of its own, which failed
    (``loopback: Failed RTM_NEWADDR``) when slirp4netns configured the namespace at the
    same moment: slirp4netns now starts once that loopback is up."""
    import threading

    failed: list[str] = []

    def starts(i: int) -> None:
        lane = tmp_path / f"lane{i}"
        lane.mkdir()
        box = Sandbox(sandbox.SandboxSpec(cwd=str(lane), tmp=str(tmp_path / f"tmp{i}"),
                                          writable=(str(lane),)), slirp=SLIRP)  # fmt: skip
        for _ in range(4):
            proc = sandbox.start(box, ["/bin/sh", "-c", "echo up"], {"PATH": os.environ["PATH"]},
                                 cwd=str(lane), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)  # fmt: skip
            out, err = proc.communicate(timeout=60)
            if proc.returncode != 0 or out != b"up\n":
                failed.append(err.decode(errors="replace"))

    threads = [threading.Thread(target=starts, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []


@needs_slirp
def test_a_sandbox_starts_with_its_pipes_past_descriptor_1024(world: dict[str, Path]) -> None:
    """A busy supervisor's new pipes are numbered past 1024, where ``select`` fails: the
    start waits on them with ``poll``."""
    from tests.descriptors import past_1024

    with past_1024():
        out = run_in(spec_for(world), "echo up")
    assert out.returncode == 0 and out.stdout == "up\n", out.stderr


def test_a_bad_network_setting_names_every_choice_quoted() -> None:
    """``network = "bogus"``: one line naming the choices, the empty one readable."""
    from laneboard.config_keys import AGENT_KIND_KEYS, Bad

    with pytest.raises(Bad) as bad:
        AGENT_KIND_KEYS["network"]("bogus")
    assert bad.value.message == "'bogus' is not one of \"\", none, host"
    assert bad.value.fix == 'use "" or none or host'


def test_host_ports_takes_port_numbers_and_refuses_anything_else(tmp_path: Path) -> None:
    from laneboard.config_keys import AGENT_KIND_KEYS, Bad

    check = AGENT_KIND_KEYS["host_ports"]
    assert check([11434, 8080, 11434]) == (11434, 8080)
    assert check(11434) == (11434,) and check("[1, 65535]") == (1, 65535) and check("") == ()
    for bad, said in ((0, "0 is not a port"), (65536, "65536 is not"), ("x", "'x' is not"),
                      ([True], "True is not"), ([1.5], "1.5 is not"), ({}, "{} is not")):  # fmt: skip
        with pytest.raises(Bad) as err:
            check(bad)
        assert err.value.message.startswith(said), err.value.message
    cfg = tmp_path / "laneboard"
    cfg.mkdir()
    (cfg / "config.toml").write_text("[supervisor.agent_kinds.pi]\nhost_ports = [0]\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "config", "check"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode != 0 and "CONFIG_INVALID" in out.stderr, out.stderr
    assert "host_ports" in out.stderr and "0 is not a port number" in out.stderr


# -- single ports of the host's loopback, relayed in (``host_ports``) ---------------------------
ECHO_BACK = (
    "import hashlib, socket, sys\n"
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n"
    "blob = bytes(range(256)) * 8192\n"
    "s.sendall(blob)\n"
    "s.shutdown(socket.SHUT_WR)\n"
    "got = b''\n"
    "while chunk := s.recv(65536):\n"
    "    got += chunk\n"
    "print('ECHOED', len(got), got == blob[::-1])\n"
)


def relayed(spec: sandbox.SandboxSpec, script: str) -> str:
    out = run_in(spec, script)
    return out.stdout + out.stderr


@needs_slirp
def test_a_named_host_port_is_relayed_and_no_other(
    world: dict[str, Path], reverser: int, listener: tuple[socket.socket, int]
) -> None:
    """``host_ports``: the one port answers inside at 127.0.0.1 (2 MB each way, in
    order), while another service on the host's loopback stays refused."""
    _, other = listener
    spec = spec_for(world, host_ports=(reverser,))
    assert Sandbox(spec, slirp=SLIRP).relayed
    py = sys.executable
    out = relayed(
        spec, f'{py} -c "{ECHO_BACK}" 127.0.0.1 {reverser}; {py} -c "{PROBE}" 127.0.0.1 {other}'
    )
    assert "ECHOED 2097152 True" in out and "refused" in out, out


def test_a_sandbox_without_a_route_out_reaches_only_its_host_ports(
    world: dict[str, Path], reverser: int, listener: tuple[socket.socket, int]
) -> None:
    """``network = "none"`` with ``host_ports``: a local model endpoint and nothing else."""
    _, other = listener
    spec = spec_for(world, network=False, host_ports=(reverser,))
    assert Sandbox(spec).relayed and not Sandbox(spec).isolated
    py = sys.executable
    script = f'{py} -c "{ECHO_BACK}" 127.0.0.1 {reverser}; {py} -c "{PROBE}" 127.0.0.1 {other}'
    out = relayed(spec, script)
    assert "ECHOED 2097152 True" in out and "refused" in out, out
    address = global_address()
    if address is not None:  # no route out: this host's own address is out of reach too
        said = probe(spec, address, other)
        assert "refused" in said or "unreachable" in said.lower(), said


def _relay_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("relay"))


def test_the_relay_ends_with_the_sandbox(world: dict[str, Path], reverser: int) -> None:
    """When the sandbox's last process ends, its relay stops listening and lets go of
    every connection it carried (an agent's child that kept one open included)."""
    before = _relay_threads()
    spec = spec_for(world, network=False, host_ports=(reverser,))
    hold = (
        "import socket, sys, time\n"
        "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
        "print('HELD', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = sandbox.start(
        Sandbox(spec),
        [sys.executable, "-c", hold, str(reverser)],
        {"PATH": os.environ["PATH"]},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"HELD\n"
    assert _relay_threads() > before  # listening, and carrying one connection
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()
    deadline = time.monotonic() + 30
    while _relay_threads() > before and time.monotonic() < deadline:
        time.sleep(0.02)  # waits for the threads to end, not for time to pass
    assert _relay_threads() == before


def test_host_ports_in_the_spec_and_the_seatbelt_profile(world: dict[str, Path]) -> None:
    spec = spec_for(world, host_ports=(11434,))
    assert spec.to_dict()["host_ports"] == [11434]
    profile = seatbelt_profile(spec)
    assert profile.index('"localhost:*"') < profile.index('(remote ip "localhost:11434")')
    none = seatbelt_profile(spec_for(world, network=False, host_ports=(11434,)))
    assert '(allow network-outbound (remote ip "localhost:11434"))' in none
    assert not Sandbox(spec_for(world, host_ports=(11434,))).relayed  # shared: reached already
    host = spec_for(world, host_network=True, host_ports=(11434,))
    assert not Sandbox(host, slirp="/usr/bin/slirp4netns").relayed


def test_an_agent_that_opens_connections_without_end_is_cut_off_at_the_cap(
    world: dict[str, Path],
) -> None:
    """Each relayed connection costs the supervisor two threads: past ``MAX_CARRIED`` held
    at once, a new one is closed at once (the held ones keep working)."""
    from laneboard.agents.relay import MAX_CARRIED

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(256)
    held: list[socket.socket] = []

    def greet() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"hi")
            held.append(conn)

    threading.Thread(target=greet, daemon=True).start()
    port = server.getsockname()[1]
    many = (
        "import socket, sys\n"
        "socks, said = [], []\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
        "    s.settimeout(20)\n"
        "    said.append(s.recv(2))\n"
        "    socks.append(s)\n"
        "print('GREETED', said.count(b'hi'), 'CLOSED', said.count(b''))\n"
    )
    spec = spec_for(world, network=False, host_ports=(port,))
    try:
        out = relayed(spec, f'{sys.executable} -c "{many}" {port} {MAX_CARRIED + 6}')
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert f"GREETED {MAX_CARRIED} CLOSED 6" in out, out


def test_lb_start_logs_what_of_the_hosts_loopback_each_kind_reaches(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    """The start log names a kind that shares the whole loopback and the single ports a
    kind has relayed in."""
    from tests.supervisor.helpers import config

    from laneboard.store import open_store
    from laneboard.supervisor.logs import LogFile
    from laneboard.supervisor.preflight import preflight
    from laneboard.supervisor.runtime import Runtime

    kinds = {"pi": {"network": "host"}, "claude": {"host_ports": (11434, 8080)}}
    cfg = config(tmp_path, agent_kinds=kinds)
    store = open_store(sqlite_store_url)
    log = tmp_path / "supervisor.log"
    try:
        preflight(Runtime(store, cfg, "m", LogFile(str(log))))
    finally:
        store.close()
    text = log.read_text()
    assert 'pi agents share this machine\'s network (network = \\"host\\")' in text  # logfmt
    assert "claude agents reach this machine's loopback port 11434, 8080" in text
