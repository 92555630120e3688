"""Who ``lb`` acts as and which board it talks to, from the environment (stdlib only:
remote mode reads these without loading the board)."""

from __future__ import annotations

import getpass
import os


def remote_url() -> str | None:
    """``LANEBOARD_URL``: the board this ``lb`` talks to instead of opening a database."""
    return os.environ.get("LANEBOARD_URL") or None


def token_from_env() -> str | None:
    """``LANEBOARD_TOKEN_FILE`` (kept current by the supervisor across claims) wins over
    ``LANEBOARD_TOKEN``."""
    path = os.environ.get("LANEBOARD_TOKEN_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read().strip()
        except OSError:
            text = ""
        if text:
            return text
    return os.environ.get("LANEBOARD_TOKEN") or None


def keep_token(path: str, token: str) -> None:
    """Replace the credential in ``path`` atomically (owner-only)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    os.replace(tmp, path)


def user_name() -> str:
    """``LANEBOARD_USER``, else the login name."""
    name = os.environ.get("LANEBOARD_USER")
    if name:
        return name
    try:
        return getpass.getuser()
    except Exception:
        return "human"
