"""The ``lb`` sub-command of an operation, generated from its declaration.

``add_parser`` builds the argparse parser of one ``Op`` (its summary, description,
examples and one argument per parameter, each with help); ``params_of`` turns the parsed
arguments into the operation's parameters (reading ``-`` from stdin, JSON text, evidence
and job files, making paths absolute) and ``run`` calls it through a runner, local or
remote, and prints one JSON document or its text rendering.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from laneboard.errors import LaneboardError, bad_input
from laneboard.ops.spec import Op, Param, Params, placeholder


class Runner(Protocol):
    def call(self, op: Op, params: Params) -> tuple[Any, dict[str, Any]]: ...


class Formatter(argparse.HelpFormatter):
    """Wraps the description's paragraphs; keeps the lines of examples and actions as they are."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        out = []
        for para in text.split("\n\n"):
            if para.startswith(("examples:", "actions:", "  ")):
                out.append("\n".join(indent + line for line in para.splitlines()))
            else:
                out.append(
                    textwrap.fill(
                        " ".join(para.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                    )
                )
        return "\n\n".join(out)


def _help(p: Param) -> str:
    text = p.help
    if p.required and p.flag:
        text += " (required)"
    elif p.default is not None and p.kind != "bool" and p.default != "":
        text += f" (default: {p.default})"
    return text


def command(
    sub: Any, word: str, summary: str, description: str, examples: tuple[str, ...]
) -> argparse.ArgumentParser:
    """A local command's parser, with the same help layout as the table's commands."""
    parser: argparse.ArgumentParser = sub.add_parser(
        word,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{description}",
        epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
        formatter_class=Formatter,
    )
    return parser


def add_parser(sub: Any, op: Op, word: str) -> argparse.ArgumentParser:
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in op.examples)
    parser: argparse.ArgumentParser = sub.add_parser(
        word,
        help=op.summary,
        description=f"{op.summary[0].upper()}{op.summary[1:]}.\n\n{op.description}",
        epilog=epilog,
        formatter_class=Formatter,
    )
    for p in op.params:
        if p.cli:
            _add_argument(parser, p)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(_op=op)
    return parser


def _add_argument(parser: argparse.ArgumentParser, p: Param) -> None:
    kw: dict[str, Any] = {"help": _help(p), "dest": p.name}
    if p.metavar:
        kw["metavar"] = p.metavar
    elif p.flag is not None and p.kind != "bool" and not p.choices:
        kw["metavar"] = placeholder(p)
    if p.choices:
        kw["choices"] = list(p.choices)
    if p.kind == "bool":
        kw.update(action="store_true", default=None)
    elif p.kind in ("texts", "evidence", "criteria"):
        kw.update(action="append", default=None)
    elif p.kind == "int" and p.cli_type is None:
        kw["type"] = int
    elif p.kind == "float":
        kw["type"] = float
    if p.flag is None:
        del kw["dest"]
        if not p.required:
            kw["nargs"] = "?"
        parser.add_argument(p.name, **kw)
        return
    names = [p.short, p.flag] if p.short else [p.flag]
    if p.required:
        kw["required"] = True
    parser.add_argument(*names, **kw)


def params_of(op: Op, args: argparse.Namespace) -> tuple[Params, Params]:
    """The operation's parameters and the command line's own flags (``cli_only``)."""
    params: Params = {}
    local: Params = {}
    for p in op.params:
        if not p.cli:
            continue
        value = getattr(args, p.name, None)
        if value is None:
            if p.cli_only and p.default is not None:
                local[p.name] = p.default
            continue
        if p.cli_only:
            local[p.name] = value
            continue
        params[p.name] = convert(p, value)
    return params, local


def convert(p: Param, value: Any) -> Any:
    where = p.flag or p.metavar or p.name
    if p.cli_type is not None:
        return CONVERTERS[p.cli_type](value, where)
    if p.stdin and value == "-":
        return sys.stdin.read()
    if p.local_path:
        return os.path.abspath(value)
    if p.kind == "object":
        return _json_object(value, where)
    if p.kind == "evidence":
        return [_evidence(item) for item in value]
    return value


def _json_object(raw: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = getattr(exc, "msg", "too deep")
        raise bad_input(f"{where} is not JSON ({msg})", "pass a JSON object") from None
    if not isinstance(value, dict):
        raise bad_input(f"{where} must be a JSON object", "pass {...}")
    return value


def _evidence(item: str) -> dict[str, Any]:
    code, sep, command = item.partition(":")
    if not sep or not command.strip() or not code.strip().lstrip("-").isdigit():
        raise bad_input(f"evidence {item!r} is not EXIT:COMMAND", "e.g. --evidence '0:pytest -q'")
    return {"command": command.strip(), "exit_code": int(code), "digest": ""}


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _lifetime(raw: str, where: str) -> int:
    text = raw.strip()
    number, unit = text[:-1], text[-1:]
    if unit not in UNITS or not number.isdigit() or not 0 < len(number) < 8 or number[0] == "0":
        raise bad_input(f"{where} {raw!r} is not a lifetime", "use e.g. 30m, 12h or 7d")
    return int(number) * UNITS[unit]


def _job_file(raw: str, _where: str) -> dict[str, Any]:
    from laneboard.ops.schedules import read_job

    return read_job(raw)


CONVERTERS: dict[str, Callable[[str, str], Any]] = {
    "lifetime": _lifetime,
    "jobfile": _job_file,
}


def run(op: Op, args: argparse.Namespace, runner: Runner) -> int:
    as_json = bool(getattr(args, "json", False))
    try:
        params, local = params_of(op, args)
        if op.cli_run is not None:
            return op.cli_run(runner, op, params, local, as_json)
        data, notes = runner.call(op, params)
    except LaneboardError as err:
        return fail(err, as_json)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        text = op.text(data, params, notes)
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return op.exit_code(data) if op.exit_code else 0


def fail(err: LaneboardError, as_json: bool) -> int:
    sys.stderr.write(err.line() + "\n")
    if as_json:
        sys.stdout.write(json.dumps({"error": err.to_dict()}, indent=2, sort_keys=True) + "\n")
    return err.exit_code
