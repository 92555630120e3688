"""``lb completion bash|zsh|fish``: a static completion script generated from the table."""

from __future__ import annotations

import sys
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import Formatter

SHELLS = ("bash", "zsh", "fish")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print a completion script for a shell, generated from the command "
        "table: command words, options and their choices. It is static: nothing runs "
        "when you press TAB.",
        epilog="examples:\n"
        "  lb completion bash > ~/.local/share/bash-completion/completions/lb\n"
        "  lb completion zsh > ~/.zfunc/_lb\n"
        "  lb completion fish > ~/.config/fish/completions/lb.fish",
        formatter_class=Formatter,
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    p.set_defaults(func=cmd_completion)


def cmd_completion(ctx: Context) -> int:
    from laneboard.ops.completion import script

    sys.stdout.write(script(ctx.args.shell))
    return 0
