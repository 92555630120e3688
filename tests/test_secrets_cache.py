"""The secret list is cached for the process environment, and never stale."""

from __future__ import annotations

import pytest

from laneboard import secrets


def test_a_changed_environment_or_registry_is_seen_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = secrets.secret_values()
    assert secrets.secret_values() is first  # unchanged: the cached answer
    monkeypatch.setenv("CACHE_TEST_API_KEY", "sk-first-value")
    assert "sk-first-value" in secrets.secret_values()
    assert secrets.scrub("key sk-first-value here") == "key *** here"
    monkeypatch.setenv("CACHE_TEST_API_KEY", "sk-other-value")  # same names, a new value
    assert secrets.scrub("sk-first-value sk-other-value") == "sk-first-value ***"
    secrets.register(["registered-value-123"])
    assert secrets.scrub("a registered-value-123 b") == "a *** b"
    params = secrets.scrub_params("UPDATE t SET x = ?", ["sk-other-value", 3])
    assert params == ("***", 3)
    monkeypatch.delenv("CACHE_TEST_API_KEY")
    assert "sk-other-value" not in secrets.secret_values()
    assert "explicit-env" in secrets.secret_values({"X_TOKEN": "explicit-env"})


def test_the_tokens_a_supervisor_hands_out_do_not_lengthen_every_write() -> None:
    """A supervisor registers the token of every session it opens. Tokens have their own
    pattern, masked wherever it occurs, so they are not kept one by one: the list each
    write is searched for stays as long after a thousand sessions as before the first."""
    from laneboard.board.tokens import AgentToken

    before = len(secrets.secret_values())
    tokens = [AgentToken.mint("worker", 1, 1, 0).token for _ in range(1000)]
    for token in tokens:
        secrets.register([token])
    assert len(secrets.secret_values()) == before
    params = secrets.scrub_params("INSERT INTO t VALUES (?)", [f"the key is {tokens[-1]}."])
    assert params == ("the key is lbt_***.",)
    assert tokens[0] not in secrets.scrub(f"first {tokens[0]}")
