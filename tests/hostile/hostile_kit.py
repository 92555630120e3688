"""What a hostile agent tries, and how the suite proves none of it reached the user."""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


def checkout_hash(repo: Path) -> str:
    """A hash of the user's checkout: every file of the working tree (laneboard's own
    ``.worktrees`` and ``.laneboard`` aside), HEAD, every ref, the config and the hooks."""
    return hashlib.sha256(repr(sorted(checkout_files(repo).items())).encode()).hexdigest()


def checkout_files(repo: Path) -> dict[str, str]:
    """Path → digest of everything ``checkout_hash`` covers (to say what differs)."""
    out: dict[str, str] = {}
    for base, dirs, files in os.walk(repo):
        rel = os.path.relpath(base, repo)
        if rel.split(os.sep)[0] in (".worktrees", ".laneboard"):
            dirs[:] = []
            continue
        dirs.sort()
        for name in sorted(files):
            path = Path(base, name)
            if rel.split(os.sep)[0] == ".git" and name in ("index.lock", "FETCH_HEAD"):
                continue
            data = path.read_bytes() if not path.is_symlink() else os.readlink(path).encode()
            out[str(path.relative_to(repo))] = hashlib.sha256(data).hexdigest()
    refs = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname) %(objectname)"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    out["refs"] = refs
    return out


@dataclass
class Targets:
    repo: Path
    outside: Path  # a directory beside the lane, outside it
    user_home: Path
    db: Path
    state: Path
    other_card: str

    def attempts(self) -> list[str]:
        """Each escape as one shell command (each ends well, so the next one runs)."""
        r = self.repo
        return [
            f"echo escaped > {self.outside}/outside.txt",
            f"git -C {r} -c user.name=x -c user.email=x@y commit --allow-empty -q -m hacked",
            f"printf '#!/bin/sh\\necho pwned\\n' > {r}/.git/hooks/post-commit",
            f"git -C {r} config core.hooksPath /tmp/evil-hooks",
            f"echo '[alias] x = !sh' >> {r}/.git/config",
            f"echo broken > {r}/README.md",
            f"cat {self.state}/tokens/*/token > stolen.txt",
            f"echo junk > {self.state}/supervisor.log",
            f"cat {self.db} > stolen.db",
            f"echo junk >> {self.db}",
            f"python3 -c \"import sqlite3; c = sqlite3.connect('{self.db}'); "
            f"c.execute('DELETE FROM cards'); c.commit()\"",
            f"lb card comment {self.other_card} 'hijacked by another card'",
            f"lb card move {self.other_card} canceled",
            f"echo pwned > {self.user_home}/.bashrc",
        ]

    def stole_the_database(self, lane: Path) -> bool:
        """Whether ``cat <db> > stolen.db`` copied any of the board into the lane."""
        stolen = lane / "stolen.db"
        return stolen.exists() and stolen.stat().st_size > 0

    def script(self) -> str:
        return "\n".join(f"{cmd} || true" for cmd in self.attempts())
