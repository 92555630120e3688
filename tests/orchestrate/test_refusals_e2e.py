"""Refusals of a whole run, end to end: publication against a moved HEAD or a dirty
checkout (the patch kept, the checkout untouched), each budget's exhaustion, a check
that overruns its timeout; and ``--publish merge``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import git
from tests.orchestrate.scripts import control
from tests.orchestrate.test_e2e import GOAL, env_of

from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.store import open_store


def one_producer(check: str = "test -f src/producer/api.txt", *, sleep: float = 0) -> Any:
    steps: list[dict[str, Any]] = [
        control("accept", "--assignment", "producer", "--revision", "1"),
        {"write": "src/producer/api.txt", "content": "id\n"},
    ]
    if sleep:
        steps.append({"sleep": sleep})
    steps.append(control("report", "--assignment", "producer", "--revision", "1"))
    return {
        "coordinator": [
            {"turn": 1, **control("assign", "--assignment", "producer", "--owner",
                                  "specialist-a", "--brief", "write the record",
                                  "--path", "src/producer", "--check", check)},
            {"turn": 2, **control("complete")},
        ],
        "producer": {"r1": steps},
    }  # fmt: skip


OFF = '[supervisor]\nsandbox = "off"\nsandbox_reason = "a check stands in for the user"\n'


def run(
    tmp: Path, repo: Path, script: Any, *extra: str, config: str | None = None
) -> tuple[int, dict[str, Any], str]:
    db = f"sqlite:///{tmp / 'board.db'}"
    env = env_of(tmp, db)
    if config is not None:  # a user configuration file
        (tmp / "cfg" / "laneboard").mkdir(parents=True)
        (tmp / "cfg" / "laneboard" / "config.toml").write_text(config)
        env["XDG_CONFIG_HOME"] = str(tmp / "cfg")
    path = tmp / "script.json"
    path.write_text(json.dumps(script))
    argv = [sys.executable, "-m", "laneboard.cli.main", "orchestrate", "--repo", str(repo),
            "--goal", GOAL, "--allow-path", "src/producer", "--coordinator", "scripted",
            "--script", str(path), "--state-dir", str(tmp / "state"), "--json", *extra]  # fmt: skip
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    assert out.stdout, out.stderr
    return out.returncode, json.loads(out.stdout), out.stderr


def test_a_check_cannot_change_the_users_checkout_from_its_sandbox(
    tmp_path: Path, repo: Path
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    code, doc, _err = run(tmp_path, repo, one_producer(f"{mover(repo)} && true"))
    assert code == 1 and doc["phase"] == "failed"
    assert git(repo, "rev-parse", "HEAD") == head  # the checkout is read-only to checks
    logs = list((tmp_path / "repo").glob(".git/laneboard/**/checks/**/*.log"))
    logs += list(tmp_path.glob("**/checks/**/*.log"))
    assert any("Read-only file system" in p.read_text() for p in logs), logs


def mover(repo: Path) -> str:
    return f"git -C {repo} -c core.hooksPath=/dev/null commit -q --allow-empty -m moved"


@pytest.mark.parametrize(
    ("make_check", "why"),
    [(mover, "moved from"), (lambda repo: f"touch {repo}/stray.txt", "working tree changed")],
    ids=["moved-head", "dirty-checkout"],
)
def test_publication_onto_a_changed_checkout_keeps_the_patch(
    tmp_path: Path, repo: Path, make_check: Any, why: str
) -> None:
    # the producer's acceptance check stands in for the user, who changes the checkout
    # while the run is under way: with the sandbox off, it runs as the user
    code, doc, _err = run(tmp_path, repo, one_producer(f"{make_check(repo)} && true"), config=OFF)
    assert code == 1 and doc["phase"] == "failed"
    assert why in doc["reason"] and doc["reason"].startswith("publication refused")
    res = doc["result"]
    assert not res["applied"] and Path(res["patch_path"]).is_file()
    assert "+id" in Path(res["patch_path"]).read_text()
    assert res["apply_command"] == f"git -C {repo} apply {res['patch_path']}"
    assert not (repo / "src/producer/api.txt").exists()  # the checkout is untouched


@pytest.mark.parametrize(
    ("flags", "sleep", "which"),
    [
        (("--max-model-calls", "2"), 0, "model_calls"),
        (("--max-output-bytes", "1"), 0, "output_bytes"),
        # the coordinator's first turn (one lb call) must fit in the budget on a loaded
        # machine; the producer's turn then overruns it
        (("--max-elapsed-secs", "3"), 4, "elapsed_secs"),
    ],
    ids=["model-calls", "output-bytes", "elapsed-secs"],
)
def test_each_budget_s_exhaustion_fails_the_run_and_keeps_its_evidence(
    tmp_path: Path, repo: Path, flags: tuple[str, ...], sleep: float, which: str
) -> None:
    code, doc, _err = run(tmp_path, repo, one_producer(sleep=sleep), *flags)
    assert code == 1 and doc["phase"] == "failed"
    assert doc["reason"] == f"budget_exhausted:{which}"
    assert not (repo / "src/producer/api.txt").exists()
    if which != "output_bytes":  # the producer's lane ran and stays for inspection
        assert any(repo.glob(".worktrees/*/src/producer/api.txt"))
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    (rid,) = [r["id"] for r in board.runs()]
    assert board.run(rid)["status"] == "failed"
    o = Runtime(board).turns(rid)
    assert all(t["state"] in ("ended", "failed") for t in o)  # no agent is left running


def test_a_check_past_its_timeout_refuses_the_report(tmp_path: Path, repo: Path) -> None:
    code, doc, err = run(tmp_path, repo, one_producer("sleep 5"), "--check-timeout-secs", "1")
    assert code == 1 and "refused: producer revision 1: check `sleep 5`" in err
    assert doc["phase"] == "failed" and doc["reason"].startswith("stalled")
    assert not (repo / "src/producer/api.txt").exists()


def test_publish_merge_lands_the_integration_on_the_checkout_s_branch(
    tmp_path: Path, repo: Path
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    code, doc, _err = run(tmp_path, repo, one_producer(), "--publish", "merge")
    assert code == 0 and doc["phase"] == "completed", doc
    assert git(repo, "rev-parse", "HEAD^1") == head  # a merge commit on the branch
    assert (repo / "src/producer/api.txt").read_text() == "id\n"
    assert git(repo, "status", "--porcelain") == ""
