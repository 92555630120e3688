"""A sub-command with a one-line summary, a description and an example in its ``--help``."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any


def add_verb(sub: Any, name: str, summary: str, description: str, example: str) -> Any:
    """``sub.add_parser`` whose help shows ``description`` and, at the end, ``example``."""
    paragraphs = [textwrap.fill(" ".join(p.split()), 78) for p in description.split("\n\n")]
    return sub.add_parser(
        name,
        help=summary,
        description="\n\n".join([summary[:1].upper() + summary[1:] + ".", *paragraphs]),
        epilog="example:\n  " + "\n  ".join(example.strip().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")
