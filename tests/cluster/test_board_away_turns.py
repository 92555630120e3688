"""A turn whose agent found the board out of reach (the database restarting or failing over
while the agent worked) is not the agent's failure: it is not counted toward the card's
hold, and the agent is asked again once the board is back.

Before, the supervisor's board socket refused the agent's calls (``STORE_UNAVAILABLE``),
the agent gave up its turn, and three such outages held the card (``the agent failed 3
times``) as if the agent were broken, waiting for a person."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.cluster.conftest import board_role
from tests.conftest import PG_BASE
from tests.supervisor.helpers import RealNowClock, settled, wait_for
from tests.supervisor.test_loud_failures import lb_env, spawn_start

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store, open_store

OUTAGES = 3  # the agent-failure bound (``outcomes.RECOVERY_BOUND``): the card was held


@pytest.fixture
def own_role(named_pg_url: str) -> Iterator[tuple[str, str]]:
    """(the board's URL as its own role, that role): the test takes the board out of reach
    of its processes alone by refusing the role's logins and ending its sessions."""
    with board_role(named_pg_url, "lb_away_") as got:
        yield got
        _back(got[1])  # its logins allowed again, so that it can be dropped


def _away(role: str) -> None:
    """No process of the board can connect, and every session it had is ended."""
    with psycopg.connect(PG_BASE, autocommit=True) as admin:
        admin.execute(f"ALTER ROLE {role} NOLOGIN")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        left = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
        wait_for(lambda: admin.execute(left, (role,)).fetchone() == (0,), timeout=30,
                 what="the board's sessions ended")  # fmt: skip


def _back(role: str) -> None:
    with psycopg.connect(PG_BASE, autocommit=True) as admin:
        admin.execute(f"ALTER ROLE {role} LOGIN")


GIVE_UP = {
    # the agent's turn fails (``agent_failure`` was the hold)
    "fails": {"run": "echo 'the board does not answer' >&2; exit 1"},
    # the agent ends its turn without delivering (``no_delivery`` was the hold)
    "ends undelivered": {"say": "the board does not answer; I will try later"},
}


def _script(flags: Path, give_up: dict[str, object]) -> list[dict[str, object]]:
    """Each of the first ``OUTAGES`` turns waits for the board to go away, reads its card
    (refused), waits for the board to come back and gives up, as an agent does when every
    call it makes is refused; the next turn delivers."""
    steps: list[dict[str, object]] = []
    for n in range(1, OUTAGES + 1):
        wait = f"touch {flags}/working-{n}; while [ ! -f {flags}/away-{n} ]; do sleep 0.05; done"
        back = f"touch {flags}/refused-{n}; while [ ! -f {flags}/back-{n} ]; do sleep 0.05; done"
        steps += [
            {"attempt": n, "run": wait},
            {"attempt": n, "lb": "card get {card}", "check": False},
            {"attempt": n, "run": back},
            {"attempt": n, **give_up},
        ]
    return [*steps, {"attempt": OUTAGES + 1, "deliver": "ok"}]


def _one_card(
    url: str, named_pg_url: str, tmp_path: Path, script: list[dict[str, object]]
) -> tuple[Store, Board, str]:
    """(the test's own store, never away; its board; the ref of the one card, which runs
    ``script``) on a fresh board at ``url``."""
    open_store(url, RealNowClock(), create=True).close()
    store = open_store(named_pg_url, RealNowClock())
    board = Board(store)
    (tmp_path / "proj").mkdir()
    board.add_project(human(), "AW", path=str(tmp_path / "proj"))
    card = board.create_card(
        human(), "AW", "rides out outages", acceptance_mode="off", meta={"script": script}
    )
    return store, board, card.ref


def _start(tmp_path: Path, url: str, *, retry_s: str | None) -> subprocess.Popen[str]:
    """``lb start`` on the board (as its own role), its agents' ``lb`` trying a refused
    call again for ``retry_s`` seconds (None: the default)."""
    config = '[supervisor]\nsandbox = "off"\nsandbox_reason = "the database test"\n'
    env = lb_env(tmp_path, url, config, os.environ["PATH"])
    if retry_s is not None:
        env["LANEBOARD_RETRY_S"] = retry_s  # passed on to the agent sessions
    return spawn_start(env)


def _stop(proc: subprocess.Popen[str], store: Store, role: str) -> str:
    """Let the board's role in again, stop the supervisor and close the test's store; the
    supervisor's stderr."""
    _back(role)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    store.close()
    return err


@pytest.mark.parametrize("agent", sorted(GIVE_UP))
def test_turns_refused_by_a_board_out_of_reach_do_not_hold_the_card(
    own_role: tuple[str, str], named_pg_url: str, tmp_path: Path, agent: str
) -> None:
    url, role = own_role
    flags = tmp_path / "flags"
    flags.mkdir()
    store, board, ref = _one_card(url, named_pg_url, tmp_path, _script(flags, GIVE_UP[agent]))
    proc = _start(tmp_path, url, retry_s="0.5")  # the outage outlasts the agent's lb retrying
    try:
        for n in range(1, OUTAGES + 1):
            wait_for(lambda n=n: (flags / f"working-{n}").exists() or proc.poll() is not None,
                     timeout=120, what=f"turn {n} working")  # fmt: skip
            assert proc.poll() is None, "the supervisor exited"
            _away(role)
            (flags / f"away-{n}").touch()
            wait_for(lambda n=n: (flags / f"refused-{n}").exists(), timeout=120,
                     what=f"turn {n}'s refused call")  # fmt: skip
            _back(role)
            (flags / f"back-{n}").touch()
        wait_for(lambda: board.get(ref).status.value in ("done", "blocked") or proc.poll() is not None,
                 timeout=180, what="the card delivered or held")  # fmt: skip
        card = board.get(ref)
        assert card.status.value == "done", (card.status, card.meta)
        # the workflow may accept the delivery before the turn's end is recorded
        wait_for(lambda: settled(store), timeout=60, what="the last turn's outcome")
        with store.read() as tx:
            turns = tx.all(
                "SELECT outcome FROM turns WHERE card_id = ? ORDER BY id", [board.get(ref).id]
            )
            recoveries = tx.all("SELECT recoveries FROM queue WHERE card_id = ?", [card.id])
        outcome = "failed" if agent == "fails" else "ok"
        assert [t["outcome"] for t in turns] == [outcome] * OUTAGES + ["ok"]
        assert all(r["recoveries"] == 0 for r in recoveries), recoveries
    finally:
        stderr = _stop(proc, store, role)
    assert "Traceback" not in stderr, stderr


def test_an_outage_shorter_than_the_agents_retry_is_not_seen_by_the_agent(
    own_role: tuple[str, str], named_pg_url: str, tmp_path: Path
) -> None:
    """The board goes away while the agent reads its card, and comes back while its ``lb``
    is still trying again (``LANEBOARD_RETRY_S``, default 30 s): the read answers, and the
    card is delivered in that one turn, nothing refused and nothing counted."""
    url, role = own_role
    flags = tmp_path / "flags"
    flags.mkdir()
    err = flags / "lb-stderr"
    script: list[dict[str, object]] = [
        {"run": f"touch {flags}/working; while [ ! -f {flags}/away ]; do sleep 0.05; done"},
        {"run": f"{sys.executable} -m laneboard.cli.main card get {{card}} 2> {err}"},
        {"deliver": "ok"},
    ]
    store, board, ref = _one_card(url, named_pg_url, tmp_path, script)
    proc = _start(tmp_path, url, retry_s=None)
    try:
        wait_for(lambda: (flags / "working").exists() or proc.poll() is not None,
                 timeout=120, what="the turn working")  # fmt: skip
        assert proc.poll() is None, "the supervisor exited"
        _away(role)
        (flags / "away").touch()
        wait_for(lambda: err.exists() and "trying again" in err.read_text(), timeout=60,
                 what="the agent's lb trying again")  # fmt: skip
        _back(role)
        wait_for(lambda: board.get(ref).status.value == "done" or proc.poll() is not None,
                 timeout=120, what="the card delivered")  # fmt: skip
        card = board.get(ref)
        assert card.status.value == "done", (card.status, card.meta)
        wait_for(lambda: settled(store), timeout=60, what="the turn's outcome")
        with store.read() as tx:
            turns = tx.all("SELECT outcome FROM turns WHERE card_id = ?", [card.id])
            rows = tx.all("SELECT recoveries, payload FROM queue WHERE card_id = ?", [card.id])
        assert [t["outcome"] for t in turns] == ["ok"]
        assert all(r["recoveries"] == 0 and "board_away" not in r["payload"] for r in rows)
        (notice,) = err.read_text().splitlines()
        assert notice.startswith("lb: ") and notice.endswith("trying again for up to 30s")
    finally:
        stderr = _stop(proc, store, role)
    assert "Traceback" not in stderr, stderr
