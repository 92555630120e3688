"""A real ``lb serve`` subprocess: the same route walk over the network, the address
rule with a second loopback source address, SSE resume and a claim by another process."""

from __future__ import annotations

import json
import threading
import time

import httpx
from tests.server.conftest import Live
from tests.server.walk import BASE, bearer, expect, walk

from laneboard.domain.model import human


def test_every_route_against_lb_serve(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as c:
        made = walk(c)
    # the CLI sees what the server wrote
    got = live.lb("card", "get", made["b"]["ref"], "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["status"] == "done"


def test_untrusted_source_address_needs_a_token(live: Live) -> None:
    """The server binds 127.0.0.1 and trusts only 127.0.0.1 and ::1 as the local human.
    A client whose source address is 127.0.0.2 (another loopback address, so no traffic
    leaves the machine) counts as remote: without a token it is refused."""
    remote = httpx.Client(
        base_url=live.url, timeout=10, transport=httpx.HTTPTransport(local_address="127.0.0.2")
    )
    with remote:
        expect(remote.get(BASE + "/cards"), 401, "UNAUTHORIZED")
        expect(remote.post(BASE + "/projects", json={"key": "X"}), 401, "UNAUTHORIZED")
        assert remote.get("/").status_code == 401
        assert remote.get("/healthz").status_code == 200
        made = live.lb("token", "create", "--name", "bob", "--kind", "human", "--json")
        assert made.returncode == 0, made.stderr
        token = json.loads(made.stdout)["token"]
        me = expect(remote.get(BASE + "/me", headers=bearer(token)), 200)
        assert me == {"kind": "human", "name": "bob", "card_id": None}
        expect(remote.post(BASE + "/projects", json={"key": "X"}, headers=bearer(token)), 201)


def test_sse_resumes_over_the_network(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as c:
        expect(c.post(BASE + "/projects", json={"key": "WEB"}), 201)
        for t in ("a", "b", "c"):
            expect(c.post(BASE + "/cards", json={"project": "WEB", "title": t}), 201)

        def ids(headers: dict[str, str], params: dict[str, str]) -> list[int]:
            out = []
            h = {"Accept": "text/event-stream", **headers}
            with c.stream("GET", BASE + "/events", headers=h, params=params) as resp:
                for line in resp.iter_lines():
                    if line.startswith("id: "):
                        out.append(int(line[4:]))
            return out

        first = ids({}, {"after": "0", "max_events": "2"})
        assert first == [1, 2]
        rest = ids({"Last-Event-ID": "2"}, {"max_events": "2"})
        assert rest == [3, 4]


def test_claim_by_another_process_shows_in_the_api(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as c:
        expect(c.post(BASE + "/projects", json={"key": "WEB"}), 201)
        card = expect(c.post(BASE + "/cards", json={"project": "WEB", "title": "t"}), 201)
        worker = live.lb("card", "claim", card["ref"], "--holder", "worker-1")
        assert worker.returncode == 0, worker.stderr
        got = expect(c.get(BASE + f"/cards/{card['ref']}"), 200)
        assert got["status"] == "in_progress" and got["claim"]["holder"] == "worker-1"
        lost = live.lb("card", "claim", card["ref"], "--holder", "worker-2")
        assert lost.returncode == 1 and "CLAIM_CONFLICT" in lost.stderr


def test_a_transcript_streams_over_sse_and_resumes(live: Live) -> None:
    from laneboard.domain.transcript import entry
    from laneboard.store import open_store

    with httpx.Client(base_url=live.url, timeout=20) as c:
        expect(c.post(BASE + "/projects", json={"key": "WEB"}), 201)
        card = expect(c.post(BASE + "/cards", json={"project": "WEB", "title": "t"}), 201)
        store = open_store(live.db)
        try:
            with store.write() as tx:
                turn = tx.start_turn(None, card["id"], 1, None, "scripted", "s", "go")
                tx.append_transcript(turn, card["id"], [(1, tx.now(), entry("message", "one"))])

            def later() -> None:  # written while the stream is open: it arrives live
                time.sleep(0.5)
                with store.write() as tx:
                    tx.append_transcript(turn, card["id"], [(2, tx.now(), entry("lb", "lb x"))])
                    tx.append_event("turn.output", human("t"), card_id=card["id"],
                                    payload={"turn": turn, "entries": 1})  # fmt: skip

            def read(headers: dict[str, str], params: dict[str, str]) -> list[tuple[str, str]]:
                out: list[tuple[str, str]] = []
                h = {"Accept": "text/event-stream", **headers}
                url = BASE + f"/cards/{card['ref']}/transcript"
                with c.stream("GET", url, headers=h, params=params) as resp:
                    assert resp.status_code == 200
                    for line in resp.iter_lines():
                        if line.startswith("id: "):
                            key = line[4:]
                        if line.startswith("data: "):
                            out.append((key, json.loads(line[6:])["text"]))
                return out

            writer = threading.Thread(target=later)
            writer.start()
            got = read({}, {"max_events": "2"})
            writer.join()
            assert [t for _, t in got] == ["one", "lb x"]
            again = read({"Last-Event-ID": got[0][0]}, {"max_events": "1"})
            assert again == [got[1]]
        finally:
            store.close()
        agent_view = c.get(BASE + f"/cards/{card['ref']}/transcript")  # JSON without the header
        assert [e["text"] for e in agent_view.json()["entries"]] == ["one", "lb x"]


def test_sigterm_ends_open_streams_and_the_server(live: Live) -> None:
    """A dashboard left open (its live streams) does not keep ``lb serve`` from stopping:
    on SIGTERM each stream ends cleanly and the process exits, the clients still there."""
    import signal
    import subprocess

    with httpx.Client(base_url=live.url, timeout=None) as c:
        expect(c.post(BASE + "/projects", json={"key": "WEB"}), 201)
        card = expect(c.post(BASE + "/cards", json={"project": "WEB", "title": "t"}), 201)
        sse = {"Accept": "text/event-stream"}
        urls = [BASE + "/events", BASE + f"/cards/{card['ref']}/transcript"]
        opened = [threading.Event() for _ in urls]
        ended: list[str] = []

        def follow(url: str, ready: threading.Event) -> None:
            with c.stream("GET", url, headers=sse) as resp:  # no timeout: it waits as a page does
                assert resp.status_code == 200
                for line in resp.iter_lines():
                    if line.startswith("retry:"):
                        ready.set()
            ended.append(url)  # the server ended the response: end of stream, no error

        readers = [
            threading.Thread(target=follow, args=(u, r), daemon=True)
            for u, r in zip(urls, opened, strict=True)
        ]
        for t in readers:
            t.start()
        for r in opened:
            assert r.wait(60), "a stream did not open"
        live.proc.send_signal(signal.SIGTERM)
        try:  # bounded only so that a hang fails here instead of stalling the run
            code = live.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("lb serve kept running while its streams were open") from None
        for t in readers:
            t.join(60)
        assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once stopped
        assert sorted(ended) == sorted(urls)
