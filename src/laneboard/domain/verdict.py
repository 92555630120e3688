"""Reading a reviewer's verdict from the report on a review card. Pure: no I/O.

The report's first line is ``VERDICT: APPROVE`` or ``VERDICT: REJECT`` (ASCII, exact).
The rest are the findings; numbered lines (``1. …`` or ``1) …``) are the must-fix
items of a REJECT. An APPROVE must carry a command anchor: evidence on the report, or
a line ``$ command`` / ``ran: command`` in the body — otherwise it is
``verdict_unsupported``. Anything else is ``verdict_unreadable``.

Reports are untrusted text: the parser never looks past the first line for the
decision, keeps findings and items as inert text with control and bidirectional
formatting characters removed, and bounds every size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from laneboard.domain.model import Criterion, Evidence

APPROVE = "APPROVE"
REJECT = "REJECT"
UNREADABLE = "verdict_unreadable"
UNSUPPORTED = "verdict_unsupported"
# the runtime's record of a verified lane's head, added to a delivery's evidence
# (``workspace.verify``): no command a reviewer ran, so never a verdict's anchor
LANE_HEAD = "git rev-parse HEAD"

FINDINGS_MAX = 8000  # characters of findings kept for the finding comment
ITEM_MAX = 500  # characters per must-fix item
ITEMS_MAX = 30  # must-fix items taken from one report
SCAN_MAX = 200_000  # characters of a report looked at at all
LINE_MAX = 200  # a first line longer than this is not a verdict line

_VERDICT_LINE = re.compile(r"VERDICT:[ \t]*(APPROVE|REJECT)[ \t]*", re.ASCII)
_ITEM = re.compile(r"[ \t]*([0-9]{1,3})[.)][ \t]+(\S.*)", re.ASCII)
_ANCHOR = re.compile(r"[ \t]*(?:\$[ \t]+|ran:[ \t]*)(\S.*)", re.ASCII | re.IGNORECASE)
# C0/C1 controls except tab and newline, bidi embeddings/overrides/isolates, zero-width
# characters and the BOM: they can hide or reorder text a human reads later.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


@dataclass(frozen=True)
class Verdict:
    """What a report says. ``decision`` is set only when ``problem`` is None."""

    decision: str | None
    problem: str | None = None
    detail: str = ""
    findings: str = ""
    must_fix: tuple[str, ...] = ()
    anchors: tuple[str, ...] = ()
    clipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "problem": self.problem,
            "detail": self.detail,
            "must_fix": list(self.must_fix),
            "anchors": list(self.anchors),
            "clipped": self.clipped,
        }


def clean(text: str) -> str:
    """Text safe to store and show: no control, bidi or zero-width characters."""
    return _UNSAFE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def _clip(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: max(0, limit - 14)].rstrip() + " …[truncated]", True


def _unreadable(detail: str) -> Verdict:
    return Verdict(None, UNREADABLE, detail)


def anchor_commands(evidence: Iterable[Evidence]) -> list[str]:
    """The commands of a report's evidence that may anchor an APPROVE: all but the
    runtime's record of the lane's head, which a review run in a lane of its own (on
    another machine than the reviewed work) gains whatever the reviewer did."""
    return [e.command for e in evidence if e.command.strip() != LANE_HEAD]


def parse_verdict(
    body: str, evidence_commands: Iterable[str] = (), declared: str | None = None
) -> Verdict:
    """Read the verdict of a review report.

    ``evidence_commands`` are the commands of the report's evidence items; ``declared``
    is the verdict the reporter passed separately (``--verdict``), which must agree
    with the first line when given.
    """
    if not isinstance(body, str) or not body:
        return _unreadable("the report is empty")
    scanned = body[:SCAN_MAX]
    clipped = len(body) > SCAN_MAX
    first, _, rest = scanned.partition("\n")
    first = first.rstrip("\r")
    if len(first) > LINE_MAX:
        return _unreadable("the first line is too long to be a verdict line")
    m = _VERDICT_LINE.fullmatch(first.strip(" \t"))
    if m is None:
        shown = clean(first)[:80]
        return _unreadable(
            f"the first line is {shown!r}, not 'VERDICT: APPROVE' or 'VERDICT: REJECT'"
        )
    decision = m.group(1)
    if declared is not None and declared != decision:
        return _unreadable(f"the report says {decision} but was filed as {declared}")
    lines = clean(rest).split("\n")
    items: list[str] = []
    anchors: list[str] = []
    for line in lines:
        im = _ITEM.fullmatch(line)
        if im is not None and len(items) < ITEMS_MAX:
            item, cut = _clip(im.group(2).strip(), ITEM_MAX)
            clipped = clipped or cut
            if item:
                items.append(item)
            continue
        am = _ANCHOR.fullmatch(line)
        if am is not None:
            anchors.append(am.group(1).strip()[:ITEM_MAX])
    if sum(1 for ln in lines if _ITEM.fullmatch(ln)) > ITEMS_MAX:
        clipped = True
    commands = [clean(c).strip()[:ITEM_MAX] for c in evidence_commands if str(c).strip()]
    anchors = commands + anchors
    findings, cut = _clip(clean(rest).strip(), FINDINGS_MAX)
    clipped = clipped or cut
    if decision == APPROVE and not anchors:
        return Verdict(
            None,
            UNSUPPORTED,
            "an APPROVE needs a command anchor: report evidence, or a '$ command' or "
            "'ran: command' line",
            findings=findings,
            clipped=clipped,
        )
    return Verdict(
        decision,
        None,
        "",
        findings=findings,
        must_fix=tuple(items) if decision == REJECT else (),
        anchors=tuple(anchors),
        clipped=clipped,
    )


def must_fix_criteria(
    existing: Sequence[Criterion], items: Sequence[str], round_: int, review_ref: str
) -> list[Criterion]:
    """The acceptance list with a REJECT's must-fix items appended.

    Each item becomes an ordinary criterion ``R<round>.<n>``; a REJECT with no numbered
    item appends one pointer criterion to the review's findings instead of nothing.
    Items already on the list (same text) are not added twice.
    """
    out = list(existing)
    taken = {c.id for c in out}
    texts = {c.text for c in out}
    wanted = list(items) or [
        f"Address the findings of review {review_ref} on round {round_} "
        f"(see its finding comment on this card)"
    ]
    n = 0
    for text in wanted:
        text = text.strip()
        if not text or text in texts:
            continue
        n += 1
        cid = f"R{round_}.{n}"
        while cid in taken:
            n += 1
            cid = f"R{round_}.{n}"
        out.append(Criterion(cid, text))
        taken.add(cid)
        texts.add(text)
    return out
