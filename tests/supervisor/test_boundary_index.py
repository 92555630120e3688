"""The boundary check reads the user's index by its entries, and never rewrites it.

``git status`` refreshes an index whose stat data is stale and writes it back: the same
entries, other bytes. Found by the crash soak: two cards held for ``BOUNDARY_VIOLATION
(index)`` when no agent had touched the checkout.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from laneboard.supervisor import boundary
from laneboard.workspace import git as g


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "user.name=t", "-c", "user.email=t@t",
         *args], cwd=repo, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_text("one\n")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


def _stale_stat(repo: Path) -> None:
    """The file's content unchanged, its mtime moved: the index's stat data is stale."""
    st = os.stat(repo / "f.txt")
    os.utime(repo / "f.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def _index_bytes(repo: Path) -> str:
    return hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()


def test_looking_at_the_checkout_never_rewrites_its_index(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _stale_stat(repo)
    before = _index_bytes(repo)
    boundary.fingerprint(str(repo))
    assert g.status_lines(str(repo)) == []
    assert _index_bytes(repo) == before


def test_a_refreshed_index_with_the_same_entries_is_no_violation(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _stale_stat(repo)
    before = boundary.fingerprint(str(repo))
    _git(repo, "status", "--porcelain")  # the user looks: git writes the refreshed index
    after = boundary.fingerprint(str(repo))
    assert boundary.differences(before, after) == []


def test_a_staged_change_or_a_hidden_entry_is_still_a_violation(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    before = boundary.fingerprint(str(repo))
    (repo / "f.txt").write_text("two\n")
    _git(repo, "add", "f.txt")
    staged = boundary.fingerprint(str(repo))
    assert "index" in boundary.differences(before, staged)
    _git(repo, "reset", "-q", "--hard")
    assert boundary.differences(before, boundary.fingerprint(str(repo))) == []
    _git(repo, "update-index", "--assume-unchanged", "f.txt")  # hides later edits from status
    assert boundary.differences(before, boundary.fingerprint(str(repo))) == ["index"]


def test_a_path_that_is_not_utf8_is_read_too(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    name = os.path.join(os.fsencode(repo), b"caf\xe9.txt")
    with open(name, "wb") as fh:
        fh.write(b"x\n")
    _git(repo, "-c", "core.quotePath=false", "add", "-A")
    _git(repo, "commit", "-q", "-m", "latin-1 name")
    before = boundary.fingerprint(str(repo))
    assert boundary.differences(before, boundary.fingerprint(str(repo))) == []
    with open(name, "wb") as fh:
        fh.write(b"y\n")
    _git(repo, "add", "-A")
    assert "index" in boundary.differences(before, boundary.fingerprint(str(repo)))


def test_status_reads_any_name_whatever_the_users_quoting(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git(repo, "config", "core.quotePath", "false")  # the user's own setting
    with open(os.path.join(os.fsencode(repo), b"caf\xe9.txt"), "wb") as fh:
        fh.write(b"x\n")
    assert g.status_lines(str(repo)) == ['?? "caf\\351.txt"']
    before = boundary.fingerprint(str(repo))
    assert boundary.differences(before, boundary.fingerprint(str(repo))) == []
