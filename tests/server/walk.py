"""One pass over every API route and every error code, for any httpx-like client."""

from __future__ import annotations

from typing import Any

BASE = "/api/v1"


JSON = {"Content-Type": "application/json"}  # every write carries it, bodies or not


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def expect(resp: Any, status: int, code: str | None = None) -> Any:
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    if code is not None:
        assert body["code"] == code, body
        assert body["message"]
    return body


def walk(c: Any) -> dict[str, Any]:
    """Exercises each operation in the OpenAPI document; returns the ids it made."""
    doc = c.get(BASE + "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert expect(c.get(BASE + "/me"), 200) == {"kind": "human", "name": "alice", "card_id": None}

    # projects
    p = expect(c.post(BASE + "/projects", json={"key": "WEB", "name": "Web"}), 201)
    assert p["key"] == "WEB"
    expect(c.post(BASE + "/projects", json={"key": "WEB"}), 409, "CONFLICT")
    expect(c.post(BASE + "/projects", json={"key": "no good"}), 422, "BAD_INPUT")
    assert [x["key"] for x in expect(c.get(BASE + "/projects"), 200)] == ["WEB"]
    assert expect(c.get(BASE + "/projects/WEB"), 200)["name"] == "Web"
    expect(c.get(BASE + "/projects/NOPE"), 404, "NOT_FOUND")

    # cards, idempotent create, malformed input
    first = c.post(
        BASE + "/cards",
        json={"project": "WEB", "title": "A"},
        headers={"Idempotency-Key": "create-a"},
    )
    a = expect(first, 201)
    again = c.post(
        BASE + "/cards",
        json={"project": "WEB", "title": "A"},
        headers={"Idempotency-Key": "create-a"},
    )
    assert expect(again, 201)["id"] == a["id"]
    b = expect(
        c.post(
            BASE + "/cards",
            json={
                "project": "WEB",
                "title": "B",
                "acceptance_mode": "human",
                "acceptance": ["it works"],
            },
        ),
        201,
    )
    dep = expect(
        c.post(BASE + "/cards", json={"project": "WEB", "title": "dep", "status": "backlog"}), 201
    )
    bad = c.post(
        BASE + "/cards", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    expect(bad, 422, "BAD_INPUT")
    expect(c.post(BASE + "/cards", json={"project": "WEB"}), 422, "BAD_INPUT")
    expect(
        c.post(BASE + "/cards", json={"project": "WEB", "title": "x", "priority": 9}),
        422,
        "BAD_INPUT",
    )
    expect(
        c.post(BASE + "/cards", json={"project": "WEB", "title": "x", "bogus": 1}), 422, "BAD_INPUT"
    )
    expect(c.post(BASE + "/cards", json={"project": "NOPE", "title": "x"}), 404, "NOT_FOUND")
    expect(c.get(BASE + "/cards/WEB-999"), 404, "NOT_FOUND")
    expect(c.get(BASE + "/cards/%E2%80%94"), 404, "NOT_FOUND")
    detail = expect(c.get(BASE + f"/cards/{a['ref']}"), 200)
    assert detail["comments"] == [] and detail["reports"] == []
    edited = expect(
        c.patch(BASE + f"/cards/{a['ref']}", json={"labels": ["ui"], "priority": 1}), 200
    )
    assert edited["labels"] == ["ui"] and edited["priority"] == 1
    expect(c.patch(BASE + f"/cards/{a['ref']}", json={}), 422, "BAD_INPUT")
    listed = expect(c.get(BASE + "/cards", params={"project": "WEB", "label": "ui"}), 200)
    assert [x["ref"] for x in listed] == [a["ref"]]
    expect(c.get(BASE + "/cards", params={"status": "nope"}), 422, "BAD_INPUT")
    expect(c.get(BASE + "/cards", params={"limit": "abc"}), 422, "BAD_INPUT")

    # links
    linked = expect(c.post(BASE + f"/cards/{a['ref']}/links", json={"depends_on": dep["ref"]}), 201)
    assert linked["depends_on"] == [dep["id"]]
    expect(
        c.post(BASE + f"/cards/{dep['ref']}/links", json={"depends_on": a["ref"]}),
        409,
        "DEPENDENCY_CYCLE",
    )
    expect(c.request("DELETE", BASE + f"/cards/{a['ref']}/links/{dep['ref']}", headers=JSON), 200)
    expect(
        c.request("DELETE", BASE + f"/cards/{a['ref']}/links/{dep['ref']}", headers=JSON),
        404,
        "NOT_FOUND",
    )
    expect(c.post(BASE + f"/cards/{a['ref']}/links", json={"depends_on": dep["ref"]}), 201)

    # moves: release backlog -> todo (idempotent), illegal move
    moved = c.post(
        BASE + f"/cards/{dep['ref']}/move",
        json={"to": "todo"},
        headers={"Idempotency-Key": "release-dep"},
    )
    assert expect(moved, 200)["status"] == "todo"
    repeat = c.post(
        BASE + f"/cards/{dep['ref']}/move",
        json={"to": "todo"},
        headers={"Idempotency-Key": "release-dep"},
    )
    assert expect(repeat, 200)["status"] == "todo"
    expect(
        c.post(BASE + f"/cards/{dep['ref']}/move", json={"to": "done"}), 409, "ILLEGAL_TRANSITION"
    )
    expect(c.post(BASE + f"/cards/{dep['ref']}/move", json={"to": "sideways"}), 422, "BAD_INPUT")

    # candidates: dep is ready, A waits on it
    cands = expect(c.get(BASE + "/candidates", params={"include_unassigned": "true"}), 200)
    refs = [x["ref"] for x in cands]
    assert dep["ref"] in refs and a["ref"] not in refs
    expect(c.get(BASE + "/candidates", params={"stale": "maybe"}), 422, "BAD_INPUT")

    # tokens: an agent scoped to card B, and one for nothing in particular
    ag = expect(c.post(BASE + "/tokens", json={"name": "worker-b", "card": b["ref"]}), 201)
    other = expect(c.post(BASE + "/tokens", json={"name": "worker-x"}), 201)
    human_tok = expect(c.post(BASE + "/tokens", json={"name": "bob", "kind": "human"}), 201)
    assert ag["token"].startswith("lbt_") and ag["card_id"] == b["id"]
    names = [t["name"] for t in expect(c.get(BASE + "/tokens"), 200)]
    assert names == ["worker-b", "worker-x", "bob"]
    assert all("token" not in t for t in c.get(BASE + "/tokens").json())

    # claims: the scoped agent claims B; another claimer loses
    claimed = expect(
        c.post(
            BASE + f"/cards/{b['ref']}/claim",
            json={},
            headers={**bearer(ag["token"]), "Idempotency-Key": "claim-b"},
        ),
        200,
    )
    assert claimed["status"] == "in_progress" and claimed["claim"]["holder"] == "worker-b"
    expect(
        c.post(BASE + f"/cards/{b['ref']}/claim", json={}, headers=bearer(other["token"])),
        409,
        "CLAIM_CONFLICT",
    )
    expect(c.post(BASE + f"/cards/{b['ref']}/heartbeat", json={}, headers=bearer(ag["token"])), 200)
    expect(
        c.post(BASE + f"/cards/{b['ref']}/heartbeat", json={}, headers=bearer(other["token"])),
        409,
        "STALE_CLAIM",
    )
    # the scoped agent may not write or read other cards
    expect(
        c.post(
            BASE + f"/cards/{a['ref']}/comments", json={"body": "hi"}, headers=bearer(ag["token"])
        ),
        403,
        "FORBIDDEN",
    )
    expect(c.get(BASE + f"/cards/{a['ref']}", headers=bearer(ag["token"])), 403, "FORBIDDEN")
    seen = expect(c.get(BASE + "/cards", headers=bearer(ag["token"])), 200)
    assert [x["ref"] for x in seen] == [b["ref"]]
    expect(
        c.post(
            BASE + "/cards", json={"project": "WEB", "title": "mine"}, headers=bearer(ag["token"])
        ),
        403,
        "FORBIDDEN",
    )
    expect(c.get(BASE + "/tokens", headers=bearer(ag["token"])), 403, "FORBIDDEN")
    expect(c.get(BASE + "/status", headers=bearer(ag["token"])), 403, "FORBIDDEN")

    # report, deliver, and the human acceptance gate
    expect(
        c.post(
            BASE + f"/cards/{b['ref']}/move", json={"to": "in_review"}, headers=bearer(ag["token"])
        ),
        409,
        "REPORT_REQUIRED",
    )
    rep = expect(
        c.post(
            BASE + f"/cards/{b['ref']}/reports",
            json={"body": "done", "evidence": [{"command": "pytest", "exit_code": 0}]},
            headers=bearer(ag["token"]),
        ),
        201,
    )
    assert rep["round"] == 1 and rep["evidence"][0]["command"] == "pytest"
    expect(
        c.post(
            BASE + f"/cards/{b['ref']}/reports",
            json={"body": "x", "verdict": "MAYBE"},
            headers=bearer(ag["token"]),
        ),
        422,
        "BAD_INPUT",
    )
    assert len(expect(c.get(BASE + f"/cards/{b['ref']}/reports"), 200)) == 1
    expect(
        c.post(
            BASE + f"/cards/{b['ref']}/move", json={"to": "in_review"}, headers=bearer(ag["token"])
        ),
        200,
    )
    expect(
        c.post(BASE + f"/cards/{b['ref']}/move", json={"to": "done"}, headers=bearer(ag["token"])),
        409,
        "ACCEPTANCE_FORBIDDEN",
    )
    closed = expect(
        c.post(
            BASE + f"/cards/{b['ref']}/move",
            json={"to": "done"},
            headers=bearer(human_tok["token"]),
        ),
        200,
    )
    assert closed["status"] == "done"

    # questions: awaiting, an agent comment does not release, a human one does
    expect(c.post(BASE + f"/cards/{dep['ref']}/claim", json={}), 200)
    waiting = expect(
        c.post(
            BASE + f"/cards/{dep['ref']}/move",
            json={"to": "awaiting", "reason": "E2", "question": "which db?"},
        ),
        200,
    )
    assert waiting["status"] == "awaiting"
    expect(
        c.post(
            BASE + f"/cards/{dep['ref']}/move",
            json={"to": "awaiting", "reason": "E2", "question": "again?"},
        ),
        409,
        "ILLEGAL_TRANSITION",
    )
    expect(
        c.post(BASE + f"/cards/{dep['ref']}/comments", json={"body": "sqlite", "kind": "answer"}),
        201,
    )
    assert expect(c.get(BASE + f"/cards/{dep['ref']}"), 200)["status"] == "todo"
    comments = expect(c.get(BASE + f"/cards/{dep['ref']}/comments"), 200)
    assert [x["kind"] for x in comments] == ["question", "answer"]
    after = expect(
        c.get(BASE + f"/cards/{dep['ref']}/comments", params={"after": comments[0]["id"]}), 200
    )
    assert [x["kind"] for x in after] == ["answer"]
    expect(c.post(BASE + f"/cards/{dep['ref']}/comments", json={"body": ""}), 422, "BAD_INPUT")

    # claim + release; STALE_CLAIM for a fenced (old-epoch) agent write
    expect(c.post(BASE + f"/cards/{dep['ref']}/claim", json={"holder": "w1"}), 200)
    released = expect(c.post(BASE + f"/cards/{dep['ref']}/release", json={"note": "later"}), 200)
    assert released["status"] == "todo"

    # events
    events = expect(c.get(BASE + "/events", params={"limit": 1000}), 200)
    types = {e["type"] for e in events}
    assert {"card.created", "card.claimed", "card.moved", "comment.added"} <= types
    only = expect(c.get(BASE + "/events", params={"card": b["ref"], "limit": 1000}), 200)
    assert {e["card_id"] for e in only} == {b["id"]}
    expect(c.get(BASE + "/events", params={"card": "WEB-404"}), 404, "NOT_FOUND")
    mine = expect(c.get(BASE + "/events", params={"limit": 1000}, headers=bearer(ag["token"])), 200)
    assert mine and {e["card_id"] for e in mine} == {b["id"]}

    # status / doctor / unknown routes / auth failures
    status = expect(c.get(BASE + "/status"), 200)
    assert "supervisor" in status and "state" in status["supervisor"]
    doctor = expect(c.get(BASE + "/doctor"), 200)
    assert isinstance(doctor["attention"], bool) and "supervisor" in doctor
    expect(c.get(BASE + "/nothing-here"), 404, "NOT_FOUND")
    not_allowed = c.put(BASE + "/cards")
    assert not_allowed.status_code == 405, not_allowed.text
    expect(c.get(BASE + "/cards", headers=bearer("lbt_nope")), 401, "UNAUTHORIZED")
    revoked = expect(c.request("DELETE", BASE + f"/tokens/{other['id']}", headers=JSON), 200)
    assert revoked["revoked_at"] is not None
    expect(c.request("DELETE", BASE + f"/tokens/{other['id']}", headers=JSON), 404, "NOT_FOUND")
    expect(c.get(BASE + "/me", headers=bearer(other["token"])), 401, "UNAUTHORIZED")
    return {"a": a, "b": b, "dep": dep, "agent": ag, "human": human_tok}
