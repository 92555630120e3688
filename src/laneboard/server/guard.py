"""``lb serve``'s bounds on its connections: how many it serves at once, and how long a
request may take to arrive.

uvicorn on its own keeps every connection it accepts until the client closes it: a
client that opens connections and never finishes a request holds an open file for each,
and once the process has none left it accepts nothing more, not even a caller with a
valid token (1,100 such connections under the usual limit of 1,024 open files stopped
every request, and each refused accept logged a traceback). ``lb serve`` runs uvicorn's
HTTP protocol with two bounds instead:

* ``max_connections`` (``lb serve --max-connections``, default ``MAX_CONNECTIONS``), and
  a quarter of them for one address other than the trusted loopback ones (so one remote
  client cannot take them all): a connection beyond them is answered at once with a 503
  ``STORE_UNAVAILABLE`` whose details say nothing was written (a remote ``lb`` calls again
  by itself), and closed;
* ``REQUEST_S``: a request must arrive whole (request line, headers and body) within
  this many seconds of its connection, or of the end of the answer before it on a
  connection kept alive; a connection still short of it then is answered 408 and closed.
  An answer being sent (an event stream, however long) is never cut by it.

The connections accepted in one go (up to ``BACKLOG``, the listen queue's length) are
counted once they are all open: ``open_files`` raises the process's soft limit of open
files to hold them on top of the bound, so that the bound, not the limit, is met first,
and refuses to start when the hard limit is too low for that.
Refusals are written to standard error: the first at once, then at most one line each
``REFUSALS_SAID_S`` with how many there were.
"""

from __future__ import annotations

import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from laneboard.errors import LaneboardError

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_CONNECTIONS = 512  # served at once by default, event streams included
MAX_CONNECTIONS_LIMIT = 100_000
REQUEST_S = 30.0  # for a whole request to arrive
# connections taken from the listen queue at once, before any of them is counted (and a
# surplus one closed): the open files they need come on top of the bound
BACKLOG = 128
HEADROOM = 128  # open files beside the connections: the board's, the listener, logs
REFUSALS_SAID_S = 60.0
SHARE_DIVISOR = 4  # an address other than a trusted one: a quarter of the bound at most
# a refused connection is closed once what its client sent is read (a socket closed unread
# would reset the client's read of the answer), or after this long if it sends nothing,
REFUSED_CLOSE_S = 2.0
REFUSED_KEPT = 128  # and only so many wait at once: in a flood each is closed at once

Clock = Callable[[], float]


def check_max_connections(n: int) -> int:
    if not 1 <= n <= MAX_CONNECTIONS_LIMIT:
        raise LaneboardError(
            "BAD_INPUT",
            f"--max-connections {n} is out of range",
            f"use 1 to {MAX_CONNECTIONS_LIMIT} (default {MAX_CONNECTIONS})",
        )
    return n


def open_files(max_connections: int) -> int:
    """Let this process open the files ``max_connections`` need (raising its soft limit
    toward the hard one); returns the soft limit now. Refuses, changing nothing, when
    the hard limit is lower than they need."""
    need = max_connections + BACKLOG + REFUSED_KEPT + HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft >= need:
        return soft
    if soft == resource.RLIM_INFINITY:
        return need
    if hard != resource.RLIM_INFINITY and hard < need:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"--max-connections {max_connections} needs {need} open files, and this process "
            f"may open at most {hard}",
            f"pass --max-connections {max(1, hard - need + max_connections)} or fewer, or "
            "raise the limit (ulimit -n; LimitNOFILE= in a systemd unit)",
        )
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (ValueError, OSError) as exc:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"cannot raise the open-file limit to {need} for --max-connections "
            f"{max_connections}: {exc}",
            "pass a lower --max-connections, or raise the limit (ulimit -n)",
        ) from None
    return need


class Refusals:
    """Says refused connections on standard error: the first at once, then at most one
    line each ``REFUSALS_SAID_S`` with their count since."""

    def __init__(
        self, now: Clock = time.monotonic, say: Callable[[str], None] | None = None
    ) -> None:
        self.now = now
        self.say = say or _to_stderr
        self.said: float | None = None
        self.since = 0

    def note(self, why: str, client: str | None) -> None:
        self.since += 1
        now = self.now()
        if self.said is not None and now - self.said < REFUSALS_SAID_S:
            return
        self.said, count, self.since = now, self.since, 0
        self.say(
            f"lb serve: refused {count} connection(s) (the last from {client or 'unknown'}): "
            f"{why} (--max-connections)"
        )


def _to_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _answer(status: str, err: LaneboardError) -> bytes:
    from laneboard.ops.endpoint import closing_answer  # the server's own import

    return closing_answer(status, err)


def share_of(max_connections: int) -> int:
    """Connections one address (other than a trusted one) is served at once."""
    return max(1, max_connections // SHARE_DIVISOR)


def busy_why(most: int, share: int | None) -> str:
    if share is not None:
        return f"the {share} connections one address is served at once are in use"
    return f"all the {most} connections it serves at once are in use"


def busy_answer(why: str) -> bytes:
    return _answer(
        "503 Service Unavailable",
        LaneboardError(
            "STORE_UNAVAILABLE",
            f"the board's server refused the connection: {why}",
            "let one of them end; lb calls again by itself for up to LANEBOARD_RETRY_S seconds",
            nothing_written=True,
        ),
    )


def slow_answer(request_s: float) -> bytes:
    return _answer(
        "408 Request Timeout",
        LaneboardError(
            "BAD_INPUT",
            f"the request did not arrive whole within {request_s:g} seconds",
            "send the request line, headers and body at once",
            nothing_written=True,
        ),
    )


def protocol(
    max_connections: int = MAX_CONNECTIONS,
    *,
    request_s: float = REQUEST_S,
    now: Clock = time.monotonic,
    check_s: float | None = None,
    refusals: Refusals | None = None,
    trusted: tuple[str, ...] | None = None,
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with this module's bounds (``uvicorn.Config(http=...)``).

    An address other than the ``trusted`` ones (``lb serve --trust``; default the
    server's own, ``server.auth.DEFAULT_TRUSTED``) is served
    ``share_of(max_connections)`` connections at once at most. ``now`` is the bounds'
    clock and ``check_s`` how often a waiting connection looks at it (default
    ``request_s``): a test moves the clock instead of waiting."""
    import h11  # the server's own imports: ``lb serve``'s parser is built without them
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from laneboard.server.auth import DEFAULT_TRUSTED

    exempt = DEFAULT_TRUSTED if trusted is None else trusted
    said = refusals or Refusals(now)
    kept: set[Any] = set()  # refused connections still read, so their answer is read whole
    every = request_s if check_s is None else check_s
    waiting = (h11.IDLE, h11.SEND_BODY)  # the client's side while its request is not whole
    share = share_of(max_connections)
    held: Counter[str] = Counter()  # connections open by address (trusted ones left out)

    class Bounded(H11Protocol):
        refused = False
        until: float | None = None  # when the request being waited for must be whole
        timer: Any = None
        address: str | None = None  # counted in ``held``

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            host = self.client[0] if self.client else None
            if host is not None and host not in exempt:
                self.address = host
                held[host] += 1
            if len(self.connections) > max_connections:
                self._refuse(transport, busy_why(max_connections, None), host)
            elif self.address is not None and held[self.address] > share:
                self._refuse(transport, busy_why(max_connections, share), host)
            else:
                self._wait()

        def _refuse(self, transport: Any, why: str, host: str | None) -> None:
            self.refused = True
            said.note(why, host)
            transport.write(busy_answer(why))
            if len(kept) >= REFUSED_KEPT or not transport.can_write_eof():
                transport.close()  # a flood: its file is given back at once
                return
            kept.add(self)
            transport.write_eof()  # its answer is whole
            self.timer = self.loop.call_later(REFUSED_CLOSE_S, transport.close)

        def data_received(self, data: bytes) -> None:
            if self.refused:  # read, so its close sends no reset that could lose the answer
                self.transport.close()
                return
            super().data_received(data)
            self._look()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state in waiting and self.until is None:
                self._wait()  # the next request on this connection has its own time
            self._look()

        def connection_lost(self, exc: Exception | None) -> None:
            kept.discard(self)
            if self.address is not None:
                held[self.address] -= 1
                if held[self.address] <= 0:
                    del held[self.address]
                self.address = None
            self._stop_timer()
            super().connection_lost(exc)

        def _wait(self) -> None:
            self.until = now() + request_s
            self._stop_timer()
            self.timer = self.loop.call_later(every, self._tick)

        def _tick(self) -> None:
            self.timer = None
            self._look()
            if self.until is not None and self.timer is None:
                self.timer = self.loop.call_later(every, self._tick)

        def _look(self) -> None:
            """End the wait once the request is whole; when its time is up before that,
            close the connection (answered 408 when a request had begun to arrive)."""
            if self.refused or self.until is None:
                return
            if self.conn.their_state not in waiting or self.transport.is_closing():
                self.until = None
                self._stop_timer()
                return
            if now() < self.until:
                return
            self.until = None
            self._stop_timer()
            if self.conn.their_state is h11.SEND_BODY or self.conn.trailing_data[0]:
                self.transport.write(slow_answer(request_s))  # a request had begun
            self.transport.close()

        def _stop_timer(self) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None

    return Bounded
