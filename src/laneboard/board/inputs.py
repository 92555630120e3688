"""Validation of caller input into domain values (one clear error each)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from laneboard.domain.model import PROJECT_KEY_RE, Criterion
from laneboard.errors import LaneboardError, bad_input


def project_key(key: str) -> str:
    if not PROJECT_KEY_RE.match(key):
        raise bad_input(
            f"project key {key!r} is not valid",
            "use 1-10 upper-case letters or digits starting with a letter, e.g. WEB",
        )
    return key


def text(value: str, what: str, *, limit: int = 200_000, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise bad_input(f"{what} must be text", f"pass {what} as a string")
    if not empty and not value.strip():
        raise bad_input(f"{what} is empty", f"give a non-empty {what}")
    if len(value) > limit:
        raise bad_input(f"{what} is {len(value)} characters long", f"keep {what} under {limit}")
    return value


def criteria(items: Iterable[Any], start: int = 1) -> list[Criterion]:
    out: list[Criterion] = []
    n = start
    for item in items:
        if isinstance(item, Criterion):
            out.append(item)
            continue
        if isinstance(item, dict):
            t = text(str(item.get("text", "")), "acceptance criterion")
            cid = str(item.get("id") or f"A{n}")
        else:
            t = text(str(item), "acceptance criterion")
            cid = f"A{n}"
        out.append(Criterion(cid, t))
        n += 1
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise bad_input("acceptance criteria ids repeat", "give each criterion a distinct id")
    return out


def repo_path(path: str) -> str:
    """A repository-relative path: no globs, no absolute paths, no ``.`` or ``..``."""
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
        out.append(item.strip())
    return out


def card_ref(ref: str | int) -> str | int:
    if isinstance(ref, int):
        return ref
    r = ref.strip()
    if r.isdigit():
        return int(r)
    if not r:
        raise bad_input("a card reference is empty", "use an identifier like WEB-12 or an id")
    return r.upper()


def positive(value: int, what: str) -> int:
    if value < 1:
        raise LaneboardError("BAD_INPUT", f"{what} must be at least 1", f"pass a positive {what}")
    return value
