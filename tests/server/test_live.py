"""A real ``lb serve`` subprocess: the same route walk over the network, the address
rule with a second loopback source address, SSE resume and a claim by another process."""

from __future__ import annotations

import json

import httpx
from tests.server.conftest import Live
from tests.server.walk import BASE, bearer, expect, walk


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
