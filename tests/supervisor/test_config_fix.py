"""A dispatch failure caused by the configuration carries the fix its hold names."""

from __future__ import annotations

from pathlib import Path

import pytest

from laneboard.agents.base import AdapterError
from laneboard.agents.discovery import require_binary
from laneboard.agents.permissions import allow_all_reason
from laneboard.errors import LaneboardError
from laneboard.supervisor.outcomes import config_fix


def failure(call: object, *args: object) -> BaseException:
    with pytest.raises((AdapterError, LaneboardError)) as err:
        call(*args)  # type: ignore[operator]
    return err.value


def test_a_missing_binary_names_its_fix(tmp_path: Path) -> None:
    exc = failure(require_binary, "claude", {"path": str(tmp_path)})
    assert config_fix(exc) == "install claude or set [supervisor.agent_kinds.claude] binary"
    gone = str(tmp_path / "nothing-here")
    exc = failure(require_binary, "codex", {"binary": gone})
    assert config_fix(exc) == "fix [supervisor.agent_kinds.codex] binary"
    assert gone in str(exc)


def test_a_refused_bypass_names_its_fix() -> None:
    exc = failure(allow_all_reason, "claude", {"allow_all_tools": True})
    assert "allow_all_tools_reason" in config_fix(exc)


def test_other_failures_name_no_fix() -> None:
    assert config_fix(AdapterError("codex did not return a thread id")) == ""
    assert config_fix(LaneboardError("CONFLICT", "the card moved", "read it again")) == ""
    assert config_fix(OSError("disk full")) == ""
