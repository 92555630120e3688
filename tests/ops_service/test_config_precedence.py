"""One precedence for every key: flag → env → project file → board → user file → default."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from laneboard.config import load_supervisor_config, patrol_values
from laneboard.config_keys import BOARD_SETTINGS, PATROL_DEFAULTS, PROJECT, all_keys
from laneboard.config_resolve import resolve
from laneboard.config_write import toml_value
from laneboard.errors import LaneboardError
from laneboard.supervisor.patrol_rows import PatrolSettings

# two different valid values per project key (the layers alternate between them)
PROJECT_VALUES: dict[str, tuple[Any, Any]] = {
    "base_ref": ("develop", "release"),
    "workspace": ("shared", "lanes"),
    "review_gate": (("make check",), ("pytest -q", "ruff check")),
    "check_timeout": (30.0, 45.5),
    "allowed_paths": (("src",), ("docs", "tests")),
    "acceptance_mode": ("human", "off"),
    "concurrency": (2, 3),
    "roles_dir": (".laneboard/team-roles", "roles"),
}
LAYERS = ("user", "board", "project", "env", "flag")  # lowest first


def test_every_project_key_is_covered() -> None:
    declared = {k.short for k in all_keys().values() if k.scope == PROJECT}
    assert declared == set(PROJECT_VALUES)


def _env_text(value: Any) -> str:
    return json.dumps(list(value)) if isinstance(value, tuple) else str(value)


def _layers_for(short: str) -> tuple[str, ...]:
    return tuple(layer for layer in LAYERS if layer != "board" or short in BOARD_SETTINGS)


@pytest.mark.parametrize("short", sorted(PROJECT_VALUES))
def test_each_layer_beats_the_ones_below_it(short: str, tmp_path: Path) -> None:
    key = all_keys()[f"project.{short}"]
    layers = _layers_for(short)
    for top in range(len(layers) + 1):
        here = tmp_path / f"case{top}"
        (here / "proj" / ".laneboard").mkdir(parents=True)
        user = here / "user.toml"
        user.write_text("")
        env: dict[str, str] = {}
        flags: dict[str, Any] = {}
        board: dict[str, Any] = {}
        given = {layer: PROJECT_VALUES[short][i % 2] for i, layer in enumerate(layers[:top])}
        for layer, value in given.items():
            if layer == "user":
                user.write_text(f"[project]\n# a comment\n{short} = {toml_value(value)}\n")
            elif layer == "project":
                (here / "proj" / ".laneboard" / "config.toml").write_text(
                    f"[project]\n\n{short} = {toml_value(value)}\n"
                )
            elif layer == "board":
                board[short] = list(value) if isinstance(value, tuple) else value
            elif layer == "env":
                assert key.env is not None
                env[key.env] = _env_text(value)
            else:
                flags[key.name] = _env_text(value)
        got = resolve(
            flags=flags,
            env=env,
            user_file=str(user),
            project_dir=str(here / "proj"),
            board=board,
            board_label="board project PC",
            prefixes=("project.",),
        ).items[key.name]
        if top == 0:
            assert (got.value, got.origin.layer) == (key.default, "default")
            continue
        winner = layers[top - 1]
        assert got.value == given[winner], (short, winner)
        assert got.origin.layer == winner
        assert [o.layer for o in got.shadowed] == list(reversed(layers[: top - 1]))
        if winner == "user":
            assert got.origin.source == f"{user}:3" and got.origin.line == 3
        if winner == "project":
            assert got.origin.source.endswith("proj/.laneboard/config.toml:3")
        if winner == "env":
            assert got.origin.source == key.env
        if winner == "board":
            assert got.origin.source == "board project PC"


def test_machine_keys_take_flag_env_user_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANEBOARD_MAX_CONCURRENCY", raising=False)
    user = tmp_path / "config.toml"
    user.write_text("")
    assert load_supervisor_config(user_file=str(user)).max_concurrency == 8
    user.write_text("[supervisor]\nmax_concurrency = 5\n[supervisor.time]\ntick_interval = 300\n")
    cfg = load_supervisor_config(user_file=str(user))
    assert (cfg.max_concurrency, cfg.time.tick_interval) == (5, 300)
    monkeypatch.setenv("LANEBOARD_MAX_CONCURRENCY", "6")
    assert load_supervisor_config(user_file=str(user)).max_concurrency == 6
    cfg = load_supervisor_config(
        {"max_concurrency": 7, "time": {"tick_interval": 120}}, user_file=str(user)
    )
    assert (cfg.max_concurrency, cfg.time.tick_interval) == (7, 120)
    got = resolve(flags={"supervisor.max_concurrency": 7}, user_file=str(user))
    setting = got.items["supervisor.max_concurrency"]
    assert setting.origin.source == "--max-concurrency"
    assert [o.source for o in setting.shadowed] == ["LANEBOARD_MAX_CONCURRENCY", f"{user}:2"]


def test_machine_keys_ignore_the_project_layers(tmp_path: Path) -> None:
    (tmp_path / "proj" / ".laneboard").mkdir(parents=True)
    (tmp_path / "proj" / ".laneboard" / "config.toml").write_text(
        '[project]\nworkspace = "shared"\n'
    )
    got = resolve(env={}, user_file=str(tmp_path / "none.toml"), project_dir=str(tmp_path / "proj"))
    assert got.items["supervisor.max_concurrency"].origin.layer == "default"
    assert got.items["project.workspace"].origin.layer == "project"


def test_open_tables_come_from_the_user_file(tmp_path: Path) -> None:
    user = tmp_path / "config.toml"
    user.write_text(
        '[supervisor.role_agents]\nreviewer = "codex"\n'
        '[supervisor.agent_kinds.claude]\nbinary = "/opt/claude"\nargs = ["--x"]\n'
    )
    cfg = load_supervisor_config(user_file=str(user))
    assert cfg.role_agents == {"reviewer": "codex"}
    assert cfg.agent_kinds == {"claude": {"binary": "/opt/claude", "args": ["--x"]}}
    got = resolve(env={}, user_file=str(user))
    assert got.items["supervisor.agent_kinds.claude.binary"].origin.source == f"{user}:4"


def test_patrol_keys_match_the_patrol_settings(tmp_path: Path) -> None:
    assert {f.name: getattr(PatrolSettings(), f.name) for f in fields(PatrolSettings)} == (
        PATROL_DEFAULTS
    )
    user = tmp_path / "config.toml"
    user.write_text('[patrol]\nnotify_command = "cat"\nquestion_min = 5\n')
    assert patrol_values(str(user))["question_min"] == 5
    assert patrol_values(str(user), {"notify_command": "tee"})["notify_command"] == "tee"


def _refused(**kw: Any) -> LaneboardError:
    with pytest.raises(LaneboardError) as err:
        resolve(env=kw.pop("env", {}), **kw)
    assert err.value.code == "CONFIG_INVALID"
    return err.value


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ("[supervisor]\nmax_concurency = 4\n", 2, "unknown key 'max_concurency' in [supervisor]"),
        ("[supervisr]\nmax_concurrency = 4\n", 1, "unknown table or key 'supervisr'"),
        ("[supervisor]\n\nmax_concurrency = 0\n", 3, "bad value for supervisor.max_concurrency"),
        ('[supervisor.time]\nturn_timeout = "long"\n', 2, "bad value for supervisor.time.turn"),
        ('[supervisor.agent_kinds.claud]\nbinary = "x"\n', 1, "unknown agent kind"),
        ('[supervisor.agent_kinds.pi]\nbinry = "x"\n', 2, "unknown key 'binry'"),
        ('[supervisor.role_agents]\nreviewer = "gpt"\n', 2, "supervisor.role_agents.reviewer"),
        ("[patrol]\nquestion_min = -1\n", 2, "bad value for patrol.question_min"),
        ('[project]\nworkspace = "tmp"\n', 2, "bad value for project.workspace"),
        ("[supervisor]\nmax_concurrency = [\n", 2, "not valid TOML"),
    ],
)
def test_a_bad_user_file_is_refused_with_its_line(
    text: str, where: int, says: str, tmp_path: Path
) -> None:
    user = tmp_path / "config.toml"
    user.write_text(text)
    err = _refused(user_file=str(user))
    assert err.message.startswith(f"{user}:{where}: "), err.message
    assert says in err.message
    assert err.fix and err.details["line"] == where


@pytest.mark.parametrize(
    ("text", "where", "says", "fix"),
    [
        ("[project]\nbase_ref = \"main\"\nworkspce = \"lanes\"\n", 3, "unknown key 'workspce'",
         "did you mean 'workspace'?"),
        ("[supervisor]\nmax_concurrency = 2\n", 1, "unknown table or key 'supervisor'",
         "is a machine setting: move it to"),
        ("[project]\nacceptance_mode = \"never\"\n", 2, "bad value for project.acceptance_mode",
         "use off or auto or human"),
        ("[project]\nallowed_paths = [\"../up\"]\n", 2, "bad value for project.allowed_paths",
         "plain path"),
        ("[project]\ncheck_timeout = 0\n", 2, "bad value for project.check_timeout", "seconds"),
    ],
)  # fmt: skip
def test_a_bad_project_file_is_refused_with_its_line(
    text: str, where: int, says: str, fix: str, tmp_path: Path
) -> None:
    (tmp_path / ".laneboard").mkdir()
    path = tmp_path / ".laneboard" / "config.toml"
    path.write_text(text)
    err = _refused(user_file=str(tmp_path / "none.toml"), project_dir=str(tmp_path))
    assert err.message.startswith(f"{path}:{where}: "), err.message
    assert says in err.message and fix in err.fix


def test_a_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    err = _refused(env={"LANEBOARD_PROJECT_CONCURRENCY": "many"}, user_file=str(tmp_path / "x"))
    assert err.message.startswith("LANEBOARD_PROJECT_CONCURRENCY='many': ")
    assert "unset LANEBOARD_PROJECT_CONCURRENCY" in err.fix


def test_a_broken_time_contract_names_where_the_clocks_were_set(tmp_path: Path) -> None:
    user = tmp_path / "config.toml"
    user.write_text("[supervisor.time]\ntick_interval = 2000\n")
    with pytest.raises(LaneboardError) as err:
        load_supervisor_config(user_file=str(user))
    assert "tick_interval must be shorter than turn_timeout" in err.value.message
    assert f"tick_interval from {user}:2" in err.value.message
