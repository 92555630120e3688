"""The services' environment file: secrets by reference, never inline in a unit.

``<config dir>/service.env`` holds ``KEY=VALUE`` lines (``#`` comments, optional quotes).
It must be readable by its owner only (mode 0600); ``run`` refuses a file others can
read. ``enable`` writes only the keys it manages (a database URL with a password) and
keeps every other line, so API keys added by hand survive.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from laneboard.errors import LaneboardError

HEADER = (
    "# laneboard services' environment (secrets), read by the units `lb supervisor enable`\n"
    "# and `lb service enable` write. Keep it mode 0600. Add what the agents need, e.g.\n"
    "# ANTHROPIC_API_KEY=…\n"
)
MANAGED = ("LANEBOARD_DATABASE_URL",)


def env_file_path() -> str:
    from laneboard.config import config_dir

    return os.path.join(config_dir(), "service.env")


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


def _quote(value: str) -> str:
    if any(c in value for c in " #'\"\t") or value == "":
        return "'" + value.replace("'", "") + "'"
    return value


def render(existing: str, managed: Mapping[str, str]) -> str:
    """``existing`` with the managed keys set to ``managed`` (others dropped if absent)."""
    kept = [
        raw
        for raw in existing.splitlines()
        if raw.strip().partition("=")[0].strip().removeprefix("export ").strip() not in MANAGED
    ]
    if not existing:
        kept = HEADER.rstrip("\n").splitlines()
    lines = [*kept, *(f"{k}={_quote(v)}" for k, v in managed.items())]
    return "\n".join(lines) + "\n"


def only_managed(text: str) -> bool:
    """True when the file holds exactly what ``enable`` writes (so it is safe to remove)."""
    values = parse(text)
    return values.keys() <= set(MANAGED) and text == render("", values)


def check_mode(path: str) -> None:
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise LaneboardError(
            "CONFIG_INVALID",
            f"{path} can be read by others (mode {stat.S_IMODE(mode):04o})",
            f"it holds secrets: chmod 600 {path}",
        )


def load(path: str) -> dict[str, str]:
    """The file's variables ({} when it does not exist); refuses a file others can read."""
    if not os.path.exists(path):
        return {}
    check_mode(path)
    with open(path, encoding="utf-8") as fh:
        return parse(fh.read())


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(path + ".tmp", 0o600)
        os.replace(path + ".tmp", path)
    except BaseException:
        if os.path.exists(path + ".tmp"):
            os.remove(path + ".tmp")
        raise
