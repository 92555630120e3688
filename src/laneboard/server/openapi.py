"""The OpenAPI 3.1 document, generated from the operation table the router is built from:
one operation per REST route, with its parameters, request body and the typed schema of
its success response (shared shapes are components)."""

from __future__ import annotations

from functools import cache
from typing import Any

from laneboard import __version__
from laneboard.ops import schemas as R
from laneboard.ops.spec import Op, Param, Route
from laneboard.ops.table import all_ops
from laneboard.ops.validate import param_schema, params_schema
from laneboard.server.api import BASE, BODY_METHODS, location, on_route

REASONS = {
    200: "OK",
    201: "Created",
    401: "A bearer token is required or was refused",
    403: "The credential may not do this",
    404: "Not found",
    409: "Refused by the board's rules (CLAIM_CONFLICT, ILLEGAL_TRANSITION, ...)",
    415: "A write needs Content-Type: application/json",
    422: "Bad input",
    503: "The store is unreachable",
}
ERROR = {
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "fix": {"type": "string"},
        "details": {"type": "object"},
    },
    "required": ["code", "message"],
}
_NAMES = {id(schema): name for name, schema in R.NAMED.items()}


def ref(schema: Any) -> Any:
    """The schema with every shared shape replaced by a ``$ref`` to its component."""
    name = _NAMES.get(id(schema))
    if name is not None:
        return {"$ref": f"#/components/schemas/{name}"}
    if isinstance(schema, dict):
        return {k: ref(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [ref(v) for v in schema]
    return schema


def _parameter(p: Param, where: str) -> dict[str, Any]:
    schema = param_schema(p)
    schema.pop("description", None)
    entry: dict[str, Any] = {
        "name": p.name if where == "path" else p.on_wire,
        "in": where,
        "required": where == "path" or (p.required and where != "body"),
        "schema": schema,
        "description": p.help,
    }
    if p.is_list:
        entry.update(style="form", explode=True)
    return entry


def _errors(op: Op) -> tuple[int, ...]:
    # a write also meets the web-safety rules (server/auth.py): 403 and 415
    return (401, 403, 404, 422, 503) if op.read_only else (401, 403, 404, 409, 415, 422, 503)


def operation(op: Op, route: Route) -> dict[str, Any]:
    here = [(p, location(p, route)) for p in op.params if on_route(p, route)]
    body = [p.name for p, where in here if where == "body"]
    ok: dict[str, Any] = {
        "description": REASONS[route.status],
        "content": {"application/json": {"schema": ref(op.result)}},
    }
    if op.name == "events.tail":
        ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    responses: dict[str, Any] = {str(route.status): ok}
    for code in _errors(op):
        responses[str(code)] = {
            "description": REASONS[code],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
    out: dict[str, Any] = {
        "operationId": route.op_id,
        "summary": op.summary,
        "description": op.description
        + f"\n\nCLI: `lb {' '.join(op.words)}`"
        + (f"; MCP tool `{op.tool}`." if op.tool else "."),
        "tags": [route.tag],
        "parameters": [_parameter(p, where) for p, where in here if where != "body"],
        "responses": responses,
    }
    if route.method in BODY_METHODS and body:
        schema = params_schema(op, only=tuple(body))
        out["requestBody"] = {
            "required": bool(schema.get("required")),
            "content": {"application/json": {"schema": ref(schema)}},
        }
    if op.name == "events.tail":
        out["parameters"].append(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "with Accept: text/event-stream, resume after this event",
            }
        )
    return out


@cache
def document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for op in all_ops():
        for route in op.routes:
            paths.setdefault(BASE + route.path, {})[route.method.lower()] = operation(op, route)
    components = {name: ref_inner(schema) for name, schema in R.NAMED.items()}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "laneboard",
            "version": __version__,
            "description": "The laneboard board API, generated from the same operation table "
            "as the lb command line and the MCP tools. Loopback callers act as the local "
            "human; any other caller sends Authorization: Bearer <token>.",
        },
        "paths": paths,
        "components": {
            "schemas": {**components, "Error": ERROR},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def ref_inner(schema: dict[str, Any]) -> dict[str, Any]:
    """A component's own schema, with the other components it uses as references."""
    return {k: ref(v) for k, v in schema.items()}
