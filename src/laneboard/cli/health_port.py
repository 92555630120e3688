"""``lb start --health-port N``: ``GET /healthz`` on 127.0.0.1 for units that probe it.

The same document and status codes as ``/healthz`` of ``lb serve``
(``server.status.health``), read from the store at each request.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from laneboard.store import Store


def serve(store: Store, port: int) -> ThreadingHTTPServer:
    """Serve ``/healthz`` on 127.0.0.1:``port`` (0: any free port) in a daemon thread."""
    from laneboard.server.status import health

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/healthz":
                self._send(404, {"code": "NOT_FOUND", "message": "only /healthz is served"})
                return
            code, body = health(store)
            self._send(code, body)

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, sort_keys=True).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # the supervisor's log has what matters

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="health-port").start()
    return server
