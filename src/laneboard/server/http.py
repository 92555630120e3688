"""Query parsing for the routes outside the operation table (the dashboard, the event
stream); the table's own parameters are checked by ``laneboard.ops.validate``."""

from __future__ import annotations

import re

from laneboard.errors import bad_input
from laneboard.ops.validate import card_ref, clean_text, project_ref

__all__ = ["card_ref", "clean_text", "project_ref", "query_bool", "query_int", "query_text"]


def query_int(raw: str | None, name: str, default: int, lo: int, hi: int) -> int:
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"-?[0-9]{1,18}", raw):
        raise bad_input(f"query {name}={raw[:40]!r} is not a whole number", f"pass {name}=N")
    v = int(raw)
    if not lo <= v <= hi:
        raise bad_input(f"query {name}={v} is out of range", f"use {lo} to {hi}")
    return v


def query_bool(raw: str | None, name: str) -> bool:
    if raw is None or raw == "":
        return False
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise bad_input(f"query {name}={raw[:40]!r} is not a boolean", f"pass {name}=true or false")


def query_text(raw: str | None, name: str) -> str | None:
    if raw is None or raw == "":
        return None
    clean_text(raw, f"query {name}")
    if len(raw) > 500:
        raise bad_input(f"query {name} is too long", f"keep {name} under 500 characters")
    return raw
