"""Charts drawn as SVG on the server: a stacked step chart (cards by status over time) and
horizontal bars (usage and cost). Plain markup, no script, readable without colours
(every figure is also written out)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

from laneboard.domain.clock import iso

STATUS_COLOURS = {
    "backlog": "#a5adba",
    "todo": "#4c9aff",
    "in_progress": "#ffab00",
    "awaiting": "#ff5630",
    "blocked": "#bf2600",
    "in_review": "#6554c0",
    "done": "#36b37e",
    "canceled": "#dfe1e6",
}
PALETTE = ("#0052cc", "#ff8b00", "#00875a", "#6554c0", "#de350b", "#00a3bf", "#5e6c84")


def _tag(name: str, **attrs: Any) -> str:
    parts = " ".join(
        f'{k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items()
    )
    return f"<{name} {parts}/>"


def _text(x: float, y: float, body: str, **attrs: Any) -> str:
    extra = " ".join(
        f'{k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items()
    )
    return f'<text x="{x:.1f}" y="{y:.1f}" {extra}>{escape(body)}</text>'


def progress(series: Sequence[tuple[int, dict[str, int]]], width: int = 720) -> Markup:
    """Cards by status over time: ``series`` is (epoch ms, counts by status) at each change."""
    if not series:
        return Markup('<p class="empty">no cards yet</p>')
    height, left, top, bottom = 220, 40, 10, 30
    plot_w, plot_h = width - left - 140, height - top - bottom
    t0, t1 = series[0][0], max(series[-1][0], series[0][0] + 1)
    most = max(1, max(sum(c.values()) for _, c in series))

    def x(t: int) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    def y(n: float) -> float:
        return top + plot_h - n / most * plot_h

    out = [f'<svg class="chart progress" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="cards by status over time">']  # fmt: skip
    for status, colour in STATUS_COLOURS.items():
        below = [sum(c.get(s, 0) for s in _before(status)) for _, c in series]
        upto = [b + c.get(status, 0) for b, (_, c) in zip(below, series, strict=True)]
        if not any(u - b for u, b in zip(upto, below, strict=True)):
            continue
        pts = _steps([(x(t), y(u)) for (t, _), u in zip(series, upto, strict=True)], x(t1))
        back = _steps([(x(t), y(b)) for (t, _), b in zip(series, below, strict=True)], x(t1))
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts + back[::-1])
        out.append(_tag("polygon", points=path, fill=colour, data_status=status))
    last = series[-1][1]
    legend_y = top + 12
    for status, colour in STATUS_COLOURS.items():
        if last.get(status):
            out.append(
                _tag("rect", x=width - 130, y=legend_y - 9, width=10, height=10, fill=colour)
            )
            out.append(_text(width - 115, legend_y, f"{status} {last[status]}", class_="legend"))
            legend_y += 15
    out.append(_text(left, height - 8, iso(t0) or "", class_="axis"))
    out.append(_text(left + plot_w, height - 8, iso(t1) or "", class_="axis", text_anchor="end"))
    out.append(_text(left - 6, top + 10, str(most), class_="axis", text_anchor="end"))
    out.append("</svg>")
    return Markup("".join(out))


def _before(status: str) -> list[str]:
    names = list(STATUS_COLOURS)
    return names[: names.index(status)]


def _steps(points: list[tuple[float, float]], end: float) -> list[tuple[float, float]]:
    """A step line through the points (a count holds until the next change), to ``end``."""
    out: list[tuple[float, float]] = []
    for i, (px, py) in enumerate(points):
        if i:
            out.append((px, out[-1][1]))
        out.append((px, py))
    out.append((end, out[-1][1]))
    return out


def bars(rows: Sequence[tuple[str, float, str]], unit: str, width: int = 520) -> Markup:
    """Horizontal bars: (label, value, colour) each, the value written beside its bar."""
    if not rows:
        return Markup('<p class="empty">nothing recorded</p>')
    row_h, label_w = 20, 150
    height = row_h * len(rows) + 6
    most = max(v for _, v, _ in rows) or 1.0
    out = [f'<svg class="chart bars" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{escape(unit)}">']  # fmt: skip
    for i, (label, value, colour) in enumerate(rows):
        top = i * row_h + 3
        w = (width - label_w - 90) * value / most
        out.append(_text(label_w - 6, top + 13, label[:24], class_="label", text_anchor="end"))
        out.append(_tag("rect", x=label_w, y=top, width=f"{max(w, 1):.1f}", height=row_h - 6,
                        fill=colour, data_label=label, data_value=value))  # fmt: skip
        out.append(_text(label_w + w + 6, top + 13, figure(value, unit), class_="value"))
    out.append("</svg>")
    return Markup("".join(out))


def figure(value: float, unit: str) -> str:
    if unit == "USD":
        return f"${value:,.2f}"
    if unit == "tokens":
        return f"{int(value):,} tokens"
    return f"{value:,.0f} {unit}"


def timeline(
    buckets: Sequence[tuple[str, dict[str, float]]], unit: str, width: int = 720
) -> Markup:
    """Stacked columns over time: (day, value by agent kind) each, a legend of the kinds."""
    if not buckets:
        return Markup('<p class="empty">nothing recorded</p>')
    height, left, top, bottom = 200, 60, 10, 40
    plot_w, plot_h = width - left - 150, height - top - bottom
    kinds = sorted({k for _, by in buckets for k in by})
    colour = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds)}
    most = max(sum(by.values()) for _, by in buckets) or 1.0
    step = plot_w / len(buckets)
    out = [f'<svg class="chart timeline" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{escape(unit)} over time">']  # fmt: skip
    for i, (day, by) in enumerate(buckets):
        base = float(top + plot_h)
        for k in kinds:
            h = by.get(k, 0.0) / most * plot_h
            if h:
                out.append(_tag("rect", x=f"{left + i * step + 2:.1f}", y=f"{base - h:.1f}",
                                width=f"{max(step - 4, 1):.1f}", height=f"{h:.1f}",
                                fill=colour[k], data_kind=k, data_day=day,
                                data_value=by[k]))  # fmt: skip
                base -= h
        if len(buckets) <= 12 or i in (0, len(buckets) - 1):
            out.append(_text(left + i * step + step / 2, height - 22, day[5:], class_="axis",
                             text_anchor="middle"))  # fmt: skip
    out.append(_text(left - 6, top + 10, figure(most, unit), class_="axis", text_anchor="end"))
    for j, k in enumerate(kinds):
        total = sum(by.get(k, 0.0) for _, by in buckets)
        out.append(_tag("rect", x=width - 140, y=top + j * 15, width=10, height=10, fill=colour[k]))
        out.append(
            _text(width - 125, top + j * 15 + 9, f"{k} {figure(total, unit)}", class_="legend")
        )
    out.append("</svg>")
    return Markup("".join(out))
