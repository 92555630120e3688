"""A shared-remote project's lane under the real sandbox: the agent works in its lane of
this machine's clone (history readable, the clone and the state directory out of reach),
cannot push to the remote itself, and its verified work lands on the remote's base branch
through the runtime alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from tests.cluster.test_remote_lanes import bare_remote
from tests.supervisor.helpers import RealNowClock, wait_for
from tests.supervisor.test_loud_failures import lb_env, spawn_start

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.workspace.git import git

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_an_agent_in_a_remote_projects_lane_lands_only_through_the_runtime(
    store_url: str, tmp_path: Path
) -> None:
    bare, _seed = bare_remote(tmp_path)
    state = tmp_path / "xdg-state"
    probe = (
        "git log --oneline | wc -l; "
        f"git push {bare} HEAD:refs/heads/main >/dev/null 2>&1 && echo PUSHED-MAIN; "
        f"git push {bare} HEAD:refs/heads/sneak >/dev/null 2>&1 && echo PUSHED-SNEAK; "
        f"cat {state}/laneboard/supervisor.log >/dev/null 2>&1 && echo READ-LOG; "
        f"echo x >> {state}/laneboard/clones/R/README.md 2>/dev/null && echo WROTE-CLONE; "
        "echo probed"
    )
    store = open_store(store_url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "R", remote=str(bare))
    script = [{"run": probe}, {"write": "feature.txt", "content": "the work\n"}, {"deliver": "ok"}]
    # the card's check runs the same probe: in its own sandbox, as the agent's code would
    card = board.create_card(
        human(), "R", "a change", acceptance_mode="off", meta={"script": script},
        checks=[probe.replace("echo probed", "echo check-probed")],
    )  # fmt: skip
    config = '[supervisor]\nsandbox = "bwrap"\n'
    env = lb_env(tmp_path, store_url, config, os.environ["PATH"])
    proc = spawn_start(env)
    try:
        wait_for(lambda: board.get(card.ref).status.value == "done", timeout=120,
                 what="the card done")  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "SANDBOX" not in err, err
    with store.read() as tx:
        outputs = [
            json.loads(r["entry"]).get("output", "")
            for r in tx.all("SELECT entry FROM transcript WHERE type = 'command'")
        ]
    said = "".join(outputs).split()
    assert "probed" in said and said[0] != "0", outputs  # the lane's history is readable
    for bad in ("PUSHED-MAIN", "PUSHED-SNEAK", "READ-LOG", "WROTE-CLONE"):
        assert bad not in said, outputs
    log = Path(str(board.reports(card.ref)[0].evidence[0].log_path)).read_text()
    checked = log.split("\n", 1)[1].split()  # what it printed, after the command line
    assert "check-probed" in checked and checked[0] != "0", log  # the history is readable
    for bad in ("PUSHED-MAIN", "PUSHED-SNEAK", "READ-LOG", "WROTE-CLONE"):
        assert bad not in checked, checked
    assert (state / "laneboard" / "supervisor.log").exists()  # there, but not for the agent
    heads = git(str(bare), "for-each-ref", "--format=%(refname)", "refs/heads").out.split()
    assert "refs/heads/sneak" not in heads
    assert git(str(bare), "show", "main:feature.txt").out == "the work\n"
    landed = git(str(bare), "log", "-1", "--format=%s", "main").out
    assert landed.startswith("Land R-1"), landed
    store.close()
