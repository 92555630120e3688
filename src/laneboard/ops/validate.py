"""One parameter schema per operation, and the check every surface runs against it.

``params_schema(op)`` is the JSON Schema of an operation's parameters: REST bodies, MCP
tool arguments and remote-mode calls are all checked with ``check`` against it (REST
query and path values are converted by kind first), so a bad value gets the same one
line on every surface. Stdlib only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from laneboard.errors import LaneboardError, bad_input
from laneboard.ops.spec import Op, Param, Params

MAX_INT = 2**53
MAX_DEPTH = 32  # JSON nesting accepted in any request
MAX_BODY = 4 * 1024 * 1024  # bytes
REF_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]{0,9}-[1-9][0-9]{0,15}|[1-9][0-9]{0,15})$")
PROJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,199}$")


def s(max_length: int = 500, min_length: int = 0) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "minLength": min_length}


CRITERION: dict[str, Any] = {
    "oneOf": [
        s(5000, 1),
        {
            "type": "object",
            "properties": {"id": s(40), "text": s(5000, 1)},
            "required": ["text"],
            "additionalProperties": False,
        },
    ]
}

EVIDENCE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": s(5000, 1),
        "exit_code": {"type": "integer", "minimum": -1000, "maximum": 1000},
        "digest": s(200),
        "summary": s(20_000),
        "log_path": {"type": ["string", "null"], "maxLength": 4000},
    },
    "required": ["command", "exit_code"],
    "additionalProperties": False,
}

_KIND_SCHEMA: dict[str, dict[str, Any]] = {
    "text": {"type": "string", "maxLength": 500},
    "ref": {"type": "string", "maxLength": 40, "minLength": 1},
    "project": {"type": "string", "maxLength": 200, "minLength": 1},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "texts": {"type": "array", "items": s(500, 1), "maxItems": 100},
    "object": {"type": "object"},
    "evidence": {"type": "array", "items": EVIDENCE, "maxItems": 200},
    "criteria": {"type": "array", "items": CRITERION, "maxItems": 100},
}


def param_schema(p: Param) -> dict[str, Any]:
    """The JSON Schema of one parameter's value (without null)."""
    out: dict[str, Any] = {**_KIND_SCHEMA[p.kind], **(p.schema or {})}
    if p.choices:
        if p.kind in ("texts",):
            out["items"] = {"type": "string", "enum": list(p.choices)}
        else:
            out["enum"] = list(p.choices)
    if p.help:
        out["description"] = p.help
    if p.default is not None:
        out["default"] = p.default
    return out


def nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(schema)
    t = out.get("type")
    if isinstance(t, str):
        out["type"] = [t, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    elif "oneOf" in out:
        out["oneOf"] = [*out["oneOf"], {"type": "null"}]
    return out


def wire_params(op: Op) -> tuple[Param, ...]:
    """The parameters a caller sends (everything but command-line-only flags)."""
    return tuple(p for p in op.params if not p.cli_only)


def params_schema(op: Op, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The JSON Schema of an operation's parameters (``only``: a subset of them)."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in wire_params(op):
        if only is not None and p.name not in only:
            continue
        sch = param_schema(p)
        props[p.name] = sch if p.required else nullable(sch)
        if p.required:
            required.append(p.name)
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def check(op: Op, raw: Mapping[str, Any]) -> Params:
    """Validate a call's parameters; absent ones get their declared default."""
    if not isinstance(raw, Mapping):
        raise bad_input("the parameters must be a JSON object", "send {name: value, ...}")
    known = {p.name: p for p in wire_params(op)}
    out: Params = {}
    for name, value in raw.items():
        clean_text(str(name), "a parameter name")
        p = known.get(name)
        if p is None:
            raise bad_input(
                f"{op.name} has no parameter {str(name)[:60]!r}",
                f"its parameters are: {', '.join(sorted(known)) or '(none)'}",
            )
        if value is None and not p.required:
            out[name] = None
            continue
        out[name] = validate(param_schema(p), value, name)
        _check_reference(p, out[name])
    for p in known.values():
        if p.name not in out:
            if p.required:
                raise bad_input(f"{p.name} is missing", f"pass {_how(p)}")
            if p.default is not None:
                out[p.name] = p.default
    return out


def _how(p: Param) -> str:
    return p.flag or p.metavar or p.name.upper() if p.cli else p.name


def _check_reference(p: Param, value: Any) -> None:
    if p.kind == "ref":
        card_ref(value)
    elif p.kind == "project":
        project_ref(value)


def card_ref(raw: str) -> str:
    """A card reference: ``WEB-12`` or a numeric id. Anything else is ``NOT_FOUND``."""
    if not REF_RE.match(raw):
        raise LaneboardError(
            "NOT_FOUND", f"card {raw[:60]!r} does not exist", "use a reference like WEB-12"
        )
    return raw


def project_ref(raw: str) -> str:
    if not PROJECT_RE.match(raw):
        raise LaneboardError(
            "NOT_FOUND", f"project {raw[:60]!r} does not exist", "use a project key like WEB"
        )
    return raw


def clean_text(value: str, where: str) -> str:
    """Reject text the stores cannot hold (NUL, lone surrogates)."""
    if "\x00" in value:
        raise bad_input(f"{where} contains a NUL character", f"remove it from {where}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_input(f"{where} is not valid UTF-8 text", f"send {where} as UTF-8") from None
    return value


def validate(schema: Mapping[str, Any], value: Any, where: str = "body", depth: int = 0) -> Any:
    """Check ``value`` against a small JSON Schema subset; one clear error or the value."""
    if depth > MAX_DEPTH:
        raise bad_input(f"{where} is nested too deeply", f"keep JSON under {MAX_DEPTH} levels")
    t = schema.get("type")
    if isinstance(t, list) and value is None and "null" in t:
        return None
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(str(x) for x in schema["enum"] if x is not None)
        shown = value if not isinstance(value, str) else value[:60]
        raise bad_input(f"{where} is {shown!r}", f"use one of: {choices}")
    if isinstance(t, list):  # e.g. ["string", "null"]
        rest = [x for x in t if x != "null"]
        return validate({**schema, "type": rest[0]}, value, where, depth)
    check_fn = _CHECKS.get(str(t))
    if check_fn is not None:
        return check_fn(schema, value, where, depth)
    if "oneOf" in schema:
        return _one_of(schema, value, where, depth)
    return _bounded(value, where, depth)


def _object(schema: Mapping[str, Any], value: Any, where: str, depth: int) -> Any:
    if not isinstance(value, dict):
        raise bad_input(f"{where} must be a JSON object", f"send {where} as {{...}}")
    props: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            raise bad_input(f"{where}.{name} is missing", f"include {name}")
    extra = schema.get("additionalProperties", True)
    out = {}
    for k, v in value.items():
        clean_text(k, f"{where} key")
        if k in props:
            out[k] = validate(props[k], v, f"{where}.{k}", depth + 1)
        elif extra is False:
            raise bad_input(
                f"{where}.{k[:60]} is not a known field",
                f"known fields: {', '.join(sorted(props))}",
            )
        else:
            out[k] = _bounded(v, f"{where}.{k}", depth + 1)
    return out


def _string(schema: Mapping[str, Any], value: Any, where: str, _depth: int) -> Any:
    if not isinstance(value, str):
        raise bad_input(f"{where} must be a string", f"send {where} as text")
    clean_text(value, where)
    if len(value) > schema.get("maxLength", 1_000_000):
        raise bad_input(f"{where} is too long", f"keep {where} under {schema['maxLength']}")
    if len(value) < schema.get("minLength", 0):
        raise bad_input(f"{where} is empty", f"give a non-empty {where}")
    return value


def _integer(schema: Mapping[str, Any], value: Any, where: str, _depth: int) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_input(f"{where} must be an integer", f"send {where} as a whole number")
    lo, hi = schema.get("minimum"), schema.get("maximum")  # ids are the board's to judge
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        shown = (
            f"from {lo} to {hi}"
            if lo is not None and hi is not None
            else (f"of at least {lo}" if lo is not None else f"of at most {hi}")
        )
        raise bad_input(f"{where} is {value}", f"use a number {shown}")
    return value


def _number(schema: Mapping[str, Any], value: Any, where: str, _depth: int) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise bad_input(f"{where} must be a number", f"send {where} as a number")
    lo, hi = schema.get("minimum", -MAX_INT), schema.get("maximum", MAX_INT)
    if not lo <= value <= hi:
        raise bad_input(f"{where} is {value}", f"use a number from {lo} to {hi}")
    return float(value)


def _boolean(_schema: Mapping[str, Any], value: Any, where: str, _depth: int) -> Any:
    if not isinstance(value, bool):
        raise bad_input(f"{where} must be true or false", f"send {where} as a boolean")
    return value


def _array(schema: Mapping[str, Any], value: Any, where: str, depth: int) -> Any:
    if not isinstance(value, list):
        raise bad_input(f"{where} must be a list", f"send {where} as [...]")
    if len(value) > schema.get("maxItems", 1000):
        raise bad_input(f"{where} has too many items", f"send at most {schema['maxItems']}")
    items = schema.get("items")
    return [
        validate(items, v, f"{where}[{i}]", depth + 1) if items else _bounded(v, where, depth + 1)
        for i, v in enumerate(value)
    ]


def _one_of(schema: Mapping[str, Any], value: Any, where: str, depth: int) -> Any:
    errors = []
    for option in schema["oneOf"]:
        try:
            return validate(option, value, where, depth)
        except LaneboardError as err:
            errors.append(err.message)
    raise bad_input(f"{where} matches no allowed shape ({errors[0]})", "see the API document")


def _bounded(value: Any, where: str, depth: int) -> Any:
    """Free-form JSON (``meta``): any shape, but bounded in depth and clean text."""
    if depth > MAX_DEPTH:
        raise bad_input(f"{where} is nested too deeply", f"keep JSON under {MAX_DEPTH} levels")
    if isinstance(value, str):
        return clean_text(value, where)
    if isinstance(value, list):
        return [_bounded(v, where, depth + 1) for v in value]
    if isinstance(value, dict):
        return {
            clean_text(k, f"{where} key"): _bounded(v, where, depth + 1) for k, v in value.items()
        }
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value <= MAX_INT:
        raise bad_input(f"{where} holds a number beyond 2^53", "send smaller numbers")
    return value


_CHECKS = {
    "object": _object,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": _boolean,
    "array": _array,
}


def loads(raw: bytes | str, what: str = "the request body") -> Any:
    """Parse JSON text with the size and nesting bounds; ``BAD_INPUT`` otherwise."""
    if len(raw) > MAX_BODY:
        raise bad_input(f"{what} is larger than {MAX_BODY} bytes", "send a smaller document")
    _shallow(raw, what)
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise bad_input(
            f"{what} is not valid JSON ({exc})".replace("\n", " ")[:300],
            "send a JSON object with Content-Type: application/json",
        ) from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _shallow(raw: bytes | str, what: str) -> None:
    """Refuse deep nesting before the parser recurses into it."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        if m.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise bad_input(
                    f"{what} is nested more than {MAX_DEPTH} levels deep",
                    "send a flatter JSON document",
                )
        else:
            depth -= 1
