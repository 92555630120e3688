"""The generated parts of the docs are current, and the completion scripts work."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from laneboard.ops.completion import command_spec, script
from laneboard.ops.docs import PAGES, replaced
from laneboard.ops.index import top_words

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_generated_reference_is_current(page: str) -> None:
    title, make = PAGES[page]
    text = (ROOT / page).read_text()
    assert replaced(text, title, make()) == text, (
        f"{page} is stale: run python -m laneboard.ops.docs --write"
    )


def complete(words: list[str]) -> list[str]:
    """What bash offers after ``lb WORDS...`` (the last word is being typed)."""
    bash = script("bash")
    line = " ".join(["lb", *words])
    program = (
        f"{bash}\nCOMP_WORDS=({' '.join(repr(w) for w in ['lb', *words])}); "
        f"COMP_CWORD={len(words)}; _lb; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    got = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, (line, got.stderr)
    return got.stdout.split()


def test_bash_completes_words_options_and_choices() -> None:
    assert subprocess.run(["bash", "-n"], input=script("bash"), text=True).returncode == 0
    assert complete([""]) == [*sorted(top_words()), "--db", "--help", "--version"]
    assert complete(["card", "cl"]) == ["claim"]
    assert "--acceptance-mode" in complete(["card", "add", "WEB", "t", "--"])
    assert complete(["card", "add", "WEB", "t", "--kind", ""]) == ["task", "epic"]
    assert "in_review" in complete(["card", "move", "WEB-1", ""])
    assert complete(["worktree", "le"]) == ["leave"]  # a local command's own parser
    assert complete(["completion", ""])[:3] == ["bash", "fish", "zsh"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_the_other_scripts_name_every_command(shell: str) -> None:
    text = script(shell)
    for path in command_spec():
        if path:
            assert path in text, (shell, path)
    binary = shutil.which(shell)
    if binary is not None:  # a syntax check where the shell is installed
        assert subprocess.run([binary, "-n"], input=text, text=True).returncode == 0


def test_lb_completion_prints_the_script() -> None:
    got = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "completion", "bash"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 0 and got.stdout == script("bash")
