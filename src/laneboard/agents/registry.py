"""Which adapter implements which agent kind (imported lazily)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from laneboard.agents.base import Adapter
from laneboard.errors import LaneboardError

# kind -> "module:factory"; a factory takes the kind's config mapping and returns an Adapter
ADAPTERS: dict[str, str] = {
    "scripted": "laneboard.agents.scripted:ScriptedAdapter",
    "command": "laneboard.agents.command:CommandAdapter",
    "claude": "laneboard.agents.claude:ClaudeAdapter",
    "codex": "laneboard.agents.codex:CodexAdapter",
    "pi": "laneboard.agents.pi:PiAdapter",
}


def adapter_for(kind: str, config: Mapping[str, Any] | None = None) -> Adapter:
    target = ADAPTERS.get(kind)
    if target is None:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"unknown agent kind {kind!r}",
            f"use one of: {', '.join(sorted(ADAPTERS))}",
        )
    module, _, name = target.partition(":")
    factory = getattr(importlib.import_module(module), name)
    adapter: Adapter = factory(dict(config or {}))
    return adapter
