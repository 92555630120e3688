"""Request parsing and validation shared by the API, the dashboard and MCP.

Request bodies are checked against the same JSON Schemas the OpenAPI document
publishes, so the document and the behaviour cannot drift apart.
"""

from __future__ import annotations

import json
import re
from typing import Any

from laneboard.errors import LaneboardError, bad_input

MAX_INT = 2**53
REF_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]{0,9}-[1-9][0-9]{0,15}|[1-9][0-9]{0,15})$")
PROJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,199}$")


def clean_text(value: str, where: str) -> str:
    """Reject text the stores cannot hold (NUL, lone surrogates)."""
    if "\x00" in value:
        raise bad_input(f"{where} contains a NUL character", f"remove it from {where}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_input(f"{where} is not valid UTF-8 text", f"send {where} as UTF-8") from None
    return value


def validate(schema: dict[str, Any], value: Any, where: str = "body") -> Any:
    """Check ``value`` against a small JSON Schema subset; one clear error or the value."""
    t = schema.get("type")
    if isinstance(t, list) and value is None and "null" in t:
        return None
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(str(x) for x in schema["enum"])
        raise bad_input(f"{where} is {value!r}", f"use one of: {choices}")
    if t == "object":
        if not isinstance(value, dict):
            raise bad_input(f"{where} must be a JSON object", f"send {where} as {{...}}")
        props: dict[str, Any] = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                raise bad_input(f"{where}.{name} is missing", f"include {name}")
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            clean_text(k, f"{where} key")
            if k in props:
                value[k] = validate(props[k], v, f"{where}.{k}")
            elif extra is False:
                raise bad_input(
                    f"{where}.{k} is not a known field", f"known fields: {', '.join(sorted(props))}"
                )
        return value
    if isinstance(t, list):  # e.g. ["string", "null"]
        rest = [x for x in t if x != "null"]
        return validate({**schema, "type": rest[0]}, value, where)
    if t == "string":
        if not isinstance(value, str):
            raise bad_input(f"{where} must be a string", f"send {where} as text")
        clean_text(value, where)
        if len(value) > schema.get("maxLength", 1_000_000):
            raise bad_input(f"{where} is too long", f"keep {where} under {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            raise bad_input(f"{where} is empty", f"give a non-empty {where}")
        return value
    if t == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_input(f"{where} must be an integer", f"send {where} as a whole number")
        lo, hi = schema.get("minimum", -MAX_INT), schema.get("maximum", MAX_INT)
        if not lo <= value <= hi:
            raise bad_input(f"{where} is {value}", f"use a number from {lo} to {hi}")
        return value
    if t == "boolean":
        if not isinstance(value, bool):
            raise bad_input(f"{where} must be true or false", f"send {where} as a boolean")
        return value
    if t == "array":
        if not isinstance(value, list):
            raise bad_input(f"{where} must be a list", f"send {where} as [...]")
        if len(value) > schema.get("maxItems", 1000):
            raise bad_input(f"{where} has too many items", f"send at most {schema['maxItems']}")
        items = schema.get("items")
        return [validate(items, v, f"{where}[{i}]") if items else v for i, v in enumerate(value)]
    if "oneOf" in schema:
        errors = []
        for option in schema["oneOf"]:
            try:
                return validate(option, value, where)
            except LaneboardError as err:
                errors.append(err.message)
        raise bad_input(f"{where} matches no allowed shape ({errors[0]})", "see the API document")
    return value


def parse_json(raw: bytes, schema: dict[str, Any] | None) -> dict[str, Any]:
    if not raw.strip():
        value: Any = {}
    else:
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad_input(
                f"the request body is not valid JSON ({exc})".replace("\n", " "),
                "send a JSON object with Content-Type: application/json",
            ) from None
    if schema is None:
        schema = {"type": "object"}
    out = validate(schema, value)
    assert isinstance(out, dict)
    return out


def card_ref(raw: str) -> str:
    """A card reference from a path: ``WEB-12`` or a numeric id. Anything else is 404."""
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


def query_int(raw: str | None, name: str, default: int, lo: int, hi: int) -> int:
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"-?[0-9]{1,18}", raw):
        raise bad_input(f"query {name}={raw[:40]!r} is not a whole number", f"pass {name}=N")
    v = int(raw)
    if not lo <= v <= hi:
        raise bad_input(f"query {name}={v} is out of range", f"use {lo} to {hi}")
    return v


def query_bool(raw: str | None, name: str) -> bool:
    if raw is None or raw == "":
        return False
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise bad_input(f"query {name}={raw[:40]!r} is not a boolean", f"pass {name}=true or false")


def query_text(raw: str | None, name: str) -> str | None:
    if raw is None or raw == "":
        return None
    clean_text(raw, f"query {name}")
    if len(raw) > 500:
        raise bad_input(f"query {name} is too long", f"keep {name} under 500 characters")
    return raw
