"""A network of the sandbox's own: how an isolated bwrap sandbox gets its route out.

With the network on, a session that shared the host's network namespace would share its
loopback too, where ``lb serve`` trusts a tokenless caller as the local user and a
database may trust local connections. So the sandbox gets a namespace of its own
(``--unshare-net``) and ``slirp4netns``, running outside it, gives that namespace a
user-mode route out: the agent reaches its model's API, package registries and the rest
of the network as before, and the host's loopback (``--disable-host-loopback``) not at
all. The board stays in reach through its unix socket.

One start, in order:

1. bwrap starts with ``--info-fd`` (it writes its child's pid there) and ``--block-fd``
   (the child waits on it before it runs the agent);
2. once bwrap's child has brought its loopback up (two netlink requests of its own, which
   fail when slirp4netns configures the namespace at the same moment),
   ``slirp4netns --configure`` joins the child's network namespace and says when the
   interface, route and resolver address are up (``--ready-fd``);
3. one byte on the block pipe lets the agent start.

``slirp4netns`` ends when the sandbox does: it watches a pipe (``--exit-fd``) whose only
writing ends are inherited by the sandbox's processes. Inside, the resolver's file names
slirp4netns's resolver (``10.0.2.3``), which forwards to the host's.

A kind's ``host_ports`` are relayed in (``agents.relay``) between steps 2 and 3, with or
without slirp4netns (``network = "none"``); the relay watches the same pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from laneboard.agents import userns
from laneboard.agents.sandbox import RESOLVER, NetFds, Sandbox, bwrap_argv
from laneboard.errors import LaneboardError

READY_TIMEOUT_S = 10.0
GUEST_RESOLVER = "10.0.2.3"  # slirp4netns's built-in resolver


def resolver_text(host: str) -> str:
    """The sandbox's resolver file: the host's search and options lines, slirp4netns's
    resolver as the only name server."""
    kept = [
        line
        for line in host.splitlines()
        if line.split()[:1] and line.split()[0] in ("search", "domain", "options")
    ]
    return "\n".join([f"nameserver {GUEST_RESOLVER}", *kept]) + "\n"


def resolver_path(box: Sandbox) -> str:
    """Where a session's resolver file is kept: beside its /tmp."""
    return box.spec.tmp.rstrip("/") + ".resolv.conf"


def write_resolver(box: Sandbox) -> str:
    """The host file bound over the resolver's file (``resolver_path``). Written
    whole and renamed into place: a running session of the same name keeps the file it
    was started with and never sees it half written."""
    path = resolver_path(box)
    try:
        with open(RESOLVER, encoding="utf-8") as fh:
            host = fh.read()
    except OSError:
        host = ""
    fresh = f"{path}.{os.getpid()}.{threading.get_ident()}"
    with open(fresh, "w", encoding="utf-8") as fh:
        fh.write(resolver_text(host))
    os.replace(fresh, path)
    return path


def start(
    box: Sandbox, argv: Sequence[str], env: Mapping[str, str], **popen: Any
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in ``box`` with a network of its own (its route out when
    ``isolated``, the host's loopback ports it names when ``relayed``); refuses
    (``SANDBOX_UNAVAILABLE``) when that network cannot be set up, and then nothing of the
    sandbox keeps running."""
    assert box.isolated or box.relayed
    resolver = write_resolver(box) if box.isolated else None
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    exit_r, exit_w = os.pipe()
    inherited = (info_w, block_r, exit_w)
    try:
        proc = subprocess.Popen(
            bwrap_argv(box.spec, argv, box.binary, NetFds(info_w, block_r, resolver)),
            env=dict(env),
            pass_fds=inherited,
            **popen,
        )
    except BaseException:
        for fd in (info_r, block_w, exit_r, *inherited):
            os.close(fd)
        raise
    for fd in inherited:  # the sandbox holds them now
        os.close(fd)
    try:
        pid = _child_pid(info_r)
        _wait_for_loopback(pid)
        if box.isolated:
            assert box.slirp is not None
            _attach(box.slirp, pid, exit_r)
        if box.relayed:
            _relay(pid, box.spec.host_ports, exit_r)
    except LaneboardError:
        _end(proc)
        raise
    finally:
        os.close(info_r)
        os.close(exit_r)
        with contextlib.suppress(OSError):  # its sandbox ended: nothing starts
            os.write(block_w, b"1")  # the agent starts
        os.close(block_w)
    return proc


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read (or its writer closed) within the timeout;
    ``poll``, not ``select``: a busy supervisor's descriptors pass select's 1024."""
    waiter = select.poll()
    waiter.register(fd, select.POLLIN)
    return bool(waiter.poll(READY_TIMEOUT_S * 1000))


def _child_pid(info_r: int) -> int:
    """The pid of the sandbox's first process, from bwrap's ``--info-fd`` JSON."""
    data = b""
    while True:
        chunk = os.read(info_r, 4096) if _readable(info_r) else b""
        if not chunk:
            raise _unavailable("bwrap ended before it started the sandbox")
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except ValueError:
            continue  # not all of it yet
        except (KeyError, TypeError) as exc:
            raise _unavailable(f"bwrap's --info-fd said {data[:200]!r}") from exc


def _wait_for_loopback(pid: int) -> None:
    """Until the namespace of ``pid`` has its loopback up (bwrap sets it up: an address,
    then up, which joins ``lo`` to the all-hosts group listed in ``net/igmp``). A kernel
    without that file, or a child gone, ends the wait; it is bounded either way."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/net/igmp", encoding="ascii", errors="replace") as fh:
                if any(line.split()[1:2] == ["lo"] for line in fh):
                    return
        except OSError:
            return
        time.sleep(0.0005)  # the child is between two netlink requests: a moment


def _attach(slirp: str, pid: int, exit_r: int) -> None:
    """Give the namespace of ``pid`` its route out; returns once it is up. slirp4netns
    joins the user namespace that owns the network first, when that is not this
    process's own (bubblewrap run by a user who is not root; ``agents.userns``)."""
    try:
        owner = userns.netns_owner(pid)
    except OSError as exc:
        raise _unavailable(f"the sandbox's network cannot be read: {exc}") from exc
    ready_r, ready_w = os.pipe()
    argv = [
        slirp, "--configure", "--mtu=65520", "--disable-host-loopback",
        "--ready-fd", str(ready_w), "--exit-fd", str(exit_r),
        *([f"--userns-path=/proc/self/fd/{owner}"] if owner is not None else []),
        str(pid), "tap0",
    ]  # fmt: skip
    try:
        helper = subprocess.Popen(
            argv,
            pass_fds=(ready_w, exit_r, *([owner] if owner is not None else [])),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a stop of the supervisor's group leaves it to its pipe
        )
    except OSError as exc:
        os.close(ready_r)
        os.close(ready_w)
        raise _unavailable(f"{slirp} could not run: {exc}") from exc
    finally:
        if owner is not None:
            os.close(owner)
    os.close(ready_w)
    try:
        said = os.read(ready_r, 1) if _readable(ready_r) else b""
    finally:
        os.close(ready_r)
    if said != b"1":
        helper.kill()
        err = helper.communicate()[1].decode("utf-8", "replace")
        raise _unavailable(f"slirp4netns did not set the network up: {' '.join(err.split())[:200]}")
    threading.Thread(target=_reap, args=(helper,), daemon=True, name="slirp4netns").start()


def _relay(pid: int, ports: Sequence[int], exit_r: int) -> None:
    """Relay ``ports`` of the host's loopback into the namespace of ``pid``, until the
    sandbox ends (``agents.relay``)."""
    from laneboard.agents import relay

    try:
        listeners = relay.listen_inside(pid, ports)
    except OSError as exc:
        raise _unavailable(f"the host ports {list(ports)} could not be relayed: {exc}") from exc
    relay.Relay(listeners, os.dup(exit_r)).start()


def _reap(helper: subprocess.Popen[bytes]) -> None:
    helper.communicate()  # it ends with the sandbox (its --exit-fd); no zombie is left


def _end(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()


def _unavailable(problem: str) -> LaneboardError:
    return LaneboardError(
        "SANDBOX_UNAVAILABLE",
        f"the agent's sandbox has no network: {problem}",
        'run lb doctor; set network = "host" for this agent kind to share the host\'s '
        "network instead, or uninstall slirp4netns",
    )
