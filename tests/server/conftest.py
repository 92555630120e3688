"""Server fixtures: an in-process client and a real ``lb serve`` subprocess."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from tests.serve_kit import served_url

from laneboard.server.app import create_app
from laneboard.store import Store, open_store

# How long a page in Chromium may take to show something. A bound, not a delay: each
# wait ends as soon as the page shows it. On a loaded two-core machine a server round
# trip and a redraw have taken longer than 15 s.
WAIT_MS = 60_000


@pytest.fixture(autouse=True, scope="session")
def patient_pages() -> None:
    """Playwright's assertions wait as long as its actions (its own default is 5 s)."""
    if "playwright" in sys.modules:  # only the modules that drive a browser import it
        from playwright.sync_api import expect

        expect.set_options(timeout=WAIT_MS)


LOCAL = "http://127.0.0.1"


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    """The app in-process; requests come from 127.0.0.1 (the local human, alice)."""
    app = create_app(store, local_user="alice", sse_poll_s=0.05)
    with TestClient(app, base_url=LOCAL, client=("127.0.0.1", 50000)) as c:
        yield c


@dataclass
class Live:
    url: str
    port: int
    db: str
    proc: subprocess.Popen[bytes]
    env: dict[str, str]

    def lb(self, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if token:
            env["LANEBOARD_TOKEN"] = token
        return subprocess.run(
            [sys.executable, "-m", "laneboard.cli.main", "--db", self.db, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )


def start_server(db: str, tmp: Path, *extra: str, nofile: tuple[int, int] | None = None) -> Live:
    """``lb serve`` on ``db`` (``nofile``: the open-file limits it starts with)."""

    def limited() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    env = {**os.environ, "LANEBOARD_USER": "alice", "XDG_STATE_HOME": str(tmp / "state")}
    env.pop("LANEBOARD_TOKEN", None)
    env.pop("LANEBOARD_TOKEN_FILE", None)
    cmd = [sys.executable, "-m", "laneboard.cli.main", "--db", db, "serve", "--port", "0"]
    path = tmp / f"serve-{uuid.uuid4().hex[:8]}.log"
    with open(path, "wb") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            [*cmd, *extra],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=limited if nofile is not None else None,
        )
    # A wait, not a delay: it ends when the server answers. Its bound is generous since
    # on a loaded two-core machine the start alone (imports, migrations) has taken 30 s.
    deadline = time.monotonic() + 120
    while True:
        url = served_url(path)
        try:
            if url and httpx.get(url + "/healthz", timeout=5).status_code in (200, 503):
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()  # reaped: no "still running" warning in a later test
            raise RuntimeError(f"lb serve did not answer ({proc.returncode}):\n{path.read_text()}")
        time.sleep(0.05)
    port = int(url.rsplit(":", 1)[1])
    return Live(url, port, db, proc, env)


def stop_server(live: Live) -> None:
    live.proc.terminate()
    try:
        live.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        live.proc.kill()
        live.proc.wait()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """A real ``lb serve`` on a free port of 127.0.0.1 over a fresh SQLite board."""
    db = f"sqlite:///{tmp_path / 'board.db'}"
    open_store(db).close()
    srv = start_server(db, tmp_path)
    try:
        yield srv
    finally:
        stop_server(srv)


def bearer(token: str) -> dict[str, Any]:
    return {"Authorization": f"Bearer {token}"}
