"""The operation table itself: the index agrees with the declarations, every declaration
is complete, and every command — table or local — has a summary, a description, an
example and help for every argument."""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from laneboard.board.authority import Caller
from laneboard.cli.main import Parser, populate, root_parser
from laneboard.ops import index
from laneboard.ops.spec import KINDS
from laneboard.ops.table import all_ops, by_words
from laneboard.ops.validate import params_schema


def test_the_index_names_every_declaration_and_nothing_else() -> None:
    declared = {" ".join(op.words): op for op in all_ops()}
    expected = {
        key: (next(m for m in index.MODULES if op in importlib.import_module(m).OPS), op.summary)
        for key, op in declared.items()
    }
    assert expected == index.OPS, "copy these lines into laneboard/ops/index.py"
    for key in index.OPS:
        assert by_words(key).words == tuple(key.split(" "))
    groups = {op.words[0] for op in all_ops() if len(op.words) == 2}
    assert set(index.GROUPS) == groups
    assert not set(index.LOCAL) & set(index.top_words()) - set(index.LOCAL)
    assert not set(index.LOCAL) & {op.words[0] for op in all_ops()}


def test_every_declaration_is_complete_and_unique() -> None:
    ops = all_ops()
    for field in ("name", "words", "tool"):
        values = [getattr(op, field) for op in ops]
        assert len(values) == len(set(values)), field
    op_ids = [r.op_id for op in ops for r in op.routes]
    assert len(op_ids) == len(set(op_ids))
    for op in ops:
        assert isinstance(op.caller, Caller), op.name
        assert op.summary and op.summary == op.summary.strip(), op.name
        assert op.summary[0].islower() and not op.summary.endswith("."), op.name
        assert "\n" not in op.summary and len(op.summary) <= 72, op.name
        assert len(op.description) >= 40, op.name
        assert op.examples and all(e.startswith("lb " + " ".join(op.words)) for e in op.examples)
        assert op.routes and op.tool, f"{op.name} lacks a surface"
        assert not (op.read_only and op.destructive), op.name
        assert op.result.get("type") in ("object", "array"), op.name
        if op.tool_key:
            assert op.result["type"] == "array", op.name
        else:
            assert op.result["type"] == "object", op.name
        for p in op.params:
            assert p.kind in KINDS and p.help, (op.name, p.name)
            assert p.http in ("path", "query", "body", "header"), (op.name, p.name)
        for r in op.routes:
            for name in re.findall(r"{(\w+)}", r.path):
                assert op.param(name), (op.name, name)
            assert r.method in ("GET", "POST", "PATCH", "DELETE"), op.name
            if op.read_only:
                assert r.method == "GET", op.name
        schema = params_schema(op)
        assert all(v.get("description") for v in schema["properties"].values()), op.name


def parser_for(words: list[str]) -> argparse.ArgumentParser:
    """The parser ``lb`` builds for these command words (nothing else is built)."""
    parser, sub = root_parser()
    populate(sub, words)
    here: argparse.ArgumentParser = parser
    for word in words:
        subs = [a for a in here._actions if isinstance(a, argparse._SubParsersAction)]
        here = subs[0].choices[word]
    return here


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [path]
    out = []
    for word, child in subs[0].choices.items():
        out += leaves(child, (*path, word))
    return out


def local_commands() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for word, (module, _summary, _reason) in index.LOCAL.items():
        parser = Parser(prog="lb")
        sub = parser.add_subparsers(parser_class=Parser)
        importlib.import_module(module).register(sub)
        out += leaves(sub.choices[word], (word,))
    return out


COMMANDS = [op.words for op in all_ops()] + local_commands()


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w))
def test_every_command_has_a_description_an_example_and_help_for_every_argument(
    words: tuple[str, ...],
) -> None:
    parser = parser_for(list(words))
    text = parser.format_help()
    assert parser.description and len(parser.description) >= 40, text
    assert parser.epilog and parser.epilog.startswith("example"), text
    assert f"\n  lb {' '.join(words)}" in parser.epilog, text
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, (words, action.dest)
    # the summary shown in the parent's list
    parent = parser_for(list(words[:-1])) if len(words) > 1 else None
    if parent is not None:
        assert f"  {words[-1]}" in parent.format_help()


def test_the_root_help_lists_every_command_with_its_summary() -> None:
    parser, sub = root_parser()
    populate(sub, [])
    text = parser.format_help()
    for word, summary in index.top_words().items():
        assert word in text and summary[:30] in text.replace("\n", " ").replace("  ", " ")
