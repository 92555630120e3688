"""The whole operation table (every module of ``index.MODULES``), for the surfaces that
serve all of it at once: the REST routes, OpenAPI, MCP, the docs and completion."""

from __future__ import annotations

import importlib
from functools import cache

from laneboard.ops import index
from laneboard.ops.spec import Op


@cache
def all_ops() -> tuple[Op, ...]:
    ops: list[Op] = []
    for name in index.MODULES:
        ops.extend(importlib.import_module(name).OPS)
    return tuple(ops)


@cache
def by_name() -> dict[str, Op]:
    return {op.name: op for op in all_ops()}


def by_words(key: str) -> Op:
    """The operation of ``lb`` command words (``"card get"``), importing only its module."""
    module = importlib.import_module(index.OPS[key][0])
    for op in module.OPS:
        if " ".join(op.words) == key:
            return op  # type: ignore[no-any-return]
    raise KeyError(key)
