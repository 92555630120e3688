"""``lb backup PATH`` (SQLite's online backup) and ``lb migrate --to URL`` (every table)."""

from __future__ import annotations

import os
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.verb import add_verb, json_flag
from laneboard.errors import LaneboardError


def register(sub: Any) -> None:
    p = add_verb(
        sub,
        "backup",
        "copy the SQLite board to a file, safely while it is in use",
        "Uses SQLite's online backup API: the supervisor and the server keep working, "
        "and the file is one consistent snapshot that passed an integrity check. "
        "Restore it by stopping the supervisor and the server and copying it over the "
        "board's file (docs/operations.md). A PostgreSQL board is backed up with "
        "pg_dump.",
        "lb backup ~/backups/board-$(date +%F).db",
    )
    p.add_argument("path", metavar="PATH", help="the backup file to write")
    p.add_argument("--force", action="store_true", help="replace PATH if it exists")
    json_flag(p)
    p.set_defaults(func=cmd_backup)

    p = add_verb(
        sub,
        "migrate",
        "copy the whole board into another database, ids and events intact",
        "Copies every table of the current board (--db, LANEBOARD_DATABASE_URL or the "
        "default SQLite file) into the empty database --to names, keeping every id, "
        "so card references, event ids and cursors stay valid; on PostgreSQL the id "
        "sequences are set past the copied rows. The source is read in one snapshot "
        "and the target written in one transaction. Refused while a supervisor is "
        "running on the board, or when the target already holds a board.",
        "lb migrate --to postgresql://lb@db.internal/laneboard",
    )
    p.add_argument(
        "--to", required=True, metavar="URL", help="the target: postgresql://… or sqlite:///PATH"
    )
    json_flag(p)
    p.set_defaults(func=cmd_migrate)


def _source_url(ctx: Context) -> str:
    from laneboard.store import resolve_url

    return resolve_url(ctx.args.db)


def cmd_backup(ctx: Context) -> int:
    from laneboard.store import open_store, redact_url
    from laneboard.store.q_copy import nonempty, sqlite_backup

    url, dest = _source_url(ctx), os.path.abspath(ctx.args.path)
    if url.startswith(("postgresql://", "postgres://")):
        raise LaneboardError(
            "BAD_INPUT",
            f"the board is on PostgreSQL ({redact_url(url)}); lb backup copies a SQLite board",
            "back it up with pg_dump, or copy it into SQLite with lb migrate --to sqlite:///PATH",
        )
    source = url[len("sqlite:///") :] if url.startswith("sqlite:///") else url
    if not os.path.isfile(source):
        raise LaneboardError(
            "NOT_FOUND", f"there is no board at {source}", "check --db or LANEBOARD_DATABASE_URL"
        )
    if os.path.realpath(dest) == os.path.realpath(source):
        raise LaneboardError(
            "BAD_INPUT", "the backup would overwrite the board itself", "write it somewhere else"
        )
    if os.path.exists(dest) and not ctx.args.force:
        raise LaneboardError(
            "CONFLICT", f"{dest} exists", "choose another PATH, or pass --force to replace it"
        )
    pages = sqlite_backup(source, dest)
    copy = open_store("sqlite:///" + dest, migrate=False)
    try:
        rows = nonempty(copy)
    finally:
        copy.close()
    out = {
        "source": source,
        "backup": dest,
        "pages": pages,
        "bytes": os.path.getsize(dest),
        "rows": rows,
    }
    ctx.out(
        out,
        f"backed up {source} to {dest} ({out['bytes']} bytes, {sum(rows.values())} rows, integrity ok)",
    )
    return 0


def _refuse_live(store: Any) -> None:
    from laneboard.config import load_supervisor_config
    from laneboard.store.q_copy import live_supervisors

    live = live_supervisors(store, load_supervisor_config().time.pool_stale * 1000)
    if live:
        r = live[0]
        raise LaneboardError(
            "SUPERVISOR_RUNNING",
            f"a supervisor is running on this board ({r['machine']}, pid {r['pid']}); what it "
            "writes after the copy would be lost",
            "stop it first (lb supervisor disable, or kill -TERM its pid), then migrate",
        )


def cmd_migrate(ctx: Context) -> int:
    from laneboard.store import open_store, redact_url
    from laneboard.store.q_copy import copy_board, nonempty

    src_url, dst_url = _source_url(ctx), ctx.args.to
    if dst_url == src_url:
        raise LaneboardError("BAD_INPUT", "--to names the board itself", "give another database")
    source = ctx.store
    _refuse_live(source)
    target = open_store(dst_url)
    try:
        full = nonempty(target)
        if full:
            raise LaneboardError(
                "CONFLICT",
                f"{redact_url(dst_url)} already holds a board ({', '.join(sorted(full))})",
                "migrate into an empty database (or a new schema)",
            )
        copied = copy_board(source, target)
        after = nonempty(target)
    finally:
        target.close()
    if after != {k: v for k, v in copied.items() if v}:
        raise LaneboardError(
            "STORE_UNAVAILABLE",
            "the copy's row counts differ from the source",
            "run lb migrate again into an empty database",
        )
    out = {"from": redact_url(src_url), "to": redact_url(dst_url), "rows": copied}
    text = (
        f"copied {sum(copied.values())} rows in {len(copied)} tables to {redact_url(dst_url)}\n"
        f"next: point laneboard at it (LANEBOARD_DATABASE_URL), then run lb supervisor "
        f"enable again so the units use it"
    )
    ctx.out(out, text)
    return 0
