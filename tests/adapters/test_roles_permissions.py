"""Role discovery, the claim set, role prompts, the permission boundary and agent_env."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from laneboard.agents import permissions
from laneboard.agents.env import agent_env
from laneboard.agents.permissions import (
    claude_args,
    command_allowed,
    permission_summary,
    pi_tools,
    policy_for,
    warn_once,
)
from laneboard.agents.registry import adapter_for
from laneboard.agents.roles import claim_set, discover_roles, render_reviewer_prompt, render_role
from laneboard.domain.roles import Role
from laneboard.errors import LaneboardError


def role_toml(rid: str, lanes: str = '["worker"]', marker: bool = True, title: str = "") -> str:
    head = 'schema = "laneboard.role/1"\n' if marker else ""
    return (
        f'{head}id = "{rid}"\nagent = "codex"\nlanes = {lanes}\ntitle = "{title or rid}"\n'
        'responsibilities = ["Do the work."]\nboundaries = ["Stay in the lane."]\n'
    )


def test_discovery_merges_project_user_and_shipped_roles_first_match_wins(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".laneboard" / "roles").mkdir(parents=True)
    (project / ".laneboard" / "roles" / "worker.toml").write_text(
        role_toml("worker", title="Project worker")
    )
    (project / ".laneboard" / "roles" / "turing").mkdir()
    (project / ".laneboard" / "roles" / "turing" / "role.toml").write_text(
        role_toml("turing", '["worker", "reviewer"]')
    )
    user = tmp_path / "user"
    user.mkdir()
    (user / "worker.toml").write_text(role_toml("worker", title="User worker"))
    (user / "audit.json").write_text(
        '{"schema": "laneboard.role/1", "id": "audit", "lanes": ["reviewer"]}'
    )
    catalog = discover_roles(str(project), user_dir=str(user))
    assert catalog.warnings == []
    by_id = {r.id: r for r in catalog.roles}
    assert by_id["worker"].title == "Project worker" and by_id["worker"].source == "project"
    assert by_id["turing"].lanes == ("worker", "reviewer") and by_id["turing"].agent == "codex"
    assert by_id["audit"].source == "user"
    assert by_id["reviewer"].source == "builtin" and by_id["director"].source == "builtin"
    assert claim_set(catalog.roles) == ("turing", "worker", "audit", "reviewer")


def test_a_file_without_the_marker_or_escaping_by_symlink_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    roles = tmp_path / "roles"
    roles.mkdir()
    (roles / "plain.toml").write_text(role_toml("plain", marker=False))
    outside = tmp_path / "outside.toml"
    outside.write_text(role_toml("sneaky"))
    os.symlink(outside, roles / "sneaky.toml")
    (roles / "broken.toml").write_text("schema = [")
    (roles / "badlane.toml").write_text(role_toml("badlane", '["boss"]'))
    with caplog.at_level(logging.WARNING, logger="laneboard.roles"):
        catalog = discover_roles(None, user_dir=str(roles), include_builtin=False)
    assert catalog.roles == []
    text = "\n".join(catalog.warnings)
    assert "plain.toml: not a role" in text
    assert "sneaky.toml: resolves outside" in text
    assert "broken.toml: cannot be read" in text
    assert "badlane.toml: lanes must be" in text
    assert len(caplog.records) == 4


def test_shipped_roles_render_for_the_handoff_within_bounds() -> None:
    catalog = discover_roles(None, user_dir="/nonexistent", include_builtin=True)
    worker = catalog.get("worker")
    assert worker is not None and worker.lanes == ("worker",)
    text = render_role(worker)
    assert text.startswith("Your role: Worker (worker, worker lane).")
    assert "Responsibilities:\n- Implement the card" in text and "Boundaries:" in text
    reviewer = catalog.get("reviewer")
    assert reviewer is not None and "APPROVE" in render_reviewer_prompt(reviewer)
    long = Role(id="x", title="T", responsibilities=("r" * 5000,))
    assert len(render_role(long)) == 1200 and render_role(long).endswith("…")
    assert render_role(Role(id="bare")) == ""


def test_shell_commands_are_checked_against_the_role_list() -> None:
    allowed = ("lb", "git", "pytest -q")
    ok = [
        "lb card report WEB-1 --body 'x' && lb card move WEB-1 in_review",
        "git status; git diff | git apply --check",
        "pytest -q tests 2>&1",
        "FOO=1 lb card get WEB-1 >/dev/null",
        "lb card comment WEB-1 'a > b; c'",
    ]
    for cmd in ok:
        assert command_allowed(cmd, allowed) == (True, ""), cmd
    refused = [
        "echo hi > file.txt",
        "rm -rf .",
        "lb x && rm y",
        "pytest tests",
        "lb $(whoami)",
        "(git status)",
        "lb `id`",
        "git log > out.txt",
        "'unbalanced",
    ]
    for cmd in refused:
        assert command_allowed(cmd, allowed)[0] is False, cmd
    assert "'rm' is not in this role's command list" in command_allowed("rm x", allowed)[1]


def test_role_tool_sets_per_kind_and_no_bypass_by_default() -> None:
    worker = Role(id="w", lanes=("worker",), extra={"check_commands": ["pytest -q"]})
    reviewer = Role(id="r", lanes=("reviewer",))
    director = Role(id="d", lanes=("director",))
    wp = policy_for("claude", worker, {"check_commands": ["ruff check"]})
    assert wp.commands == ("lb", "git", "ruff check", "pytest -q") and wp.edit
    rp, dp = policy_for("claude", reviewer, {}), policy_for("claude", director, {})
    assert not rp.edit and rp.commands == ("lb", "git")
    assert not dp.edit and dp.commands == ("lb",)
    args = claude_args(rp)
    assert args[args.index("--tools") + 1] == "Read,Grep,Glob,Bash"
    assert "Write" in args[args.index("--disallowedTools") :]
    assert args[-2:] == ["--permission-mode", "dontAsk"]
    assert "bypassPermissions" not in " ".join(claude_args(wp))
    assert "Bash(ruff check *)" in claude_args(wp)
    assert pi_tools(rp) == ["read", "bash", "grep", "find", "ls"]
    assert "write" in pi_tools(wp)


def test_allow_all_tools_needs_a_written_reason_and_is_reported() -> None:
    for kind in ("claude", "codex", "pi"):
        with pytest.raises(LaneboardError) as err:
            adapter_for(kind, {"allow_all_tools": True, "allow_all_tools_reason": "  "})
        assert err.value.code == "CONFIG_INVALID"
        assert "without a written reason" in err.value.message
        assert "allow_all_tools_reason" in err.value.fix
    cfg = {"allow_all_tools": True, "allow_all_tools_reason": "sandboxed VM, approved by Ann"}
    adapter_for("claude", cfg)
    policy = policy_for("claude", Role(id="r", lanes=("reviewer",)), cfg)
    assert policy.allow_all
    assert claude_args(policy, euid=1000) == ["--permission-mode", "bypassPermissions"]
    # as root Claude Code refuses the bypass: every tool is pre-approved instead
    as_root = claude_args(policy, euid=0)
    assert "bypassPermissions" not in as_root and as_root[-2:] == [
        "--permission-mode",
        "acceptEdits",
    ]
    assert {"Bash", "Edit", "Write"} <= set(as_root)
    summary = permission_summary({"claude": cfg, "codex": {}})
    assert summary["bypass"] is True and summary["bypassed_kinds"] == ["claude"]
    assert summary["kinds"]["claude"]["reason"] == "sandboxed VM, approved by Ann"
    assert summary["kinds"]["codex"]["allow_all_tools"] is False
    assert summary["kinds"]["pi"]["allow_all_tools"] is False
    assert permission_summary({})["bypass"] is False


def test_a_kind_that_cannot_enforce_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    permissions._warned.discard(("command", "no per-role tool set"))
    with caplog.at_level(logging.WARNING, logger="laneboard.agents"):
        assert warn_once("command", "no per-role tool set") is True
        assert warn_once("command", "no per-role tool set") is False
    assert [r.getMessage() for r in caplog.records] == ["command: no per-role tool set"]


def test_agent_env_keeps_the_users_env_but_not_laneboards_secrets() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/home/a",
        "ANTHROPIC_API_KEY": "k",
        "LANEBOARD_TOKEN": "human-token",
        "LANEBOARD_ADMIN_TOKEN": "admin",
        "LANEBOARD_DATABASE_URL": "postgresql://other",
        "GITHUB_TOKEN": "gh",
    }
    env = agent_env(
        base,
        token="lbt_card",
        card_ref="WEB-1",
        board_url="unix:/run/board.sock",
        extra={"LANEBOARD_SNEAKY": "x", "EXTRA": "1"},
        secrets=["GITHUB_TOKEN"],
    )
    assert env == {
        "PATH": "/bin",
        "HOME": "/home/a",
        "ANTHROPIC_API_KEY": "k",
        "LANEBOARD_TOKEN": "lbt_card",
        "LANEBOARD_CARD": "WEB-1",
        "LANEBOARD_URL": "unix:/run/board.sock",
        "EXTRA": "1",
    }
    bare = agent_env(base, token=None, card_ref=None, board_url=None)
    assert not [k for k in bare if k.startswith("LANEBOARD_")]


def test_codex_sandbox_names_the_repository_and_the_lanes_own_git_directory(repo: Path) -> None:
    import subprocess

    from laneboard.agents.codex import git_dirs

    lane = repo / ".worktrees" / "WEB-1"
    subprocess.run(
        ["git", "worktree", "add", "-q", "-b", "lane/WEB-1", str(lane)], cwd=repo, check=True
    )
    assert git_dirs(str(lane)) == [str(repo / ".git"), str(repo / ".git" / "worktrees" / "WEB-1")]
    assert git_dirs(str(repo)) == [str(repo / ".git")]
    assert git_dirs(str(repo.parent)) == []  # not a repository
