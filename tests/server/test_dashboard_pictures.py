"""Pictures: a run's progress replayed from the event log, the dependency graph as SVG with
status colours (Graphviz or the layered fallback), and usage and cost per card, agent kind
and day, with the right figures."""

from __future__ import annotations

import html
import re
import shutil

import pytest
from starlette.testclient import TestClient

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.server import charts, graph
from laneboard.store import Store
from laneboard.supervisor import records

ME = human("alice")


def test_layers_follow_the_longest_path() -> None:
    # 1 <- 2 <- 4, 1 <- 3, 3 <- 4: 4 waits on both, so it sits below the deeper one
    edges = [(2, 1), (3, 1), (4, 2), (4, 3), (5, 4)]
    assert graph.layers([1, 2, 3, 4, 5], edges) == {1: 0, 2: 1, 3: 1, 4: 2, 5: 3}
    cyclic = graph.layers([1, 2], [(1, 2), (2, 1)])  # the board refuses cycles; still drawn
    assert set(cyclic) == {1, 2} and cyclic[1] != cyclic[2]


def test_fallback_graph_draws_every_card_and_edge_in_its_colour() -> None:
    nodes = [graph.Node(1, "WEB-1", "schema", "done"), graph.Node(2, "WEB-2", "api", "in_progress"),
             graph.Node(3, "WEB-3", "ui <b>", "todo")]  # fmt: skip
    out = str(graph.svg(nodes, [(2, 1), (3, 2), (3, 9)], engine="layered"))
    assert out.count('class="edge"') == 2  # the edge to a card outside the picture is left out
    for ref, status in (("WEB-1", "done"), ("WEB-2", "in_progress"), ("WEB-3", "todo")):
        node = re.search(rf'id="node-{ref}" data-status="{status}">.*?fill="([^"]+)"', out)
        assert node and node.group(1) == charts.STATUS_COLOURS[status]
    assert "ui &lt;b&gt;" in out and "<b>" not in out
    ys = {ref: float(re.search(rf'id="node-{ref}".*?<rect x="[^"]+" y="([^"]+)"', out).group(1))  # type: ignore[union-attr]
          for ref in ("WEB-1", "WEB-2", "WEB-3")}  # fmt: skip
    assert ys["WEB-1"] < ys["WEB-2"] < ys["WEB-3"]  # dependencies above what waits on them


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_graphviz_draws_it_when_installed() -> None:
    nodes = [graph.Node(1, "WEB-1", "a", "done"), graph.Node(2, "WEB-2", "b", "todo")]
    out = str(graph.svg(nodes, [(2, 1)]))
    assert "<svg" in out and "WEB-2" in out and charts.STATUS_COLOURS["done"] in out.lower()


def figures(svg: str) -> dict[str, float]:
    return {
        m[0]: float(m[1]) for m in re.findall(r'data-label="([^"]+)" data-value="([^"]+)"', svg)
    }


def test_pictures_of_a_run(client: TestClient, store: Store) -> None:
    clock = store.clock
    assert isinstance(clock, FakeClock)
    board = Board(store)
    board.add_project(ME, "WEB")
    run = board.create_run(ME, "WEB", "ship the login page")
    run_id = run["id"]
    a = board.create_card(ME, "WEB", "schema", run_id=run_id)
    b = board.create_card(ME, "WEB", "api", run_id=run_id, depends_on=[a.ref])
    board.create_card(ME, "WEB", "not in the run")
    clock.advance(minutes=10)
    w = board.claim(agent("w1"), a.ref)
    clock.advance(minutes=10)
    worker = agent("w1", a.id, w.claim_epoch)
    board.report(worker, a.ref, "done")
    board.move(worker, a.ref, "in_review")
    with store.write() as tx:
        for card, kind, tokens, cost in ((a, "claude", 1000, 0.25), (a, "codex", 500, 0.5),
                                         (b, "claude", 200, 0.125)):  # fmt: skip
            t = records.start_turn(tx, None, card.id, 1, None, kind, None, "p")
            usage = {"input_tokens": tokens, "output_tokens": 0, "cost_usd": cost}
            records.finish_turn(tx, t, "ok", final_text="", error=None, exit_code=0, usage=usage)

    page = client.get(f"/pictures?run={run_id}").text
    assert "2 cards · 3 agent turns · 1700 tokens · $0.88" in page
    kinds = figures(page.split('id="usage-kind"')[1].split("</svg>")[0])
    assert kinds == {"claude": 0.375, "codex": 0.5}
    per_card = figures(page.split('id="usage-card"')[1].split("</svg>")[0])
    assert per_card == {"WEB-1": 0.75, "WEB-2": 0.125}
    assert 'data-kind="claude"' in page.split('id="usage-day"')[1]

    chart = page.split('id="progress"')[1].split("</svg>")[0]
    drawn = set(re.findall(r'data-status="([a-z_]+)"', chart))
    assert drawn == {"todo", "in_progress", "in_review"}  # each status the cards passed through
    assert "in_review 1" in chart and "todo 1" in chart  # the legend: the board as it stands
    g = html.unescape(page.split('id="graph"')[1])  # dot writes "-" as &#45;
    assert 'id="node-WEB-1"' in g and 'id="node-WEB-2"' in g and "WEB-3" not in g

    epic = board.create_card(ME, "WEB", "the epic", kind="epic")
    board.create_card(ME, "WEB", "child", parent=epic.ref)
    page = client.get(f"/pictures?parent={epic.ref}").text
    assert f"epic {epic.ref}: the epic" in page and "1 card · 0 agent turns" in page
    assert "nothing recorded" in page  # no turns: no bars, and it says so

    whole = client.get("/pictures").text  # the board: what each run cost, beside the rest
    assert figures(whole.split('id="usage-run"')[1].split("</svg>")[0]) == {f"run {run_id}": 0.875}
    assert 'id="usage-run"' not in page  # one scope, one run: no comparison to draw

    bad = client.get("/pictures?run=x")
    assert bad.status_code == 422 and bad.json()["code"] == "BAD_INPUT"
