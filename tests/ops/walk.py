"""Calling any operation on any surface from its declaration: a command line, a REST
request or an MCP tool call built from the same parameters."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laneboard.ops.spec import Op, Params, Route
from laneboard.ops.table import all_ops, by_name
from laneboard.server.api import BASE, location, on_route


def argv_of(op: Op, params: Params, files: Path) -> list[str]:
    """The ``lb`` command line that calls ``op`` with ``params`` (and ``--json``); a job
    definition is written to a file under ``files``."""
    out = list(op.words)
    for p in op.params:
        if p.flag is None and p.name in params:
            if p.cli_type == "jobfile":
                path = files / f"job-{len(list(files.iterdir()))}.json"
                path.write_text(json.dumps(params[p.name]))
                out.append(str(path))
            else:
                out.append(str(params[p.name]))
    for p in op.params:
        if p.flag is None or p.name not in params:
            continue
        value = params[p.name]
        if p.kind == "bool":
            if value:
                out.append(p.flag)
        elif p.kind == "object":
            out += [p.flag, json.dumps(value)]
        elif p.is_list:
            for item in value:
                out += [
                    p.flag,
                    item if isinstance(item, str) else f"{item['exit_code']}:{item['command']}",
                ]
        elif p.cli_type == "lifetime":
            out += [p.flag, f"{value}s"]
        else:
            out += [p.flag, str(value)]
    return [*out, "--json"]


def route_of(op: Op, params: Params) -> Route:
    """The op's route that carries these parameters (one whose fixed values they match)."""
    for r in sorted(op.routes, key=lambda r: -len(r.fixed)):
        if all(params.get(k) == v for k, v in r.fixed.items()) and all(
            p.name in params for p in op.params if on_route(p, r) and location(p, r) == "path"
        ):
            return r
    raise AssertionError(f"no route of {op.name} fits {sorted(params)}")


def request_of(op: Op, params: Params) -> tuple[str, str, dict[str, Any]]:
    """(method, url, httpx keyword arguments) of a REST call of ``op``."""
    r = route_of(op, params)
    path = r.path
    query: list[tuple[str, str]] = []
    headers: dict[str, str] = {}
    body: dict[str, Any] = {}
    for p in op.params:
        if p.name not in params or not on_route(p, r):
            continue
        value = params[p.name]
        where = location(p, r)
        if where == "path":
            path = path.replace("{" + p.name + "}", str(value))
        elif where == "query":
            values = value if isinstance(value, list) else [value]
            query += [
                (p.on_wire, str(v).lower() if isinstance(v, bool) else str(v)) for v in values
            ]
        elif where == "header":
            headers[p.on_wire] = str(value)
        else:
            body[p.name] = value
    kw: dict[str, Any] = {"params": query, "headers": headers}
    if r.method in ("POST", "PATCH", "PUT", "DELETE"):
        kw["json"] = body  # a write is JSON, even when empty (the web-safety rule)
    return r.method, BASE + path, kw


def tool_args(op: Op, params: Params) -> dict[str, Any]:
    return dict(params)


def every_op() -> list[Op]:
    return list(all_ops())


def op(name: str) -> Op:
    return by_name()[name]


Outcome = str  # "ok" or an error code


def outcome_of_cli(code: int, out: str) -> Outcome:
    if code == 0:
        return "ok"
    return str(json.loads(out)["error"]["code"])


def outcome_of_rest(resp: Any) -> Outcome:
    if resp.status_code < 400:
        return "ok"
    return str(resp.json()["code"])


def outcome_of_tool(res: Any) -> Outcome:
    if not res.is_error:
        return "ok"
    text = res.content[0].text
    assert text.startswith("error "), text
    return str(text[len("error ") :].split(":", 1)[0])


Factory = Callable[[dict[str, Any]], Params]
