"""The lane's diff as people read it: files with counts, highlighting, unified and side by
side, paged rather than cut, each round's diff, and the round's check logs beside it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from starlette.testclient import TestClient
from tests.workspace.helpers import ME, claimed, commit_file, gated, git, project

from laneboard.domain.model import agent
from laneboard.domain.status import Status
from laneboard.server import diffview
from laneboard.store import Store
from laneboard.workspace.lane_admit import LaneAdmitter

SAMPLE = """diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,4 +1,4 @@
 import os
-def old():
-    return 1
+def new():
+    return 2
+# three adds, two removes
 x = 1
diff --git a/notes.txt b/docs/notes.txt
similarity index 90%
rename from notes.txt
rename to docs/notes.txt
diff --git a/gone.md b/gone.md
deleted file mode 100644
index 3333333..0000000
--- a/gone.md
+++ /dev/null
@@ -1 +0,0 @@
-bye
\\ No newline at end of file
diff --git a/logo.png b/logo.png
new file mode 100644
index 0000000..4444444
Binary files /dev/null and b/logo.png differ
"""


def test_parse_counts_and_kinds_of_change() -> None:
    files = diffview.parse(SAMPLE)
    got = [(f.path, f.old_path, f.change, f.added, f.removed) for f in files]
    assert got == [
        ("src/app.py", "src/app.py", "modified", 3, 2),
        ("docs/notes.txt", "notes.txt", "renamed", 0, 0),
        ("gone.md", "gone.md", "deleted", 0, 1),
        ("logo.png", "logo.png", "binary", 0, 0),
    ]
    lines = files[0].hunks[0].lines
    assert [(ln.kind, ln.old, ln.new) for ln in lines] == [
        ("ctx", 1, 1), ("del", 2, None), ("del", 3, None),
        ("add", None, 2), ("add", None, 3), ("add", None, 4), ("ctx", 4, 5),
    ]  # fmt: skip
    assert files[2].hunks[0].lines[-1].kind == "note"


def test_side_by_side_pairs_a_removed_run_with_the_added_run() -> None:
    rows = diffview.side_by_side(diffview.parse(SAMPLE)[0].hunks[0])
    shape = [(o.kind if o else None, n.kind if n else None) for o, n in rows]
    assert shape == [("ctx", "ctx"), ("del", "add"), ("del", "add"), (None, "add"), ("ctx", "ctx")]


def test_highlighting_keeps_one_balanced_line_per_line() -> None:
    f = diffview.parse(SAMPLE)[0]
    diffview.highlight_file(f)
    by_kind = {ln.text: str(ln.html) for ln in f.hunks[0].lines}
    assert '<span class="k">def</span>' in by_kind["def new():"]
    assert '<span class="kn">import</span>' in by_kind["import os"]
    for text, markup in by_kind.items():
        assert re.sub(r"<[^>]+>", "", html.unescape(markup)) == text
        assert markup.count("<span") == markup.count("</span>")


def test_pages_hold_whole_files() -> None:
    big = "".join(
        f"diff --git a/f{i}.txt b/f{i}.txt\n--- a/f{i}.txt\n+++ b/f{i}.txt\n@@ -0,0 +1,{n} @@\n"
        + "".join(f"+line {k}\n" for k in range(n))
        for i, n in enumerate((900, 900, 10, 3000))
    )
    files = diffview.parse(big)
    assert diffview.pages(files) == [[0], [1, 2], [3]]
    v = diffview.view(big, 2, "unified")
    assert [f.path for f in v["shown"]] == ["f1.txt", "f2.txt"] and v["pages"] == 3
    assert v["page_of"] == [1, 2, 2, 3] and v["added"] == 4810
    assert diffview.view(big, 99, "unified")["page"] == 3  # past the end: the last page


def worked_card(store: Store, repo: Path):  # type: ignore[no-untyped-def]
    board = gated(store)
    project(board, repo)
    card, lane = claimed(board, acceptance_mode="off")
    return board, card, lane


def test_card_page_lists_files_and_highlights(client: TestClient, store: Store, repo: Path) -> None:
    _board, card, lane = worked_card(store, repo)
    commit_file(lane, "src/app.py", "import os\n\ndef main():\n    return 1\n", "code")
    Path(lane, "README.md").write_text("hello\nmore\n")
    page = client.get(f"/cards/{card.ref}").text
    files = re.findall(r'<table class="diff-files">(.*?)</table>', page, re.S)[0]
    assert "README.md" in files and "src/app.py" in files and "+4" in files
    assert '<span class="k">def</span>' in page  # Pygments, server-side
    css = client.get("/ui/highlight.css").text
    rules = css.splitlines()
    assert all(r.startswith(".diff-code .") for r in rules)  # scoped to the diff
    assert sum(r.startswith(".diff-code .k {") for r in rules) == 1

    split = client.get(f"/cards/{card.ref}?view=split").text
    assert '<table class="diff-code split">' in split and 'id="view-unified"' in split
    partial = re.search(r'id="card"[^>]*data-partial="([^"]+)"', split)
    assert partial and partial.group(1) == f"/ui/cards/{card.ref}?view=split"  # live keeps it
    assert '<table class="diff-code split">' in client.get(partial.group(1)).text

    bad = client.get(f"/cards/{card.ref}?view=sideways")
    assert bad.status_code == 422 and bad.json()["code"] == "BAD_INPUT"
    assert "view=unified or view=split" in bad.json()["fix"]


def test_a_large_diff_is_paged_not_cut(client: TestClient, store: Store, repo: Path) -> None:
    _board, card, lane = worked_card(store, repo)
    for i in range(3):
        body = "".join(f"row {i}-{k}\n" for k in range(1200))
        commit_file(lane, f"data{i}.txt", body, f"data {i}")
    page = html.unescape(client.get(f"/cards/{card.ref}").text)
    assert "page 1 of 3" in page and "row 0-1199" in page and "row 1-0" not in page
    third = html.unescape(client.get(f"/cards/{card.ref}?page=3").text)
    assert "row 2-1199" in third and "row 0-5" not in third
    assert all(f"data{i}.txt" in third for i in range(3))  # every file is listed on every page


def test_each_round_has_its_diff_and_its_checks(
    client: TestClient, store: Store, repo: Path
) -> None:
    board, card, lane = worked_card(store, repo)
    commit_file(lane, "one.txt", "first round\n", "round one")
    worker = agent("worker", card.id, card.claim_epoch)
    board.report(
        worker,
        card.ref,
        "round one",
        evidence=[
            {"command": "pytest -q", "exit_code": 1, "digest": "a" * 64, "summary": "1 failed"}
        ],
    )
    board.move(worker, card.ref, "in_review")
    with store.write() as tx:
        card = board.move_in(tx, ME, tx.card(card.id), Status.IN_PROGRESS, new_round=True)
    lane2 = LaneAdmitter(board).admit(card, board.project("P"))
    commit_file(lane2, "two.txt", "second round\n", "round two")
    assert git(lane2, "rev-parse", "--abbrev-ref", "HEAD") == "lane/P-1-r2"

    latest = html.unescape(client.get(f"/cards/{card.ref}").text)
    assert "two.txt" in latest and "one.txt" not in latest  # against round one's branch
    assert 'data-round="1"' in latest and "no check runs reported for this round" in latest
    first = html.unescape(client.get(f"/cards/{card.ref}?round=1").text)
    assert "one.txt" in first and "two.txt" not in first
    checks = re.findall(r'<aside class="lane-checks".*?</aside>', first, re.S)[0]
    assert "pytest -q" in checks and "exit 1" in checks and "1 failed" in checks
