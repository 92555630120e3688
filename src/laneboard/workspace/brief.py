"""The card brief: ``.laneboard/<card>/card.md`` in the card's directory, written atomically."""

from __future__ import annotations

import os
import tempfile

from laneboard.domain.model import Card


def render(card: Card) -> str:
    lines = [
        f"# {card.ref}: {card.title}",
        "",
        f"- status: {card.status.value}",
        f"- round: {card.delivery_round}",
        f"- priority: {card.priority}",
        f"- acceptance mode: {card.acceptance_mode.value}",
    ]
    if card.labels:
        lines.append(f"- labels: {', '.join(card.labels)}")
    if card.allowed_paths:
        lines.append(f"- allowed paths: {', '.join(card.allowed_paths)}")
    lines.append("")
    if card.description:
        lines += ["## Description", "", card.description, ""]
    if card.acceptance:
        lines += (
            ["## Acceptance", ""]
            + [f"{i}. ({c.id}) {c.text}" for i, c in enumerate(card.acceptance, 1)]
            + [""]
        )
    if card.checks:
        lines += ["## Checks", "", *[f"- `{c}`" for c in card.checks], ""]
    lines += conflict_section(card)
    lines += [
        "## Board",
        "",
        f"- heartbeat: `lb card heartbeat {card.ref}`",
        f'- question: `lb card ask {card.ref} "..."` then `lb card wait {card.ref} --question ID`',
        f"- deliver: `lb card report {card.ref} --body ...` then "
        f"`lb card move {card.ref} in_review`",
        "",
    ]
    return "\n".join(lines)


def conflict_section(card: Card) -> list[str]:
    """What a round that resolves a landing conflict is told: the files and both sides."""
    info = card.meta.get("conflict_resolve")
    if not isinstance(info, dict) or info.get("round") != card.delivery_round:
        return []
    files = [str(f) for f in info.get("files") or []]
    onto, branch = info.get("onto"), info.get("branch")
    return [
        "## Landing conflict",
        "",
        f"Round {info.get('from_round')} could not be landed: merging `{branch}` into "
        f"`{onto}` conflicts in {', '.join(f'`{f}`' for f in files)}. This lane starts from "
        f"`{onto}` (commit {str(info.get('onto_commit'))[:12]}) with `{branch}` (commit "
        f"{str(info.get('lane_commit'))[:12]}) merged in; the conflicting files hold both "
        "sides between conflict markers. Resolve them keeping the intent of both, run the "
        "checks, and deliver.",
        "",
        *[f"- `{f}`: ours `git show {onto}:{f}`, theirs `git show {branch}:{f}`" for f in files],
        "",
    ]


def brief_path(target_dir: str, card: Card) -> str:
    return os.path.join(target_dir, ".laneboard", card.ref, "card.md")


def write_brief(target_dir: str, card: Card) -> str:
    """Write the brief with an atomic rename; returns its path."""
    path = brief_path(target_dir, card)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".card.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render(card))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path
