"""The project's file is read where its settings act: cards, lanes, the project cap, roles,
and the board layer (``lb project config``) below it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from laneboard.agents.roles import project_roles_dir
from laneboard.board.service import Board
from laneboard.config import SupervisorConfig, effective_project_config, project_cap
from laneboard.domain.model import AcceptanceMode, agent, human
from laneboard.errors import LaneboardError
from laneboard.workspace.admit import AdmissionError
from laneboard.workspace.lane_admit import LaneAdmitter

ME = human("alice")


@pytest.fixture(autouse=True)
def _no_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    for var in ("LANEBOARD_PROJECT_ACCEPTANCE_MODE", "LANEBOARD_PROJECT_ALLOWED_PATHS"):
        monkeypatch.delenv(var, raising=False)


def _project_file(repo: Path, text: str) -> Path:
    (repo / ".laneboard").mkdir(exist_ok=True)
    path = repo / ".laneboard" / "config.toml"
    path.write_text(text)
    return path


def test_new_cards_take_the_projects_defaults(board: Board, repo: Path) -> None:
    _project_file(repo, '[project]\nacceptance_mode = "human"\nallowed_paths = ["src", "docs"]\n')
    board.add_project(ME, "PC", path=str(repo))
    card = board.create_card(ME, "PC", "defaults")
    assert card.acceptance_mode is AcceptanceMode.HUMAN
    assert list(card.allowed_paths) == ["src", "docs"]
    own = board.create_card(ME, "PC", "own", acceptance_mode="off", allowed_paths=["tests"])
    assert own.acceptance_mode is AcceptanceMode.OFF and list(own.allowed_paths) == ["tests"]
    whole = board.create_card(ME, "PC", "whole repo", allowed_paths=[])
    assert list(whole.allowed_paths) == []


def test_a_bad_project_file_refuses_a_new_card_and_writes_nothing(board: Board, repo: Path) -> None:
    board.add_project(ME, "PC", path=str(repo))
    path = _project_file(repo, '[project]\nacceptance_mode = "sometimes"\n')
    before = len(board.events())
    with pytest.raises(LaneboardError) as err:
        board.create_card(ME, "PC", "x")
    assert err.value.code == "CONFIG_INVALID"
    assert err.value.message.startswith(f"{path}:2: bad value for project.acceptance_mode")
    assert len(board.events()) == before and board.list_cards() == []


def test_the_file_wins_over_the_board_and_the_board_over_the_user_file(
    board: Board, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "no-config" / "laneboard"
    user.mkdir(parents=True)
    (user / "config.toml").write_text('[project]\nworkspace = "shared"\ncheck_timeout = 10\n')
    p = board.add_project(ME, "PC", path=str(repo), base_ref="main")
    board.set_project_config(ME, "PC", {"check_timeout": "20"})
    cfg = effective_project_config(board.project("PC"), board.project_config("PC"))
    assert (cfg["workspace"], cfg["check_timeout"], cfg["base_ref"]) == ("shared", 20.0, "main")
    _project_file(repo, '[project]\nbase_ref = "develop"\ncheck_timeout = 30\n')
    cfg = effective_project_config(p, board.project_config("PC"))
    assert (cfg["check_timeout"], cfg["base_ref"]) == (30.0, "develop")


def test_a_board_setting_the_file_already_sets_is_refused(board: Board, repo: Path) -> None:
    path = _project_file(repo, '[project]\n\nworkspace = "lanes"\n')
    board.add_project(ME, "PC", path=str(repo))
    before = len(board.events())
    with pytest.raises(LaneboardError) as err:
        board.set_project_config(ME, "PC", {"workspace": "shared"})
    assert err.value.code == "CONFLICT"
    assert err.value.message.startswith(f"{path}:3 sets workspace for PC")
    assert len(board.events()) == before and board.project_config("PC") == {}
    assert board.set_project_config(ME, "PC", {"check_timeout": 15}) == {"check_timeout": 15.0}


def test_board_settings_move_into_the_file(board: Board, repo: Path) -> None:
    path = _project_file(repo, '# reviewed with the code\n[project]\nworkspace = "lanes"\n\n[x]\n')
    path.write_text('# reviewed with the code\n[project]\nworkspace = "lanes"\n')
    board.add_project(ME, "PC", path=str(repo), base_ref="main")
    board.set_project_config(ME, "PC", {"review_gate": ["make check"], "check_timeout": 40})
    preview = board.move_project_config_to_file(ME, "PC", dry_run=True)
    assert path.read_text() == '# reviewed with the code\n[project]\nworkspace = "lanes"\n'
    assert preview["moved"] == ["base_ref", "check_timeout", "review_gate"]
    result = board.move_project_config_to_file(ME, "PC")
    assert result["text"] == preview["text"] == path.read_text()
    data = tomllib.loads(path.read_text())["project"]
    assert data == {
        "workspace": "lanes",
        "review_gate": ["make check"],
        "check_timeout": 40.0,
        "base_ref": "main",
    }
    assert path.read_text().startswith("# reviewed with the code\n")
    assert board.project_config("PC") == {} and board.project("PC").base_ref is None
    event = board.events()[-1]
    assert event.type == "project.configured" and event.payload["moved_to_file"] == str(path)
    cfg = effective_project_config(board.project("PC"), {})
    assert (cfg["base_ref"], cfg["check_timeout"]) == ("main", 40.0)
    with pytest.raises(LaneboardError) as err:
        board.move_project_config_to_file(agent("worker"), "PC")
    assert err.value.code == "FORBIDDEN"


def test_lanes_read_the_base_ref_and_workspace_from_the_file(board: Board, repo: Path) -> None:
    board.add_project(ME, "PC", path=str(repo))
    card = board.create_card(ME, "PC", "lane")
    _project_file(repo, '[project]\nbase_ref = "no-such-ref"\n')
    with pytest.raises(AdmissionError, match="no-such-ref"):
        LaneAdmitter(board).admit(card, board.project("PC"))
    _project_file(repo, '[project]\nworkspace = "shared"\n')
    assert LaneAdmitter(board).admit(card, board.project("PC")) == str(repo)


def test_a_bad_file_defers_admission_without_counting_against_the_card(
    board: Board, repo: Path
) -> None:
    board.add_project(ME, "PC", path=str(repo))
    card = board.create_card(ME, "PC", "lane")
    path = _project_file(repo, "[project]\nworkspace = 1\n")
    with pytest.raises(AdmissionError) as err:
        LaneAdmitter(board).admit(card, board.project("PC"))
    assert err.value.code == "CONFIG_INVALID" and not err.value.card_scoped
    assert f"{path}:2" in str(err.value)


def test_the_project_cap_never_exceeds_the_machines(board: Board, repo: Path) -> None:
    p = board.add_project(ME, "PC", path=str(repo))
    cfg = SupervisorConfig(max_concurrency=4)
    assert project_cap(cfg, p) == 4
    _project_file(repo, "[project]\nconcurrency = 2\n")
    assert project_cap(cfg, p) == 2
    _project_file(repo, "[project]\nconcurrency = 9\n")
    assert project_cap(cfg, p) == 4


def test_the_roles_directory_comes_from_the_file(repo: Path) -> None:
    assert project_roles_dir(str(repo)) == str(repo / ".laneboard" / "roles")
    _project_file(repo, '[project]\nroles_dir = "team/roles"\n')
    assert project_roles_dir(str(repo)) == str(repo / "team" / "roles")


def test_an_unchanged_file_is_checked_once_and_a_changed_one_again(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings are resolved for every card admitted: the file is parsed and checked
    again only when it changed."""
    import os

    from laneboard import config_resolve
    from laneboard.config_keys import all_keys

    checked: list[str] = []
    real = config_resolve.check_file

    def counting(cf, keys, *, project):  # type: ignore[no-untyped-def]
        checked.append(cf.path)
        return real(cf, keys, project=project)

    monkeypatch.setattr(config_resolve, "check_file", counting)
    path = _project_file(repo, '[project]\nbase_ref = "main"\n')
    first = config_resolve.read_file(str(path), all_keys(), project=True)
    again = config_resolve.read_file(str(path), all_keys(), project=True)
    assert first is again and checked.count(str(path)) == 1
    path.write_text('[project]\nbase_ref = "trunk"\n')
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    changed = config_resolve.read_file(str(path), all_keys(), project=True)
    assert changed is not None and changed.values["project.base_ref"][0] == "trunk"
    assert checked.count(str(path)) == 2
