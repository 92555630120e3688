"""A card's session files — stderr, agent home, temporary directory, token — are pruned
with its sessions once it ends; a running card's are kept, and so are the director's."""

from __future__ import annotations

from pathlib import Path

from tests.supervisor.helpers import RealNowClock, Running, config, wait_for

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.supervisor.session_files import session_files


def test_session_file_names_are_read_per_card(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for rel in ("agents/stderr/worker-WEB-1-r1.log", "agents/stderr/reviewer-WEB-12-r2.log",
                "agents/stderr/director-ab12.log", "agents/stderr/worker-WEB-1-r2.log"):  # fmt: skip
        (state / rel).parent.mkdir(parents=True, exist_ok=True)
        (state / rel).write_text("x")
    for rel in ("agents/homes/claude-worker-WEB-1", "agents/homes/codex-director-ab12",
                "agents/tmp/claude-worker-WEB-1", "tokens/WEB-1", "tokens/WEB-12"):  # fmt: skip
        (state / rel).mkdir(parents=True)
    got = {ref: sorted(Path(p).relative_to(state).as_posix() for p in paths)
           for ref, paths in session_files(str(state)).items()}  # fmt: skip
    assert got == {
        "WEB-1": ["agents/homes/claude-worker-WEB-1", "agents/stderr/worker-WEB-1-r1.log",
                  "agents/stderr/worker-WEB-1-r2.log", "agents/tmp/claude-worker-WEB-1",
                  "tokens/WEB-1"],
        "WEB-12": ["agents/stderr/reviewer-WEB-12-r2.log", "tokens/WEB-12"],
    }  # fmt: skip


def test_a_finished_cards_session_files_are_pruned(
    store_url: str, repo: Path, tmp_path: Path
) -> None:
    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "S", path=str(repo))
    done = board.create_card(human(), "S", "delivers", acceptance_mode="off",
                             meta={"script": [{"write": "a.txt", "content": "a\n"},
                                              {"deliver": "added a.txt"}]}).ref  # fmt: skip
    busy = board.create_card(human(), "S", "keeps working", meta={"script": [{"hang": True}]}).ref
    state = tmp_path / "state"

    def files(ref: str) -> list[str]:
        return sorted(session_files(str(state)).get(ref, []))

    with Running(store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(done).status.value == "done", timeout=120, what="landing")
        wait_for(lambda: len(files(busy)) >= 3, timeout=60, what="the busy card's session")
        wait_for(lambda: files(done) == [], timeout=60, what="the finished card pruned")
        kept = files(busy)
    names = {Path(p).parent.name for p in kept}
    assert names == {"stderr", "homes", "tmp", "tokens"}, kept  # a running card keeps all of it
    assert not (state / "tokens" / done).exists()
    assert not list((state / "agents" / "homes").glob(f"*-{done}"))
    store.close()
