"""The OpenAPI 3.1 document, built from the same operation table the router uses."""

from __future__ import annotations

from typing import Any

from laneboard import __version__
from laneboard.server import schemas as S
from laneboard.server.api import OPS, Op

REASONS = {
    200: "OK",
    201: "Created",
    401: "A bearer token is required or was refused",
    403: "The credential may not do this",
    404: "Not found",
    409: "Refused by the board's rules (CLAIM_CONFLICT, ILLEGAL_TRANSITION, ...)",
    422: "Bad input",
    503: "The store is unreachable",
}


def _error(code: int) -> dict[str, Any]:
    return {
        "description": REASONS[code],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _operation(op: Op) -> dict[str, Any]:
    params = []
    for p in op.params:
        schema = p.schema
        if p.repeat:
            schema = {"type": "array", "items": p.schema}
        entry: dict[str, Any] = {
            "name": p.name,
            "in": p.where,
            "required": p.required,
            "schema": schema,
        }
        if p.repeat:
            entry.update(style="form", explode=True)
        if p.description:
            entry["description"] = p.description
        params.append(entry)
    ok: dict[str, Any] = {"description": REASONS[op.status], "content": {"application/json": {}}}
    if op.op_id == "events":
        ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    responses: dict[str, Any] = {str(op.status): ok}
    for code in (401, *op.errors):
        responses[str(code)] = _error(code)
    out: dict[str, Any] = {
        "operationId": op.op_id,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": params,
        "responses": responses,
    }
    if op.body is not None:
        out["requestBody"] = {
            "required": op.method != "PATCH" and bool(op.body.get("required")),
            "content": {"application/json": {"schema": op.body}},
        }
    return out


def document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for op in OPS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "laneboard",
            "version": __version__,
            "description": "The laneboard board API. Loopback callers act as the local "
            "human; any other caller sends Authorization: Bearer <token>.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": S.ERROR},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }
