"""Entering a sandbox's namespaces from outside it, as root and as any other user.

bubblewrap run by a user who is not root makes user namespaces of its own: the one that
owns the sandbox's network namespace is not the one its first process runs in. A process
of that user may enter the network namespace only from inside its owner, which it may
join (the user made it) as long as it runs a single thread: slirp4netns is told that
owner (``--userns-path``), and the relay of ``host_ports`` binds its listeners in a
process of its own (``agents.relay_inside``). Run by root, bubblewrap makes no user
namespace, and root enters the network namespace directly.
"""

from __future__ import annotations

import ctypes
import fcntl
import os

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1): the user namespace that owns a namespace


def net_path(pid: int) -> str:
    return f"/proc/{pid}/ns/net"


def netns_owner(pid: int) -> int | None:
    """An open descriptor of the user namespace that owns the network namespace of
    ``pid``, when that is not this process's own (None: enter the network directly)."""
    net = os.open(net_path(pid), os.O_RDONLY | os.O_CLOEXEC)
    try:
        owner = fcntl.ioctl(net, NS_GET_USERNS)
    finally:
        os.close(net)
    mine = os.stat("/proc/self/ns/user")
    theirs = os.fstat(owner)
    if (theirs.st_ino, theirs.st_dev) == (mine.st_ino, mine.st_dev):
        os.close(owner)
        return None
    os.set_inheritable(owner, False)
    return owner


def enter(fd: int, kind: int, what: str) -> None:
    """``setns`` this thread into the namespace open as ``fd``; ``OSError`` naming
    ``what`` when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, kind) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"entering the sandbox's {what}: {os.strerror(err)}")
