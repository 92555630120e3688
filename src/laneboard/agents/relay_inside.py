"""The relay's listeners, bound by a process of their own inside a sandbox's network.

Run by ``agents.relay`` when the sandbox's network belongs to a user namespace that this
process must join first (``agents.userns``): a process with threads, as the supervisor
is, cannot. The helper joins it, enters the network, binds a listener per port and
address there, hands the listening sockets back over a unix socket (``SCM_RIGHTS``) and
ends; a socket stays in the network it was made in.

    python -m laneboard.agents.relay_inside USERNS_FD NETNS_FD CHANNEL_FD PORT...

The channel carries one JSON document: ``{"ports": [...]}`` (the port of each socket
sent with it, in order) or ``{"error": [errno, message]}``.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Sequence

from laneboard.agents.relay import INSIDE, Listeners, bound
from laneboard.agents.userns import CLONE_NEWNET, CLONE_NEWUSER, enter


def bind_inside(userns_fd: int, netns_fd: int, ports: Sequence[int]) -> Listeners:
    enter(userns_fd, CLONE_NEWUSER, "user namespace")
    enter(netns_fd, CLONE_NEWNET, "network")
    made: Listeners = []
    for port in ports:
        for address, family in INSIDE:
            sock = bound(address, family, port)
            if sock is not None:
                made.append((sock, port))
    return made


def main(argv: Sequence[str]) -> int:
    userns_fd, netns_fd, channel_fd, *ports = (int(a) for a in argv)
    with socket.socket(fileno=channel_fd) as channel:
        try:
            made = bind_inside(userns_fd, netns_fd, ports)
        except OSError as exc:
            channel.sendall(json.dumps({"error": [exc.errno or 0, str(exc)]}).encode())
            return 1
        doc = json.dumps({"ports": [port for _, port in made]}).encode()
        socket.send_fds(channel, [doc], [sock.fileno() for sock, _ in made])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
