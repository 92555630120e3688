"""Entry point. Command modules register their sub-commands; each imports lazily."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from laneboard import __version__
from laneboard.errors import LaneboardError

# each module has register(subparsers); keep their top-level imports light
COMMAND_MODULES = (
    "laneboard.cli.board_cmds",
    "laneboard.cli.events_cmds",
    "laneboard.cli.loop_cmds",
    "laneboard.cli.doctor_cmds",
    "laneboard.cli.demo_cmds",
    "laneboard.cli.agents_cmds",
    "laneboard.cli.schedule_cmds",
    "laneboard.cli.serve_cmds",
    "laneboard.cli.token_cmds",
    "laneboard.cli.worktree_cmds",
)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error USAGE: {message} — see: {self._command_prog()} --help\n")

    def _command_prog(self) -> str:
        """The deepest command named on the command line (its own --help is the useful one)."""
        import sys

        here: argparse.ArgumentParser = self
        for word in sys.argv[1:]:
            if word.startswith("-"):
                continue
            subs = [a for a in here._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs or word not in subs[0].choices:
                break
            here = subs[0].choices[word]
        return here.prog


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lb", description="laneboard: a board that agents work and humans steer.")
    parser.add_argument("--version", action="version", version=f"laneboard {__version__}")
    parser.add_argument(
        "--db",
        help="database URL or SQLite path (default: LANEBOARD_DATABASE_URL, "
        "then the XDG data directory)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from laneboard.cli.common import Context, fail

    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
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
