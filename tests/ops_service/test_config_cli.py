"""``lb config show|check|move-to-file`` and the commands that refuse a bad file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.ops_service.conftest import Home

GOLDEN = Path(__file__).parent / "golden"


def _setup(home: Home) -> Path:
    home.user_file(
        "[supervisor]\n"
        "max_concurrency = 4\n"
        "[supervisor.time]\n"
        "tick_interval = 300\n"
        "[supervisor.agent_kinds.claude]\n"
        'binary = "/opt/agents/claude"\n'
        "[patrol]\n"
        'leader = "alice"\n'
        "[project]\n"
        'workspace = "shared"\n'
    )
    repo = home.root / "web"
    (repo / ".laneboard").mkdir(parents=True)
    (repo / ".laneboard" / "config.toml").write_text(
        '# checked in with the project\n[project]\nbase_ref = "main"\nreview_gate = ["make check"]\n'
    )
    assert home.lb("project", "add", "WEB", "--path", str(repo)).returncode == 0
    out = home.lb("project", "config", "WEB", "--set", "check_timeout=45")
    assert out.returncode == 0, out.stderr
    return repo


def _normal(value: Any, root: Path) -> Any:
    text = json.dumps(value, indent=2, sort_keys=True).replace(str(root), "<tmp>")
    return json.loads(text)


def test_show_json_matches_the_golden_file(home: Home) -> None:
    _setup(home)
    out = home.lb(
        "config",
        "show",
        "--project",
        "WEB",
        "--json",
        "--set",
        "project.concurrency=2",
        env={"LANEBOARD_PROJECT_ACCEPTANCE_MODE": "human", "LANEBOARD_DEFAULT_AGENT": "codex"},
    )
    assert out.returncode == 0, out.stderr
    got = _normal(json.loads(out.stdout), home.root)
    golden = GOLDEN / "config_show.json"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert got == json.loads(golden.read_text())


def test_show_finds_the_project_file_from_the_current_directory(home: Home) -> None:
    repo = _setup(home)
    (repo / ".git").mkdir()
    (repo / "src").mkdir()
    out = home.lb("config", "show", cwd=repo / "src")
    assert out.returncode == 0, out.stderr
    assert f"project file  {repo}/.laneboard/config.toml" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("project.base_ref"))
    assert line.split()[1:] == ['"main"', f"{repo}/.laneboard/config.toml:3"]


def test_show_refuses_an_unknown_set_key(home: Home) -> None:
    out = home.lb("config", "show", "--set", "supervisor.max_concurency=2")
    assert out.returncode == 2
    assert "did you mean supervisor.max_concurrency?" in out.stderr


def test_check_and_every_reader_refuse_a_bad_user_file_with_its_line(home: Home) -> None:
    path = home.user_file("[supervisor]\nmax_concurrency = 2\npool_max = 3\n")
    for args in (
        ("config", "check"),
        ("status",),
        ("doctor",),
        ("config", "show"),
        ("start", "--for-seconds", "1"),
    ):
        out = home.lb(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith(f"error CONFIG_INVALID: {path}:3: unknown key 'pool_max'")
        assert out.stderr.count("\n") == 1


def test_start_refuses_a_bad_project_file(home: Home) -> None:
    repo = _setup(home)
    bad = repo / ".laneboard" / "config.toml"
    bad.write_text('[project]\nbase_ref = "main"\nworkspace = "sandbox"\n')
    out = home.lb("start", "--for-seconds", "1")
    assert out.returncode == 2
    assert out.stderr.startswith(f"error CONFIG_INVALID: {bad}:3: bad value for project.workspace")
    assert "supervisor running" not in out.stderr
    check = home.lb("config", "check", "--all", "--json")
    assert check.returncode == 2 and json.loads(check.stdout)["error"]["details"]["line"] == 3


def test_check_passes_on_good_files(home: Home) -> None:
    _setup(home)
    out = home.lb("config", "check", "--all", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["projects"] == ["WEB"]


def test_move_to_file_from_the_command_line(home: Home) -> None:
    repo = _setup(home)
    preview = home.lb("config", "move-to-file", "WEB", "--print")
    assert preview.returncode == 0 and "check_timeout = 45.0" in preview.stdout
    assert "check_timeout" not in (repo / ".laneboard" / "config.toml").read_text()
    out = home.lb("config", "move-to-file", "WEB")
    assert out.returncode == 0, out.stderr
    assert "added check_timeout" in out.stdout
    text = (repo / ".laneboard" / "config.toml").read_text()
    assert text.startswith("# checked in with the project\n") and "check_timeout = 45.0" in text
    assert json.loads(home.lb("project", "config", "WEB", "--json").stdout) == {}
    again = home.lb("config", "move-to-file", "WEB")
    assert again.returncode == 1 and "holds no settings for WEB" in again.stderr
    refused = home.lb("project", "config", "WEB", "--set", "check_timeout=10")
    assert refused.returncode == 1 and "wins over the board" in refused.stderr
