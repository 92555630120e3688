"""The card page shows the lane's diff against its base: as the tree stands while the
card is worked, and by the merge commit once the lane has landed and been cleaned."""

from __future__ import annotations

import html
import re
from pathlib import Path

from starlette.testclient import TestClient
from tests.workspace.helpers import ME, claimed, commit_file, deliver, gated, project

from laneboard.store import Store
from laneboard.workspace.land import cleanup_terminal


def test_card_page_shows_the_lane_diff(client: TestClient, store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    card, lane = claimed(board, acceptance_mode="off")
    page = html.unescape(client.get(f"/cards/{card.ref}").text)
    assert 'id="lane"' in page and "lane/P-1" in page and "no changes yet" in page

    commit_file(lane, "feature.txt", "committed line\n", "the work")
    Path(lane, "README.md").write_text("hello\nedited, not committed\n")
    page = html.unescape(client.get(f"/cards/{card.ref}").text)
    assert 'data-path="feature.txt"' in page and "+committed line" in added(page)
    assert "+edited, not committed" in added(page)  # the tree as it stands

    board.move(ME, deliver(board, card).ref, "done")  # the delivery commits it; lands
    assert [r["action"] for r in cleanup_terminal(store)] == ["cleaned"]
    page = html.unescape(client.get(f"/cards/{card.ref}").text)
    assert "cleaned" in page
    assert {"+committed line", "+edited, not committed"} <= added(page)  # the merge


def added(page: str) -> set[str]:
    """The added lines of the page's diff, as text with their sign."""
    rows = re.findall(r'<tr class="add">.*?<td class="code">(.*?)</td></tr>', page, re.S)
    return {re.sub(r"<[^>]+>", "", r) for r in rows}
