"""Entry point of ``lb``: dispatch by command words, building only the invoked parser.

The words on the command line are looked up in ``laneboard.ops.index``: an operation's
sub-command is generated from its declaration (``cli.generated``) and runs locally or,
with ``LANEBOARD_URL`` set, against a remote board (``cli.remote``); a local command's
module registers its own parsers. Nothing else is imported and no other parser is built;
the full list of commands is built from the index only for ``lb --help`` and errors.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from laneboard import __version__
from laneboard.ops import index

GLOBAL_WITH_VALUE = ("--db",)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error USAGE: {message} — see: {self.prog} --help\n")


def root_parser() -> tuple[argparse.ArgumentParser, Any]:
    parser = Parser(prog="lb", description="laneboard: a board that agents work and humans steer.")
    parser.add_argument("--version", action="version", version=f"laneboard {__version__}")
    parser.add_argument(
        "--db",
        help="database URL or SQLite path (default: LANEBOARD_DATABASE_URL, "
        "then the XDG data directory); wins over LANEBOARD_URL",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    return parser, sub


def command_words(argv: Sequence[str]) -> list[str]:
    """The command words (``card``, ``get``) among the arguments, up to two."""
    words: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--":
            break
        if arg.startswith("-"):
            skip = not words and arg in GLOBAL_WITH_VALUE
            continue
        words.append(arg)
        if len(words) == 2 or words[0] not in index.GROUPS:
            break
    return words


def populate(sub: Any, words: list[str]) -> None:
    """Add the parsers these words need: the invoked one in full, else one-line stubs."""
    from laneboard.ops.table import by_words

    first = words[0] if words else None
    if first in index.BARE and " ".join(words[:2]) not in index.OPS:
        importlib.import_module(index.BARE[first]).register(sub)  # lb run …, lb orchestrate …
        return
    if first in index.OPS:
        from laneboard.cli.generated import add_parser

        add_parser(sub, by_words(first), first)
    elif first in index.GROUPS:
        group = sub.add_parser(first, help=index.GROUPS[first], description=index.GROUPS[first])
        actions = group.add_subparsers(
            dest="action", metavar="ACTION", required=True, parser_class=Parser
        )
        key = " ".join(words[:2])
        if key in index.OPS:
            from laneboard.cli.generated import add_parser

            add_parser(actions, by_words(key), words[1])
        else:
            for action, summary in index.actions(first).items():
                actions.add_parser(action, help=summary)
    elif first in index.LOCAL:
        importlib.import_module(index.LOCAL[first][0]).register(sub)
    else:  # the list of commands, for lb --help and an unknown word
        for word, summary in index.top_words().items():
            sub.add_parser(word, help=summary)


def not_utf8(argv: Sequence[str]) -> int | None:
    """The 1-based position of the first argument that is not valid UTF-8, if any."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return i
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    bad = not_utf8(args_list)
    if bad is not None:
        sys.stderr.write(
            f"error BAD_INPUT: argument {bad} is not valid UTF-8 — "
            "pass every argument as UTF-8 text (check the terminal's locale)\n"
        )
        return 2
    parser, sub = root_parser()
    words = command_words(args_list)
    if words or "--version" not in args_list:
        populate(sub, words)
    args = parser.parse_args(args_list)
    args.words = words
    op = getattr(args, "_op", None)
    if op is not None:
        return run_op(op, args)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return run_local(func, args)


def run_op(op: Any, args: argparse.Namespace) -> int:
    from laneboard.cli.generated import fail, run
    from laneboard.errors import LaneboardError

    try:
        runner = make_runner(args)
    except LaneboardError as err:
        return fail(err, bool(getattr(args, "json", False)))
    try:
        return run(op, args, runner)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def make_runner(args: argparse.Namespace) -> Any:
    """Remote when ``LANEBOARD_URL`` is set (and no ``--db``), else the local database."""
    from laneboard.cli.identity import remote_url

    url = remote_url()
    if url is not None and args.db is None:
        from laneboard.cli.remote import RemoteRunner

        return RemoteRunner(url)
    from laneboard.cli.local import LocalRunner

    return LocalRunner(args.db)


def run_local(func: Any, args: argparse.Namespace) -> int:
    from laneboard.cli.common import Context, fail
    from laneboard.errors import LaneboardError

    ctx = Context(args)
    try:
        return int(func(ctx) or 0)
    except LaneboardError as err:
        return fail(err, ctx.json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
