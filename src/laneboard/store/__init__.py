"""The store: every durable thing lives here. SQLite by default, PostgreSQL by URL."""

from __future__ import annotations

import os

from laneboard.domain.clock import Clock
from laneboard.errors import LaneboardError
from laneboard.store.base import IntegrityError, Row, Store

__all__ = ["IntegrityError", "Row", "Store", "default_sqlite_path", "open_store", "resolve_url"]


def data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "laneboard")


def default_sqlite_path() -> str:
    return os.path.join(data_dir(), "board.db")


def resolve_url(url: str | None = None) -> str:
    """The database location: explicit → ``LANEBOARD_DATABASE_URL`` → the XDG data file."""
    url = url or os.environ.get("LANEBOARD_DATABASE_URL") or ""
    if not url:
        return "sqlite:///" + default_sqlite_path()
    return url


def open_store(
    url: str | None = None, clock: Clock | None = None, *, migrate: bool = True, create: bool = True
) -> Store:
    """Open the board at ``url``. With ``create=False`` a board that was never made there
    (no SQLite file, or no laneboard tables) is refused with ``NOT_FOUND`` and nothing is
    created: only ``lb init`` makes a board."""
    url = resolve_url(url)
    store: Store
    if url.startswith(("postgresql://", "postgres://")):
        from laneboard.store.postgres import PostgresStore

        store = PostgresStore(url, clock)
    elif url.startswith("sqlite:///"):
        from laneboard.store.sqlite import SQLiteStore

        store = SQLiteStore(url[len("sqlite:///") :], clock)
    elif "://" not in url:
        from laneboard.store.sqlite import SQLiteStore

        store = SQLiteStore(url, clock)
    else:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"unsupported database URL {url.split('://')[0]}://…",
            "use postgresql://… or sqlite:///path, or unset LANEBOARD_DATABASE_URL",
        )
    if not create:
        _require_board(store, url)
    if migrate:
        try:
            store.ensure_schema()
        except LaneboardError:
            raise
        except Exception as exc:
            raise LaneboardError(
                "STORE_UNAVAILABLE",
                f"cannot open the board at {redact_url(url)}: {exc}".replace("\n", " "),
                "check LANEBOARD_DATABASE_URL and that the database is reachable",
            ) from exc
    return store


def _require_board(store: Store, url: str) -> None:
    try:
        found = store.exists()
    except LaneboardError:
        raise
    except Exception as exc:
        raise LaneboardError(
            "STORE_UNAVAILABLE",
            f"cannot open the board at {redact_url(url)}: {exc}".replace("\n", " "),
            "check LANEBOARD_DATABASE_URL and that the database is reachable",
        ) from exc
    if not found:
        store.close()
        raise LaneboardError(
            "NOT_FOUND",
            f"no board at {redact_url(url)}",
            "run lb init to make one there, or point --db / LANEBOARD_DATABASE_URL at your board",
        )


def redact_url(url: str) -> str:
    """Hide credentials in a database URL."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
