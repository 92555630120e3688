"""What a failed git command is reported with: git's reason, not the advice after it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from laneboard.workspace import git as g


def test_a_fetch_from_a_remote_that_is_gone_says_so(tmp_path: Path) -> None:
    repo = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    g.git(str(repo), "remote", "add", "origin", str(tmp_path / "moved.git"))

    with pytest.raises(g.GitError) as err:
        g.git(str(repo), "fetch", "-q", "origin")

    said = str(err.value)
    assert "does not appear to be a git repository" in said, said
    assert not said.endswith("and the repository exists."), said


def test_without_a_fatal_line_the_last_line_is_the_reason() -> None:
    res = g.GitResult(("merge",), 1, "Auto-merging a.txt\nCONFLICT (content): a.txt\n", "")
    assert res.detail() == "CONFLICT (content): a.txt"
    assert g.GitResult(("x",), 2, "", "").detail() == "exit 2"
