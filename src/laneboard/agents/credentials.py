"""Is an agent CLI logged in, and can it reach its configured endpoint? (``lb agents check``)

No model call is made. A kind is *logged in* when the credential it reads is present: an
API key in the environment, or the login file in its config directory (Claude Code's
``.credentials.json``, Codex's ``auth.json``, Pi's ``auth.json``), or — for a custom
provider — the key its configuration names. A configured endpoint (``ANTHROPIC_BASE_URL``,
a Codex ``model_providers`` ``base_url``, a Pi ``models.json`` ``baseUrl``) is *reachable*
when a TCP connection to it opens within a couple of seconds.
"""

from __future__ import annotations

import json
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from laneboard.agents.sandbox_spec import cli_config_dir

CONNECT_TIMEOUT_S = 2.0
ENV_KEYS = {
    "claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY"),
    "pi": ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"),
}
LOGIN_FILES = {"claude": ".credentials.json", "codex": "auth.json", "pi": "auth.json"}


@dataclass(frozen=True)
class Login:
    logged_in: bool
    how: str
    endpoint: str | None = None
    reachable: bool | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh) if path.endswith(".toml") else json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _codex_provider(folder: str) -> tuple[str | None, str | None, bool]:
    """(base_url, env_key, requires_openai_auth) of the configured Codex provider."""
    cfg = _read(os.path.join(folder, "config.toml"))
    name = cfg.get("model_provider")
    provider = (cfg.get("model_providers") or {}).get(name) if name else None
    if not isinstance(provider, dict):
        return None, None, True
    env_key = provider.get("env_key")
    return provider.get("base_url"), env_key if isinstance(env_key, str) else None, False


def _pi_endpoint(folder: str, provider: str | None) -> tuple[str | None, bool]:
    """(baseUrl, has an apiKey) of the configured Pi provider from ``models.json``."""
    providers = _read(os.path.join(folder, "models.json")).get("providers") or {}
    entry = providers.get(provider) if provider else None
    if not isinstance(entry, dict):
        return None, False
    return entry.get("baseUrl"), bool(entry.get("apiKey"))


def login(kind: str, env: Mapping[str, str], config: Mapping[str, Any]) -> Login | None:
    """The login and endpoint state of a kind; None for kinds without a login."""
    if kind not in ENV_KEYS:
        return None
    folder = cli_config_dir(kind, env) or ""
    endpoint: str | None = None
    keys = list(ENV_KEYS[kind])
    configured_key = False
    if kind == "claude":
        endpoint = env.get("ANTHROPIC_BASE_URL")
    elif kind == "codex":
        endpoint, env_key, _openai = _codex_provider(folder)
        keys = [env_key] if env_key else keys
    else:
        endpoint, configured_key = _pi_endpoint(folder, config.get("provider"))
    found = next((k for k in keys if env.get(k)), None)
    login_file = os.path.join(folder, LOGIN_FILES[kind])
    if found:
        how = f"${found}"
    elif configured_key:
        how = "apiKey in models.json"
    elif _read(login_file):  # a login file with something in it (an empty one is no login)
        how = login_file
    else:
        where = " or ".join(f"${k}" for k in keys)
        return _reach(
            Login(False, "", endpoint, problem=f"not logged in (no {where}, no {login_file})")
        )
    return _reach(Login(True, how, endpoint))


def _reach(state: Login) -> Login:
    if not state.endpoint:
        return state
    problem = unreachable(state.endpoint)
    if problem is None:
        return Login(state.logged_in, state.how, state.endpoint, True, state.problem)
    return Login(state.logged_in, state.how, state.endpoint, False, state.problem or problem)


def unreachable(url: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when a TCP connection to the URL's host opens, else why it did not."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return f"endpoint {url} has no host"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"endpoint {url} is unreachable ({exc.strerror or exc})"
