"""The sandbox's network run by a user who is not root, as most people run laneboard.

bubblewrap run by such a user makes a user namespace of its own, and the namespace that
owns the sandbox's network is not the one its first process runs in: slirp4netns and the
relay of ``host_ports`` must enter the owner first, or the kernel refuses them (and every
sandboxed agent with the network on failed to start). The suite runs as root here, so
these tests run a small driver as ``nobody``, with the system's own Python (any user may
run it) and a world-readable copy of the package.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"
SRC = Path(__file__).resolve().parents[2] / "src"

DRIVER = r"""
import json, os, subprocess, sys
from laneboard.agents import sandbox
from laneboard.agents.sandbox import Sandbox
from laneboard.agents.sandbox_spec import SessionPaths, build_spec
from laneboard.errors import LaneboardError

root, slirp, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
PROBE = (
    "import socket, sys\n"
    "s = socket.socket()\n"
    "s.settimeout(5)\n"
    "try:\n"
    "    s.connect(('127.0.0.1', int(sys.argv[1])))\n"
    "    s.sendall(b'ping')\n"
    "    s.shutdown(socket.SHUT_WR)\n"
    "    print('GOT', s.recv(100).decode())\n"
    "except OSError as exc:\n"
    "    print('REFUSED', type(exc).__name__)\n"
)


def spec(name, network, host_ports):
    lane = os.path.join(root, name, "lane")
    os.makedirs(lane, exist_ok=True)
    state = os.path.join(root, name, "state")
    paths = SessionPaths(
        kind="codex", cwd=lane, home=os.path.join(state, "home"),
        tmp=os.path.join(state, "tmp"), state_dir=state, checkout=lane, lane=lane,
        token_dir=os.path.join(state, "tokens"), network=network, host_network=False,
        host_ports=host_ports, database=None,
    )
    return build_spec(paths, {"HOME": root, "PATH": os.environ["PATH"]}, None)


def run(name, network, host_ports):
    box = Sandbox(spec(name, network, host_ports), slirp=slirp)
    try:
        proc = sandbox.start(
            box, [sys.executable, "-c", PROBE, str(port)], {"PATH": os.environ["PATH"]},
            cwd=box.spec.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    except LaneboardError as exc:
        return {"started": False, "said": exc.message}
    out, err = proc.communicate(timeout=60)
    return {"started": True, "said": (out + err).strip()}


print(json.dumps({
    "isolated": run("isolated", True, ()),
    "relayed": run("relayed", True, (port,)),
    "none_relayed": run("none", False, (port,)),
}))
"""


def _unprivileged() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("the suite runs unprivileged already: the other sandbox tests cover it")
    for tool in ("bwrap", "slirp4netns"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} (which any user may run) is not installed")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("there is no user 'nobody' to run as")


def test_a_user_who_is_not_root_gets_the_sandboxs_network_and_its_host_ports(
    reverser: int,
) -> None:
    user = _unprivileged()
    root = Path(tempfile.mkdtemp(prefix="lb-unpriv-"))
    try:
        shutil.copytree(SRC / "laneboard", root / "src" / "laneboard")
        (root / "work").mkdir()
        for path in (root, *root.rglob("*")):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.chown(root / "work", user.pw_uid, user.pw_gid)
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(root / "src"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": str(root / "work"),
        }
        check = subprocess.run(
            ["bwrap", "--ro-bind", "/", "/", "--unshare-net", "true"],
            user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if check.returncode != 0:
            pytest.skip(f"bwrap cannot run unprivileged here: {check.stderr.strip()[:200]}")
        out = subprocess.run(
            [SYSTEM_PYTHON, "-c", DRIVER, str(root / "work"), str(shutil.which("slirp4netns")),
             str(reverser)],
            user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd=root / "work",
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # the network of its own comes up, and the host's loopback stays out of reach
    assert got["isolated"] == {"started": True, "said": "REFUSED ConnectionRefusedError"}, got
    # a named port of the host's loopback is relayed in, with and without a route out
    assert got["relayed"] == {"started": True, "said": "GOT gnip"}, got
    assert got["none_relayed"] == {"started": True, "said": "GOT gnip"}, got


@pytest.fixture
def owned_network() -> Iterator[int]:
    """A process in a network namespace owned by a user namespace of its own, as
    bubblewrap makes them for a user who is not root (made here with ``unshare``)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    proc = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--net", "sh", "-c", "ip link set lo up; "
         "echo up; exec sleep 120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "up":
            pytest.skip(f"no user namespace here: {proc.communicate(timeout=10)[1][:200]}")
        yield proc.pid
    finally:
        proc.kill()
        proc.communicate(timeout=10)  # and its pipes closed


def test_the_relay_binds_inside_a_network_of_another_user_namespace_by_a_helper(
    owned_network: int, reverser: int
) -> None:
    """The listeners are made by ``relay_inside`` in its own process and passed back:
    bound in the sandbox's network (a connection made there reaches them), not here."""
    from laneboard.agents import relay, userns

    owner = userns.netns_owner(owned_network)
    assert owner is not None  # not this process's user namespace: the helper's way
    os.close(owner)
    listeners = relay.listen_inside(owned_network, [reverser])
    try:
        assert listeners and {port for _, port in listeners} == {reverser}
        # here, on this host's loopback, the port is the reverser's, not a listener's
        for sock, _ in listeners:
            assert sock.getsockname()[1] == reverser
        inside = subprocess.run(
            ["nsenter", "-t", str(owned_network), "-U", "-n", "--preserve-credentials",
             "python3", "-c", "import socket, sys; s = socket.create_connection(('127.0.0.1', "
             "int(sys.argv[1])), 5); print('CONNECTED')", str(reverser)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert "CONNECTED" in inside.stdout, inside.stderr
        accepted, _ = listeners[0][0].accept()
        accepted.close()
    finally:
        for sock, _ in listeners:
            sock.close()


def test_the_helpers_refusal_is_one_clear_error() -> None:
    from laneboard.agents.relay import _helpers_answer

    said = b'{"error": [1, "entering the sandbox\'s network: Operation not permitted"]}'
    with pytest.raises(OSError, match="entering the sandbox's network: Operation not permitted"):
        _helpers_answer(said, [], "")
    with pytest.raises(OSError, match="ModuleNotFoundError: no laneboard"):
        _helpers_answer(b"", [], "Traceback ...\nModuleNotFoundError: no laneboard\n")
    left = socket.socket()
    with pytest.raises(OSError, match="said"):
        _helpers_answer(b'{"ports": [1, 2]}', [left], "")  # a socket short: none is kept
    assert left.fileno() == -1
