"""The reference parts of the docs, generated from the operation table: the command
reference of ``docs/cli.md``, the routes of ``docs/http-api.md`` and the tools of
``docs/mcp.md``.

    python -m laneboard.ops.docs            # print them
    python -m laneboard.ops.docs --write    # replace them in the pages

Each sits between its ``BEGIN``/``END`` markers; a test fails when one is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from laneboard.board.authority import Caller
from laneboard.ops import index
from laneboard.ops.spec import Op, Param, placeholder
from laneboard.ops.table import by_words

END = "<!-- END GENERATED -->"


def begin(title: str) -> str:
    return f"<!-- BEGIN GENERATED: {title} (python -m laneboard.ops.docs --write) -->"


WHO = {
    Caller.PERSON: "a person",
    Caller.OWN_CARD: "a person, or an agent on its own card",
    Caller.CARD_READER: "anyone; an agent reads its card, its dependencies and its own events",
    Caller.SYSTEM: "the runtime",
}


def usage(op: Op) -> str:
    parts = ["lb", *op.words]
    for p in op.params:
        if p.cli and p.flag is None:
            name = p.metavar or p.name.upper()
            parts.append(name if p.required else f"[{name}]")
    for p in op.params:
        if p.cli and p.flag is not None and p.required:
            parts.append(f"{p.flag} {p.metavar or p.name.upper()}")
    return " ".join(parts)


def _argument(p: Param) -> str:
    if p.flag is None:
        return f"`{p.metavar or p.name.upper()}`"
    names = f"`{p.short}`, `{p.flag}`" if p.short else f"`{p.flag}`"
    if p.kind != "bool":
        value = "\\|".join(p.choices) if p.choices else placeholder(p)
        names = names[:-1] + f" {value}`"
    return names


def _meaning(p: Param) -> str:
    text = p.help.replace("|", "\\|")
    if p.choices and p.flag is None:
        text += f" ({', '.join(p.choices)})"
    if p.is_list:
        text += "" if "repeatable" in text else " (repeatable)"
    if p.required and p.flag:
        text += "; required"
    elif p.default not in (None, "", False) and p.kind != "bool":
        text += f"; default `{p.default}`"
    return text


def section(op: Op) -> str:
    lines = [
        f"### `{usage(op)}`",
        "",
        f"{op.summary[0].upper()}{op.summary[1:]}. {op.description}",
        "",
    ]
    args = [p for p in op.params if p.cli]
    lines += ["| argument | meaning |", "|---|---|"]
    lines += [f"| {_argument(p)} | {_meaning(p)} |" for p in args]
    lines.append("| `--json` | print one JSON document |")
    routes = ", ".join(f"`{r.method} /api/v1{r.path}`" for r in op.routes)
    lines += [
        "",
        f"Who: {WHO[op.caller]}. HTTP: {routes}. MCP: `{op.tool}`"
        + (" (read-only)." if op.read_only else " (destructive)." if op.destructive else "."),
        "",
        "```",
        *op.examples,
        "```",
        "",
    ]
    return "\n".join(lines)


def reference() -> str:
    out = [begin("the command reference"), ""]
    groups: dict[str, list[str]] = {}
    single: list[str] = []
    for key in index.OPS:
        if " " in key:
            groups.setdefault(key.split(" ")[0], []).append(key)
        else:
            single.append(key)
    for first, keys in groups.items():
        out += [f"## `lb {first}`: {index.GROUPS[first]}", ""]
        out += [section(by_words(key)) for key in keys]
    out += ["## Other board commands", ""]
    out += [section(by_words(key)) for key in single]
    out += [
        "## Local commands",
        "",
        "These run on this machine and have no HTTP or MCP surface; each has its own page.",
        "",
        "| command | what it does | why it is local |",
        "|---|---|---|",
    ]
    out += [f"| `lb {w}` | {s} | {r} |" for w, (_m, s, r) in sorted(index.LOCAL.items())]
    out += ["", END]
    return "\n".join(out) + "\n"


def routes() -> str:
    from laneboard.ops.table import all_ops

    out = [
        begin("the routes"),
        "",
        "| method and path | operation | who | lb |",
        "|---|---|---|---|",
    ]
    for op in all_ops():
        for r in op.routes:
            fixed = "".join(f" ({k}={str(v).lower()})" for k, v in r.fixed.items())
            out.append(
                f"| `{r.method} /api/v1{r.path}` | {op.summary}{fixed} | {WHO[op.caller]} | "
                f"`lb {' '.join(op.words)}` |"
            )
    out += ["", END]
    return "\n".join(out) + "\n"


def tools() -> str:
    from laneboard.ops.table import all_ops
    from laneboard.ops.validate import wire_params

    out = [begin("the tools"), "", "| tool | arguments | does | hints |", "|---|---|---|---|"]
    for op in all_ops():
        args = ", ".join(f"`{p.name}`" + ("" if p.required else "?") for p in wire_params(op))
        hint = "read-only" if op.read_only else "destructive" if op.destructive else "additive"
        shape = f' Returns `{{"{op.tool_key}": [...]}}`.' if op.tool_key else ""
        out.append(f"| `{op.tool}` | {args} | {op.summary}.{shape} | {hint} |")
    out += ["", END]
    return "\n".join(out) + "\n"


PAGES = {
    "docs/cli.md": ("the command reference", reference),
    "docs/http-api.md": ("the routes", routes),
    "docs/mcp.md": ("the tools", tools),
}


def replaced(text: str, title: str, block: str) -> str:
    """``text`` with its generated block ``title`` replaced by ``block``."""
    start = text.index(begin(title))
    end = text.index(END, start) + len(END)
    return text[:start] + block.rstrip("\n") + text[end:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the docs' reference parts, from the table")
    ap.add_argument("--write", action="store_true", help="replace the blocks in the pages")
    ap.add_argument("--root", default=".", help="the directory holding docs/")
    a = ap.parse_args(argv)
    for page, (title, make) in PAGES.items():
        if not a.write:
            sys.stdout.write(make())
            continue
        path = Path(a.root) / page
        path.write_text(replaced(path.read_text(), title, make()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
