"""What the dashboard's pages say, in-process on both backends: the card page's facts
read as a sentence, and the supervisor panel names cards by reference, never an id or
``None``."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.store import Store
from laneboard.supervisor import records


def _facts(html: str) -> str:
    m = re.search(r'<p class="facts">(.*?)</p>', html, re.DOTALL)
    assert m is not None, html
    return " ".join(re.sub(r"<[^>]+>", "", m.group(1)).split())


def test_the_card_page_names_assignee_and_holder_once_each(
    client: TestClient, store: Store
) -> None:
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    board.create_card(me, "WEB", "own", assignee="worker")
    board.claim(agent("worker"), "WEB-1")
    facts = _facts(client.get("/cards/WEB-1").text)
    assert "·" not in facts.replace(" · ", "")  # every separator has a space each side
    assert "held by worker (epoch 1" in facts
    assert facts.count("worker") == 1  # the assignee holding its own card is said once
    board.create_card(me, "WEB", "taken over", assignee="worker")
    board.claim(me, "WEB-2", holder="bob")
    facts = _facts(client.get("/cards/WEB-2").text)
    assert "assigned to worker · held by bob (epoch 1" in facts


def test_the_sessions_table_shows_card_references(client: TestClient, store: Store) -> None:
    """Live sessions (a process each) are listed with their card's reference."""
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    card = board.create_card(me, "WEB", "worked on")
    with store.write() as tx:
        records.save_session(
            tx, "scripted", "worker:WEB-1", card_id=card.id, role="worker", cwd="/tmp",
            native_id=None, round_=1, state="open", pid=4242,
        )  # fmt: skip
        records.save_session(
            tx, "scripted", "director:x", card_id=None, role="director", cwd="/tmp",
            native_id=None, round_=1, state="idle", pid=4243,
        )  # fmt: skip
    html = client.get("/").text
    table = html[html.index("<th>session</th>") : html.index("</table>")]
    assert '<a href="/cards/WEB-1">WEB-1</a>' in table
    assert "None" not in table
    assert f"<td>{card.id}</td>" not in table


def test_the_supervisor_panel_shows_each_machine_and_the_cluster_passes(
    client: TestClient, store: Store
) -> None:
    from laneboard.domain.timecontract import TimeContract
    from laneboard.supervisor import instances

    with store.write() as tx:
        for machine in ("host-a", "host-b"):
            instances.register(tx, machine, TimeContract(), {"pid": 1})
        runs = tx.start_pass_runs(["workflow", "patrol"], "host-a:1:1", "host-a")
        tx.finish_pass_runs([runs["patrol"]])
        assert tx.acquire_lock("pass:workflow", "host-a:1:1", 60_000)
    html = client.get("/").text
    panel = html[html.index('id="cluster"') :]
    panel = panel[: panel.index("</div>")]
    assert "<td>host-a</td>" in panel and "<td>host-b</td>" in panel
    assert "<td>workflow</td><td>running on host-a:1:1</td>" in panel
    assert re.search(r"<td>patrol</td><td>last on host-a at [^<]+</td>", panel)
