"""A unified diff as people read it: files with their counts, hunks with line numbers,
syntax highlighted (Pygments), in unified or side-by-side rows, paged by lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from markupsafe import Markup, escape

PAGE_LINES = 1500  # diff lines per page; a larger file has a page of its own
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")
HIGHLIGHT_LIMIT = 400_000  # characters of one file's side highlighted; beyond it, plain text


@dataclass
class Line:
    kind: str  # "ctx", "add", "del" or "note" (\ No newline at end of file)
    old: int | None
    new: int | None
    text: str
    html: Markup = field(default_factory=Markup)


@dataclass
class Hunk:
    header: str
    lines: list[Line] = field(default_factory=list)


@dataclass
class FileDiff:
    path: str
    old_path: str
    change: str  # "modified", "added", "deleted", "renamed", "binary"
    added: int = 0
    removed: int = 0
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(h.lines) + 1 for h in self.hunks)

    @property
    def anchor(self) -> str:
        return "f-" + re.sub(r"[^A-Za-z0-9_-]", "-", self.path)


def _path(raw: str) -> str:
    raw = raw.strip()
    if raw.startswith('"') and raw.endswith('"'):
        raw = raw[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        raw = raw.encode("latin-1", "replace").decode("utf-8", "replace")
    return raw[2:] if raw[:2] in ("a/", "b/") else raw


def _header_paths(line: str) -> tuple[str, str]:
    rest = line[len("diff --git ") :]
    if rest.startswith('"'):
        end = rest.index('"', 1) + 1
        return _path(rest[:end]), _path(rest[end:])
    half = rest.split(" b/", 1)
    a = _path(half[0])
    return a, (_path("b/" + half[1]) if len(half) == 2 else a)


def parse(text: str) -> list[FileDiff]:
    """The files of ``git diff`` output, each with its hunks and counts."""
    files: list[FileDiff] = []
    cur: FileDiff | None = None
    hunk: Hunk | None = None
    old = new = 0
    for line in text.split("\n"):
        if line.startswith("diff --git "):
            a, b = _header_paths(line)
            cur = FileDiff(b, a, "renamed" if a != b else "modified")
            files.append(cur)
            hunk = None
        elif cur is None:
            continue
        elif hunk is None and not line.startswith("@@"):
            _file_header(cur, line)
        elif m := HUNK_RE.match(line):
            old, new = int(m.group(1)), int(m.group(2))
            hunk = Hunk(line)
            cur.hunks.append(hunk)
        elif hunk is not None:
            old, new = _body_line(cur, hunk, line, old, new)
    return files


def _file_header(cur: FileDiff, line: str) -> None:
    if line.startswith("new file mode"):
        cur.change = "added"
    elif line.startswith("deleted file mode"):
        cur.change = "deleted"
    elif line.startswith("Binary files") or line.startswith("GIT binary patch"):
        cur.change = "binary"
    elif line.startswith("rename from "):
        cur.old_path, cur.change = line[len("rename from ") :], "renamed"
    elif line.startswith("rename to "):
        cur.path = line[len("rename to ") :]


def _body_line(cur: FileDiff, hunk: Hunk, line: str, old: int, new: int) -> tuple[int, int]:
    tag, body = line[:1], line[1:]
    if tag == "+":
        hunk.lines.append(Line("add", None, new, body))
        cur.added += 1
        return old, new + 1
    if tag == "-":
        hunk.lines.append(Line("del", old, None, body))
        cur.removed += 1
        return old + 1, new
    if tag == " ":
        hunk.lines.append(Line("ctx", old, new, body))
        return old + 1, new + 1
    if tag == "\\":
        hunk.lines.append(Line("note", None, None, line))
    return old, new


@lru_cache(maxsize=256)
def _lexer(path: str) -> Any:
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound

    try:
        return get_lexer_for_filename(path, stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None


def _highlight_lines(lexer: Any, lines: list[str]) -> list[Markup]:
    """Each line highlighted in the context of the lines around it."""
    if lexer is None or sum(len(s) for s in lines) > HIGHLIGHT_LIMIT:
        return [Markup(escape(s)) for s in lines]
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    out = highlight("\n".join(lines) + "\n", lexer, HtmlFormatter(nowrap=True))
    parts = out.split("\n")
    if len(parts) < len(lines):  # a lexer that swallowed lines: fall back to plain text
        return [Markup(escape(s)) for s in lines]
    return [Markup(p) for p in parts[: len(lines)]]


def highlight_file(f: FileDiff) -> None:
    """Fill each line's HTML: the old side and the new side are each lexed as a whole."""
    lexer = _lexer(f.path)
    for side in (("ctx", "del"), ("ctx", "add")):
        lines = [ln for h in f.hunks for ln in h.lines if ln.kind in side]
        for ln, html in zip(lines, _highlight_lines(lexer, [ln.text for ln in lines]), strict=True):
            if ln.kind != "ctx" or side[1] == "del":
                ln.html = html
    for h in f.hunks:
        for ln in h.lines:
            if ln.kind == "note":
                ln.html = Markup(escape(ln.text))


def side_by_side(h: Hunk) -> list[tuple[Line | None, Line | None]]:
    """Rows of (old, new): context on both sides, a removed run beside the added run after it."""
    rows: list[tuple[Line | None, Line | None]] = []
    dels: list[Line] = []
    adds: list[Line] = []

    def flush() -> None:
        for i in range(max(len(dels), len(adds))):
            rows.append((dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None))
        dels.clear()
        adds.clear()

    for ln in h.lines:
        if ln.kind == "del":
            if adds:
                flush()
            dels.append(ln)
        elif ln.kind == "add":
            adds.append(ln)
        else:
            flush()
            rows.append((ln, ln) if ln.kind == "ctx" else (ln, None))
    flush()
    return rows


def pages(files: list[FileDiff], budget: int = PAGE_LINES) -> list[list[int]]:
    """The files (by index) on each page: whole files, about ``budget`` lines a page."""
    out: list[list[int]] = []
    size = 0
    for i, f in enumerate(files):
        if out and size + f.size <= budget:
            out[-1].append(i)
            size += f.size
        else:
            out.append([i])
            size = f.size
    return out or [[]]


def view(text: str, page: int, mode: str) -> dict[str, Any]:
    """What the card page draws of a diff: every file's counts, one page of hunks."""
    files = parse(text)
    split = pages(files)
    page = min(max(page, 1), len(split))
    shown = [files[i] for i in split[page - 1]]
    for f in shown:
        highlight_file(f)
    page_of = {i: n for n, idx in enumerate(split, 1) for i in idx}
    return {
        "files": files,
        "page_of": [page_of.get(i, 1) for i in range(len(files))],
        "shown": shown,
        "page": page,
        "pages": len(split),
        "mode": "split" if mode == "split" else "unified",
        "added": sum(f.added for f in files),
        "removed": sum(f.removed for f in files),
        "rows": {f.anchor: [side_by_side(h) for h in f.hunks] for f in shown}
        if mode == "split"
        else {},
    }


@lru_cache(maxsize=1)
def stylesheet() -> str:
    """The highlighting colours, from Pygments' default style, scoped to the diff."""
    from pygments.formatters import HtmlFormatter

    rules = HtmlFormatter(style="default").get_token_style_defs(".diff-code")
    return "\n".join(str(r) for r in rules) + "\n"
