"""The secret values laneboard must never store or show, and their redaction.

A value is secret when laneboard passes it to an agent: the value of any variable named
``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD`` or ``*_AUTH`` in the environment
(agents inherit it), of a variable a kind lists in ``secret_env``, and every laneboard token
the supervisor hands out (``register``). ``scrub`` replaces each such value in a text with
``***``; the store scrubs every string it writes, the log file every line, so an agent that
prints its API key in an error does not put the key into events, comments, turns, queue
rows, the log, the dashboard or an API response.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_NAME = re.compile(r"(?:_API_KEY|_TOKEN|_SECRET|_PASSWORD|_AUTH|_APIKEY)$")
MIN_LEN = 6  # shorter values would redact ordinary words
MASK = "***"
LANEBOARD_TOKEN = re.compile(r"lbt_[A-Za-z0-9_\-]{16,}")
_registered: set[str] = set()
_names: set[str] = set()
_lock = threading.Lock()
_generation = 0  # bumped by every register(): the cached answer is then stale
# the answer for the process environment, kept while neither it nor the registry changes
# (every write scrubs its parameters: rescanning the environment each time is not free)
_cached: tuple[tuple[Any, ...], int, list[str]] | None = None


def register(values: Iterable[str | None] = (), names: Iterable[str] = ()) -> None:
    """Remember values (tokens handed out) and variable names (``secret_env``) as secret.

    A laneboard token is masked by its pattern (``LANEBOARD_TOKEN``) wherever it occurs,
    so it is not kept: a supervisor hands one out per session, and every write would
    otherwise search its text for each token the process ever handed out.
    """
    global _generation
    kept = {v for v in values if v and len(v) >= MIN_LEN and not LANEBOARD_TOKEN.fullmatch(v)}
    named = set(names)
    with _lock:
        if kept <= _registered and named <= _names:
            return  # nothing new: the cached list stands
        _registered.update(kept)
        _names.update(named)
        _generation += 1


def _environ_key() -> tuple[Any, ...]:
    """The process environment as it stands (its raw items: no decoding, no copies of text)."""
    data = getattr(os.environ, "_data", None)
    return tuple(data.items()) if isinstance(data, dict) else tuple(os.environ.items())


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value known now, longest first (so a value inside another goes last)."""
    global _cached
    if env is None:
        key, seen = _environ_key(), _cached
        if seen is not None and seen[1] == _generation and seen[0] == key:
            return seen[2]
    with _lock:
        generation = _generation
        found = set(_registered)
        names = set(_names)
    source = os.environ if env is None else env
    for name, value in source.items():
        if len(value) >= MIN_LEN and (SECRET_NAME.search(name) or name in names):
            found.add(value)
    out = sorted(found, key=len, reverse=True)
    if env is None:
        _cached = (key, generation, out)
    return out


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    return _scrub(text, secret_values(env))


def _scrub(text: str, values: list[str]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return LANEBOARD_TOKEN.sub("lbt_" + MASK, text) if "lbt_" in text else text


def scrub_params(sql: str, params: Iterable[Any]) -> tuple[Any, ...]:
    """A statement's parameters with secret values redacted (reads are left alone).

    Every write passes here, so the common case is one look at all its text parameters
    together: only when some secret (or a token's prefix) occurs in them is each scrubbed.
    """
    items = tuple(params)
    if sql.lstrip()[:6].upper() == "SELECT":
        return items
    texts = [p for p in items if isinstance(p, str)]
    if not texts:
        return items
    joined = "\x00".join(texts)
    values = secret_values()
    if "lbt_" not in joined and not any(v in joined for v in values):
        return items
    return tuple(_scrub(p, values) if isinstance(p, str) else p for p in items)
