"""A dependency graph as SVG with status colours: laid out by Graphviz ``dot`` where it is
installed, else by a small layered layout of our own (longest path from the roots, then
a few barycentre sweeps to untangle each layer)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from laneboard.server.charts import STATUS_COLOURS

NODE_W, NODE_H, GAP_X, GAP_Y = 170, 44, 40, 60
DOT_TIMEOUT_S = 10


@dataclass(frozen=True)
class Node:
    id: int
    ref: str
    title: str
    status: str


def svg(nodes: Sequence[Node], edges: Sequence[tuple[int, int]], engine: str = "auto") -> Markup:
    """``edges`` are (card, dependency): the card waits on the dependency (drawn dependency
    above, an arrow down to the card that waits). ``engine``: auto, dot or layered."""
    if not nodes:
        return Markup('<p class="empty">no cards</p>')
    ids = {n.id for n in nodes}
    edges = [(a, b) for a, b in edges if a in ids and b in ids and a != b]
    if engine != "layered" and shutil.which("dot"):
        drawn = _dot(nodes, edges)
        if drawn is not None:
            return drawn
    return _layered(nodes, edges)


def _dot(nodes: Sequence[Node], edges: Sequence[tuple[int, int]]) -> Markup | None:
    lines = ["digraph deps {", 'graph [rankdir=TB, bgcolor="transparent"];',
             'node [shape=box, style="rounded,filled", fontname="sans-serif", fontsize=10];']  # fmt: skip
    for n in nodes:
        label = f"{n.ref} · {n.status}\\n{n.title[:28]}".replace('"', "'")
        colour = STATUS_COLOURS.get(n.status, "#ffffff")
        lines.append(
            f'n{n.id} [label="{label}", fillcolor="{colour}", id="node-{n.ref}", '
            f'URL="/cards/{n.ref}", tooltip="{n.ref} {n.status}", class="status-{n.status}"];'
        )
    lines.extend(f"n{dep} -> n{card};" for card, dep in edges)
    lines.append("}")
    try:
        done = subprocess.run(
            ["dot", "-Tsvg"],
            input="\n".join(lines),
            capture_output=True,
            text=True,
            timeout=DOT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or "<svg" not in done.stdout:
        return None
    return Markup(done.stdout[done.stdout.index("<svg") :])


def layers(ids: Sequence[int], edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Each node's layer: 0 for a card with no dependency, else one past its deepest one
    (a cycle, which the board refuses, is broken where it is met)."""
    deps: dict[int, list[int]] = {i: [] for i in ids}
    for card, dep in edges:
        deps[card].append(dep)
    layer: dict[int, int] = {}
    visiting: set[int] = set()

    def depth(i: int) -> int:
        if i in layer:
            return layer[i]
        if i in visiting:
            return 0
        visiting.add(i)
        layer[i] = 1 + max((depth(d) for d in deps[i]), default=-1)
        visiting.discard(i)
        return layer[i]

    for i in ids:
        depth(i)
    return layer


def _order(layer: dict[int, int], edges: Sequence[tuple[int, int]]) -> list[list[int]]:
    rows: list[list[int]] = [[] for _ in range(max(layer.values()) + 1)]
    for i in sorted(layer):
        rows[layer[i]].append(i)
    up: dict[int, list[int]] = {i: [] for i in layer}
    down: dict[int, list[int]] = {i: [] for i in layer}
    for card, dep in edges:
        up[card].append(dep)
        down[dep].append(card)
    for sweep in range(4):
        downward = sweep % 2 == 0
        for r in range(1, len(rows)) if downward else range(len(rows) - 2, -1, -1):
            ref_row = rows[r - 1] if downward else rows[r + 1]
            rows[r] = _by_centre(rows[r], ref_row, up if downward else down)
    return rows


def _by_centre(row: list[int], ref_row: list[int], near: dict[int, list[int]]) -> list[int]:
    """The layer ordered by the mean position of each node's neighbours in ``ref_row``
    (a node with none keeps its place)."""
    pos = {n: k for k, n in enumerate(ref_row)}
    here = {n: k for k, n in enumerate(row)}

    def centre(n: int) -> float:
        got = [pos[m] for m in near[n] if m in pos]
        return sum(got) / len(got) if got else float(here[n])

    return sorted(row, key=centre)


def _layered(nodes: Sequence[Node], edges: Sequence[tuple[int, int]]) -> Markup:
    by_id = {n.id: n for n in nodes}
    rows = _order(layers(list(by_id), edges), edges)
    widest = max(len(r) for r in rows)
    width = widest * (NODE_W + GAP_X) + GAP_X
    height = len(rows) * (NODE_H + GAP_Y) + GAP_Y // 2
    at: dict[int, tuple[float, float]] = {}
    for r, row in enumerate(rows):
        offset = (width - len(row) * (NODE_W + GAP_X) + GAP_X) / 2
        for k, i in enumerate(row):
            at[i] = (offset + k * (NODE_W + GAP_X), GAP_Y / 2 + r * (NODE_H + GAP_Y))
    out = [
        f'<svg class="graph" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="dependency graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#5e6c84"/></marker></defs>',
    ]
    for card, dep in edges:
        (x1, y1), (x2, y2) = at[dep], at[card]
        out.append(
            f'<path class="edge" d="M{x1 + NODE_W / 2:.0f},{y1 + NODE_H:.0f} '
            f"C{x1 + NODE_W / 2:.0f},{y1 + NODE_H + GAP_Y / 2:.0f} "
            f'{x2 + NODE_W / 2:.0f},{y2 - GAP_Y / 2:.0f} {x2 + NODE_W / 2:.0f},{y2:.0f}" '
            'fill="none" stroke="#5e6c84" marker-end="url(#arrow)"/>'
        )
    for i, (x, y) in at.items():
        n = by_id[i]
        colour = STATUS_COLOURS.get(n.status, "#ffffff")
        out.append(
            f'<a href="/cards/{escape(n.ref)}"><g class="node status-{escape(n.status)}" '
            f'id="node-{escape(n.ref)}" data-status="{escape(n.status)}">'
            f"<title>{escape(n.ref)} {escape(n.status)}: {escape(n.title)}</title>"
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="6" '
            f'fill="{colour}" stroke="#42526e"/>'
            f'<text x="{x + 8:.0f}" y="{y + 17:.0f}" class="ref">{escape(n.ref)} · {escape(n.status)}</text>'
            f'<text x="{x + 8:.0f}" y="{y + 34:.0f}" class="title">{escape(n.title[:26])}</text>'
            "</g></a>"
        )
    out.append("</svg>")
    return Markup("".join(out))
