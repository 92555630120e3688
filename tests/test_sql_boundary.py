"""The store is the only layer that speaks SQL.

Every module of the package outside ``laneboard.store`` is parsed; none may hold a string
that reads as SQL, nor call the raw statement primitives of a transaction
(``Tx.all/one/scalar/run``) or of a store (``Store.query``). Those primitives belong to
the store's query modules, which expose named queries instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import laneboard
from laneboard.store.tx import Tx

PACKAGE = Path(laneboard.__file__).resolve().parent
STORE = PACKAGE / "store"
RAW = frozenset({"all", "one", "scalar", "run"})

# Upper-case SQL clauses, or a column compared with a ``?`` placeholder: prose and
# messages do not read like this, statements and their fragments always do.
SQL = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\s"
    r"|\b(INSERT INTO|DELETE FROM|ORDER BY|GROUP BY|RETURNING|ON CONFLICT|IS (NOT )?NULL)\b"
    r"|\bUPDATE \w+ SET\b|\bSELECT .* FROM\b|\bFROM \w+ WHERE\b"
    r"|\w+ (=|<>|<=|>=|<|>|LIKE|IN) \(?\?"
)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _is_tx_annotation(ann: ast.expr | None) -> bool:
    if isinstance(ann, ast.Name):
        return ann.id == "Tx"
    if isinstance(ann, ast.Attribute):
        return ann.attr == "Tx"
    if isinstance(ann, ast.Constant):
        return ann.value == "Tx"
    return False


def _tx_names(tree: ast.AST) -> set[str]:
    """Names that hold a transaction: ``tx``, ``Tx``-annotated, or bound by read()/write()."""
    names = {"tx"}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _is_tx_annotation(node.annotation):
            names.add(node.arg)
        elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            call = node.context_expr
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("read", "write")
            ):
                names.add(node.optional_vars.id)
    return names


def _is_store(expr: ast.expr) -> bool:
    name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")
    return "store" in str(name)


def violations(source: str, where: str) -> list[str]:
    """Each string that reads as SQL and each raw primitive call in ``source``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    txs = _tx_names(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and SQL.search(node.value):
                out.append(f"{where}:{node.lineno}: SQL text {node.value[:60]!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            recv, attr = node.func.value, node.func.attr
            if attr in RAW and isinstance(recv, ast.Name) and recv.id in txs:
                out.append(f"{where}:{node.lineno}: raw statement {recv.id}.{attr}(...)")
            elif attr == "query" and _is_store(recv):
                out.append(f"{where}:{node.lineno}: raw statement {ast.unparse(recv)}.query(...)")
    return out


def _outside_store() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if STORE not in p.parents]


def test_no_sql_outside_the_store() -> None:
    modules = _outside_store()
    assert len(modules) > 50  # the whole package is scanned, not an empty directory
    found = []
    for path in modules:
        found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    assert found == [], "SQL outside laneboard.store (add a named store query):\n" + "\n".join(
        found
    )


def test_the_scan_finds_the_sql_it_forbids() -> None:
    """The detector is exercised on the store itself and on each shape it must catch."""
    in_store = violations((STORE / "q_queue.py").read_text(encoding="utf-8"), "q_queue.py")
    assert any("SQL text" in v for v in in_store)
    samples = {
        "def f(tx):\n    return tx.one(q, (1,))\n": "raw statement tx.one",
        "def f(t: Tx):\n    t.run(sql)\n": "raw statement t.run",
        "def f(s):\n    with s.write() as w:\n        w.scalar(x)\n": "raw statement w.scalar",
        "def f(self):\n    self.store.query(q)\n": "raw statement self.store.query",
        'Q = "SELECT id FROM cards"\n': "SQL text",
        'Q = f"UPDATE lanes SET {cols} WHERE id = ?"\n': "SQL text",
        'Q = " AND card_id = ?"\n': "SQL text",
        'Q = "id > ? " + " ORDER BY id"\n': "SQL text",
    }
    for source, expected in samples.items():
        got = violations(source, "sample")
        assert any(expected in v for v in got), (source, got)
    prose = 'def f():\n    """Select the cards."""\n    return "select a card, then update it"\n'
    assert violations(prose, "prose") == []
    assert violations("import subprocess\nsubprocess.run(['git'])\n", "git") == []


def test_each_named_query_is_defined_once() -> None:
    """Query mixins compose into ``Tx``: a name defined twice would silently shadow one."""
    seen: dict[str, str] = {}
    clash = []
    for cls in Tx.__mro__:
        if cls is object:
            continue
        for name, value in vars(cls).items():
            if name.startswith("__") or not callable(value):
                continue
            if name in seen:
                clash.append(f"{name}: {seen[name]} and {cls.__name__}")
            seen[name] = cls.__name__
    assert clash == []
    assert {"queue_rows", "lane_rows", "schedule_rows", "token_rows", "patrol_mark"} <= set(seen)
