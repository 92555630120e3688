"""Unix sockets whose path may be longer than ``sun_path`` allows (about 107 bytes): such
a path is reached through its directory's descriptor, ``/proc/self/fd/N/name`` (Linux)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

MAX_PATH = 100


def _through_dir(path: str, use: Callable[[str], None]) -> None:
    if len(path.encode()) <= MAX_PATH:
        use(path)
        return
    fd = os.open(os.path.dirname(path) or "/", os.O_RDONLY)
    try:
        use(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
    finally:
        os.close(fd)


def connect(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        _through_dir(path, sock.connect)
    except BaseException:
        sock.close()
        raise
    return sock


def bind(sock: socket.socket, path: str) -> None:
    _through_dir(path, sock.bind)
