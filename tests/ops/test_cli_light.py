"""What a call of ``lb`` loads: only the invoked command's module and parser; in remote
mode nothing of the store and no database driver. And the command line's own refusals:
an argument that is not UTF-8 is one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli_kit import Cli

PROBE = """
import argparse, contextlib, io, json, sys
built = []
init = argparse.ArgumentParser.__init__
def counting(self, *a, **k):
    built.append(k.get("prog"))
    init(self, *a, **k)
argparse.ArgumentParser.__init__ = counting
from laneboard.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # --version, --help
        code = exc.code
mods = sorted(m for m in sys.modules if m.split(".")[0] in
              ("laneboard", "psycopg", "sqlite3", "_sqlite3", "starlette", "mcp", "uvicorn"))
sys.stderr.write(json.dumps({"code": code, "parsers": len(built), "modules": mods}) + "\\n")
"""


def probe(env: dict[str, str], *args: str) -> dict[str, object]:
    got = subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=60
    )
    doc: dict[str, object] = json.loads(got.stderr.splitlines()[-1])
    return doc


@pytest.fixture
def board_cli(tmp_path: Path) -> Iterator[Cli]:
    c = Cli(tmp_path, "socket")
    assert c.local("init", "--project", "WEB", "--path", str(tmp_path)).code == 0
    assert c.local("card", "add", "WEB", "a card").code == 0
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_a_read_builds_one_parser_chain_and_imports_one_command_module(board_cli: Cli) -> None:
    got = probe(board_cli.env, "card", "get", "WEB-1", "--json")
    assert got["code"] == 0
    assert got["parsers"] == 3  # lb, lb card, lb card get: nothing else is built
    mods = set(got["modules"])  # type: ignore[arg-type]
    ops = {m for m in mods if m.startswith("laneboard.ops.")}
    assert ops <= {
        "laneboard.ops.spec", "laneboard.ops.index", "laneboard.ops.table",
        "laneboard.ops.cards", "laneboard.ops.invoke", "laneboard.ops.validate",
        "laneboard.ops.render", "laneboard.ops.schemas", "laneboard.ops.clock",
    }, ops  # fmt: skip
    assert not {m for m in mods if m.startswith("laneboard.cli.") and m.endswith("_cmds")}
    assert not {m for m in mods if m.split(".")[0] in ("starlette", "mcp", "uvicorn")}
    assert not {m for m in mods if m.startswith(("laneboard.server", "laneboard.supervisor"))}


def test_remote_mode_imports_neither_the_store_nor_a_driver(board_cli: Cli) -> None:
    env = board_cli.environ()
    assert "LANEBOARD_DATABASE_URL" not in env
    got = probe(env, "card", "get", "WEB-1", "--json")
    assert got["code"] == 0
    mods = set(got["modules"])  # type: ignore[arg-type]
    assert not {m for m in mods if m.startswith("laneboard.store")}, mods
    assert not {m for m in mods if m.split(".")[0] in ("psycopg", "sqlite3", "_sqlite3")}, mods
    assert "laneboard.cli.remote" in mods and "laneboard.cli.local" not in mods


def test_help_and_version_build_no_command() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    got = probe(env, "--version")
    assert (got["code"], got["parsers"]) == (0, 1)
    mods = set(got["modules"])  # type: ignore[arg-type]
    assert not {m for m in mods if m.startswith("laneboard.ops.") and m != "laneboard.ops.index"}


def test_an_argument_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_DATABASE_URL=f"sqlite:///{tmp_path / 'b.db'}", LC_ALL="C.UTF-8")
    got = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "card", "add", "WEB", b"caf\xe9"],
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 2 and got.stdout == b""
    assert got.stderr.decode() == (
        "error BAD_INPUT: argument 4 is not valid UTF-8 — pass every argument as UTF-8 text "
        "(check the terminal's locale)\n"
    )
    assert not (tmp_path / "b.db").exists()  # refused before anything was opened
