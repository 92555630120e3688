"""Dependency graph rules: links form a DAG."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def would_cycle(edges: Mapping[int, Iterable[int]], card: int, depends_on: int) -> bool:
    """True if adding ``card -> depends_on`` closes a cycle.

    ``edges`` maps a card to the cards it depends on.
    """
    if card == depends_on:
        return True
    seen: set[int] = set()
    stack = [depends_on]
    while stack:
        node = stack.pop()
        if node == card:
            return True
        if node in seen:
            continue
        seen.add(node)
        stack.extend(edges.get(node, ()))
    return False


def downstream_counts(
    dependents: Mapping[int, Iterable[int]], roots: Iterable[int]
) -> dict[int, int]:
    """For each root, how many cards transitively wait on it.

    ``dependents`` maps a card to the cards that depend on it.
    """
    out: dict[int, int] = {}
    for root in roots:
        seen: set[int] = set()
        stack = list(dependents.get(root, ()))
        while stack:
            node = stack.pop()
            if node in seen or node == root:
                continue
            seen.add(node)
            stack.extend(dependents.get(node, ()))
        out[root] = len(seen)
    return out
