"""Validation of caller input into domain values (one clear error each).

Every surface (CLI, HTTP, MCP) hands its arguments to the board, and the board checks
them here, so the rules hold the same everywhere and on both backends:

* text never holds NUL, other control characters or terminal escape sequences; only
  descriptions, comments, report bodies, questions and acceptance criteria may span lines
  (``\\n``, ``\\r\\n`` and tabs); titles, names, labels, paths and commands are one line;
* text is valid Unicode (no lone surrogates, which is what an argument that is not UTF-8
  decodes to);
* JSON documents (``meta``, request bodies) are bounded in nesting depth and size;
* ids fit the stores' 64-bit integers: a larger id names nothing (``NOT_FOUND``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from laneboard.domain.model import PROJECT_KEY_RE, Criterion
from laneboard.errors import LaneboardError, bad_input

MAX_ID = 2**63 - 1  # both stores keep ids in signed 64-bit integers
JSON_DEPTH = 32  # nesting levels of a JSON document
META_CHARS = 100_000  # a card's meta, serialized
JSON_CHARS = 2_000_000  # any JSON document a caller sends (a request body, --meta)

# C0 controls but tab and newline, DEL, C1 controls (U+009B is a terminal's CSI), lone
# surrogates; and on one-line fields also tab, newline and the bidirectional overrides
# and isolates that make a terminal show text in another order than it is stored.
_BODY_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]|\r(?!\n)")
_LINE_BAD = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# strings inside a stored JSON document: printed only as escaped JSON, so only what the
# stores cannot hold is refused (PostgreSQL text has no NUL; neither store takes surrogates)
_JSON_BAD = re.compile("[\x00\ud800-\udfff]")


def _describe(ch: str) -> str:
    if "\ud800" <= ch <= "\udfff":
        return "text that is not valid UTF-8"
    if ch == "\x1b":
        return "a terminal escape sequence (ESC)"
    if ch in "\n\r":
        return "a line break"
    if ch == "\x00":
        return "a NUL character"
    return f"the control character U+{ord(ch):04X}"


def clean(value: str, what: str, *, multiline: bool = False, pattern: Any = None) -> str:
    """Refuse control characters, escape sequences and invalid Unicode in ``value``."""
    bad = (pattern or (_BODY_BAD if multiline else _LINE_BAD)).search(value)
    if bad is not None:
        found = _describe(bad.group()[0])
        fix = f"remove it from {what}"
        if found == "a line break":
            fix = f"keep {what} on one line"
        elif found.startswith("text that"):
            fix = f"pass {what} as UTF-8 text"
        raise bad_input(f"{what} contains {found} at character {bad.start() + 1}", fix)
    return value


def project_key(key: str) -> str:
    if not isinstance(key, str) or not PROJECT_KEY_RE.match(key):
        shown = clean_repr(key)
        raise bad_input(
            f"project key {shown} is not valid",
            "use 1-10 upper-case letters or digits starting with a letter, e.g. WEB",
        )
    return key


def clean_repr(value: Any, limit: int = 60) -> str:
    """A value as it may be shown in an error line: escaped, bounded."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text(
    value: str, what: str, *, limit: int = 200_000, empty: bool = False, multiline: bool = False
) -> str:
    if not isinstance(value, str):
        raise bad_input(f"{what} must be text", f"pass {what} as a string")
    if len(value) > limit:
        raise bad_input(f"{what} is {len(value)} characters long", f"keep {what} under {limit}")
    clean(value, what, multiline=multiline)
    if not empty and not value.strip():
        raise bad_input(f"{what} is empty", f"give a non-empty {what}")
    return value


def criteria(items: Iterable[Any], start: int = 1) -> list[Criterion]:
    out: list[Criterion] = []
    n = start
    for item in items:
        if isinstance(item, Criterion):
            out.append(item)
            continue
        if isinstance(item, dict):
            t = text(str(item.get("text", "")), "acceptance criterion", multiline=True)
            cid = text(str(item.get("id") or f"A{n}"), "acceptance criterion id", limit=40)
        else:
            t = text(str(item), "acceptance criterion", multiline=True)
            cid = f"A{n}"
        out.append(Criterion(cid, t))
        n += 1
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise bad_input("acceptance criteria ids repeat", "give each criterion a distinct id")
    return out


def repo_path(path: str) -> str:
    """A repository-relative path: no globs, no absolute paths, no ``.`` or ``..``."""
    if not isinstance(path, str):
        raise bad_input("an allowed path must be text", "give repository-relative paths")
    clean(path, "an allowed path")
    p = path.strip()
    if not p:
        raise bad_input("an allowed path is empty", "give repository-relative paths like src/app")
    if p.startswith("/") or "\\" in p:
        raise bad_input(f"allowed path {path!r} is not repository-relative", "drop the leading /")
    if any(ch in p for ch in "*?[]{}"):
        raise bad_input(f"allowed path {path!r} contains a glob", "list directories or files")
    parts = p.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise bad_input(f"allowed path {path!r} contains '.', '..' or '//'", "use a plain path")
    return "/".join(parts)


def strings(items: Iterable[Any], what: str) -> list[str]:
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise bad_input(f"{what} must be non-empty strings", f"fix the {what} list")
        clean(item, what)
        out.append(item.strip())
    return out


def card_ref(ref: str | int) -> str | int:
    """A card reference: an id, or an identifier like ``WEB-12`` (upper-cased)."""
    if isinstance(ref, bool) or not isinstance(ref, int | str):
        raise bad_input("a card reference must be text or an id", "use WEB-12 or an id")
    if isinstance(ref, int):
        return row_id(ref, "card")
    r = ref.strip()
    if r.isascii() and r.isdigit():
        return row_id(int(r), "card")
    if not r:
        raise bad_input("a card reference is empty", "use an identifier like WEB-12 or an id")
    clean(r, "a card reference")
    return r.upper()


def row_id(value: int, what: str) -> int:
    """An id as the store keeps it; one beyond 64 bits (or below 1) names nothing."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_input(f"a {what} id must be a whole number", f"pass the {what}'s id")
    if not 1 <= value <= MAX_ID:
        shown = clean_repr(value, 30)
        raise LaneboardError("NOT_FOUND", f"{what} {shown} does not exist", f"check the {what} id")
    return value


def cursor(value: int, what: str = "after") -> int:
    """An event or comment id to read after: 0 to 2^63-1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise bad_input(f"{what} {clean_repr(value, 30)} is out of range", f"use 0 to {MAX_ID}")
    return value


def positive(value: int, what: str) -> int:
    if value < 1:
        raise LaneboardError("BAD_INPUT", f"{what} must be at least 1", f"pass a positive {what}")
    return value


# -- JSON documents -----------------------------------------------------------------
def json_text(raw: str | bytes, what: str, *, limit: int = JSON_CHARS) -> Any:
    """Parse a JSON document a caller sent, bounded in size and depth."""
    if len(raw) > limit:
        raise bad_input(f"{what} is {len(raw)} bytes long", f"keep {what} under {limit} bytes")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(what) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_input(
            f"{what} is not valid JSON ({exc})".replace("\n", " "), f"send {what} as JSON"
        ) from None
    return json_value(value, what, limit=limit)


def _too_deep(what: str) -> LaneboardError:
    return bad_input(
        f"{what} nests deeper than {JSON_DEPTH} levels", f"flatten {what} to {JSON_DEPTH} levels"
    )


def json_value(value: Any, what: str, *, limit: int = META_CHARS) -> Any:
    """A JSON value to store: bounded depth and size, keys and strings clean of NUL and
    invalid Unicode (both stores refuse or mangle them). Walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > JSON_DEPTH:
                raise _too_deep(what)
            if isinstance(item, dict):
                for k, v in item.items():
                    if not isinstance(k, str):
                        raise bad_input(f"{what} has a key that is not text", "use string keys")
                    clean(k, f"a key of {what}")
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            clean(item, f"a string in {what}", pattern=_JSON_BAD)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_ID:
            raise bad_input(f"{what} holds a number beyond 64 bits", "store it as a string")
        elif isinstance(item, float) and not math.isfinite(item):
            raise bad_input(f"{what} holds {item}, which JSON cannot carry", "use a finite number")
        elif not (item is None or isinstance(item, bool | int | float)):
            raise bad_input(f"{what} holds a {type(item).__name__}", f"send {what} as JSON")
    size = len(json.dumps(value, ensure_ascii=False))
    if size > limit:
        raise bad_input(f"{what} is {size} characters as JSON", f"keep {what} under {limit}")
    return value


def meta(value: Any, what: str = "meta") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_input(f"{what} must be a JSON object", f"pass {what} as {{...}}")
    out: dict[str, Any] = json_value(value, what)
    return out
