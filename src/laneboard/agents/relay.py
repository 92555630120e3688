"""Single ports of the host's loopback, relayed into a sandbox with a network of its own.

An agent kind whose model endpoint listens on this machine (a local gateway) names its
port in ``host_ports``; the rest of the host's loopback, where ``lb serve`` and a
database may trust local callers, stays out of reach. For each port, a listening socket
is made *inside* the sandbox's network namespace, on ``127.0.0.1`` and ``::1``: a thread
of the supervisor enters that namespace (``setns``), binds, and leaves with the thread.
The supervisor then accepts on those sockets from its own namespace and, for each
connection, connects to the same port of the host's loopback and copies bytes both ways.

Nothing runs inside the sandbox for it, and nothing outside listens anywhere new. The
relay ends with the sandbox: it watches a pipe (as ``slirp4netns`` does) whose only
writing ends belong to the sandbox's processes, then closes its listeners and every
connection it carried.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

from laneboard.agents import userns

HELPER_TIMEOUT_S = 30.0  # the helper binds in a moment; its interpreter starts first
BACKLOG = 64
CHUNK = 65536
MAX_CARRIED = 64  # connections one sandbox may hold at once: each costs two threads here
INSIDE = (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6))
Listeners = list[tuple[socket.socket, int]]  # each listening socket with its port


def listen_inside(pid: int, ports: Sequence[int]) -> Listeners:
    """Listening sockets on each of ``ports`` at the loopback of ``pid``'s network
    namespace, with their ports; raises ``OSError`` when the namespace cannot be entered
    or a port cannot be bound there (``::1`` is skipped where IPv6 is off). A network
    owned by another user namespace (bubblewrap run by a user who is not root) is bound
    in by a process of its own (``agents.relay_inside``); else by a thread here."""
    owner = userns.netns_owner(pid)
    if owner is not None:
        try:
            return _bound_by_helper(pid, owner, ports)
        finally:
            os.close(owner)
    made: Listeners = []
    failed: list[OSError] = []

    def enter_and_bind() -> None:  # setns moves this thread only, and it ends here
        try:
            net = os.open(userns.net_path(pid), os.O_RDONLY | os.O_CLOEXEC)
            try:
                userns.enter(net, userns.CLONE_NEWNET, "network")
            finally:
                os.close(net)
            for port in ports:
                for address, family in INSIDE:
                    sock = bound(address, family, port)
                    if sock is not None:
                        made.append((sock, port))
        except OSError as exc:
            failed.append(exc)

    worker = threading.Thread(target=enter_and_bind, name="relay-setns", daemon=True)
    worker.start()
    worker.join()
    if failed:
        for sock, _ in made:
            sock.close()
        raise failed[0]
    return made


def _bound_by_helper(pid: int, owner: int, ports: Sequence[int]) -> Listeners:
    """``listen_inside`` through ``agents.relay_inside``: it joins ``owner`` (the user
    namespace that owns the network) and the network, binds, and sends the sockets back."""
    net = os.open(userns.net_path(pid), os.O_RDONLY | os.O_CLOEXEC)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        argv = [sys.executable, "-m", "laneboard.agents.relay_inside",
                str(owner), str(net), str(theirs.fileno()), *map(str, ports)]  # fmt: skip
        helper = subprocess.Popen(
            argv, pass_fds=(owner, net, theirs.fileno()), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(net)
        theirs.close()
    try:
        ours.settimeout(HELPER_TIMEOUT_S)
        doc, fds, _, _ = socket.recv_fds(ours, 65536, 2 * len(ports))
    except OSError as exc:
        helper.kill()
        helper.communicate()  # reaped, its pipe closed
        raise OSError(exc.errno or 0, f"the relay's helper did not answer: {exc}") from exc
    finally:
        ours.close()
    err = helper.communicate(timeout=HELPER_TIMEOUT_S)[1].decode("utf-8", "replace")
    return _helpers_answer(doc, [socket.socket(fileno=fd) for fd in fds], err)


def _helpers_answer(doc: bytes, socks: list[socket.socket], err: str) -> Listeners:
    """The sockets the helper sent, each with its port, or its refusal as ``OSError``."""
    said: dict[str, Any] = {"error": [0, " ".join(err.split())[-200:] or "no answer"]}
    with contextlib.suppress(ValueError):
        if doc:
            said = dict(json.loads(doc))
    ports = said.get("ports")
    if isinstance(ports, list) and len(ports) == len(socks) and "error" not in said:
        return list(zip(socks, [int(p) for p in ports], strict=True))
    for sock in socks:
        sock.close()
    errno, message = said.get("error") or [0, f"the relay's helper said {doc[:200]!r}"]
    raise OSError(int(errno), str(message))


def bound(address: str, family: socket.AddressFamily, port: int) -> socket.socket | None:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        if family == socket.AF_INET6:
            return None  # no IPv6 in the sandbox: 127.0.0.1 serves
        raise
    return sock


def _to_host(port: int) -> socket.socket:
    """A connection to ``port`` on this host's loopback (IPv4 first, then IPv6)."""
    last: OSError | None = None
    for address, family in INSIDE:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.connect((address, port))
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    assert last is not None
    raise last


class Relay:
    """The relays of one sandbox: its listeners, the connections they carry, and the
    pipe whose end (all its writers gone) ends them all."""

    def __init__(self, listeners: list[tuple[socket.socket, int]], exit_fd: int) -> None:
        self.listeners = {sock.fileno(): (sock, port) for sock, port in listeners}
        self.exit_fd = exit_fd
        self.open: set[socket.socket] = set()
        self.carried = 0
        self.lock = threading.Lock()
        self.closed = False

    def start(self) -> None:
        threading.Thread(target=self._serve, name="relay", daemon=True).start()

    def _serve(self) -> None:
        waiter = select.poll()  # not select(): a busy supervisor's descriptors pass 1024
        for fd in (*self.listeners, self.exit_fd):
            waiter.register(fd, select.POLLIN)
        try:
            while True:
                for fd, _ in waiter.poll():
                    if fd == self.exit_fd:
                        return  # every process of the sandbox is gone
                    sock, port = self.listeners[fd]
                    with contextlib.suppress(OSError):
                        inner, _ = sock.accept()
                        self._carry(inner, port)
        finally:
            self.close()

    def _carry(self, inner: socket.socket, port: int) -> None:
        """Relay one connection, unless the sandbox holds ``MAX_CARRIED`` already: an agent
        that opens connections without end is cut off, not the supervisor's threads."""
        with self.lock:
            full = self.carried >= MAX_CARRIED
            if not full:
                self.carried += 1
        if full:
            inner.close()
            return
        if not self._keep(inner):
            return
        threading.Thread(
            target=self._connect, args=(inner, port), name=f"relay-{port}", daemon=True
        ).start()

    def _connect(self, inner: socket.socket, port: int) -> None:
        try:
            outer = _to_host(port)
        except OSError:
            outer = None  # refused here: the agent sees it refused too
        if outer is not None and self._keep(outer):
            back = threading.Thread(target=_copy, args=(outer, inner), daemon=True)
            back.start()
            _copy(inner, outer)
            back.join()
            self._drop(outer)
        self._drop(inner)
        with self.lock:
            self.carried -= 1

    def _keep(self, sock: socket.socket) -> bool:
        with self.lock:
            if self.closed:
                sock.close()
                return False
            self.open.add(sock)
            return True

    def _drop(self, sock: socket.socket) -> None:
        with self.lock:
            self.open.discard(sock)
        sock.close()

    def close(self) -> None:
        """End every listener and connection (their copies then end too)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            carried, self.open = list(self.open), set()
        for sock, _ in self.listeners.values():
            sock.close()
        for sock in carried:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        os.close(self.exit_fd)


def _copy(src: socket.socket, dst: socket.socket) -> None:
    """Bytes from ``src`` to ``dst`` until ``src`` ends; then ``dst`` hears the end."""
    # a reset on either side (or the relay closing both at the sandbox's end) ends the
    # copy as an end of stream does: the other side hears the end either way
    with contextlib.suppress(OSError):
        while data := src.recv(CHUNK):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
