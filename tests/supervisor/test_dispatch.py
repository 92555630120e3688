"""End to end: the real supervisor, the scripted agent as real processes, a real store."""

from __future__ import annotations

import json
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store, open_store
from laneboard.supervisor import records

from .helpers import RealNowClock, Running, config, settled, wait_for


def _trace_script(trace: Path, pause: float = 0.3) -> list[dict[str, object]]:
    return [
        {"run": f"echo start $(date +%s.%N) {{card}} $PWD $LANEBOARD_CARD >> {trace}"},
        {"comment": "working on {card}"},
        {"sleep": pause},
        {"run": f"echo end $(date +%s.%N) {{card}} >> {trace}"},
        {"deliver": "done"},
    ]


def _intervals(trace: Path) -> dict[str, list[tuple[float, float]]]:
    starts: dict[str, list[float]] = {}
    out: dict[str, list[tuple[float, float]]] = {}
    for line in trace.read_text().splitlines():
        parts = line.split()
        if parts[0] == "start":
            starts.setdefault(parts[2], []).append(float(parts[1]))
        else:
            out.setdefault(parts[2], []).append((starts[parts[2]].pop(0), float(parts[1])))
    return out


def _done_rows(store: Store) -> int:
    with store.read() as tx:
        return len(records.queue_rows(tx, states=("done",)))


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    cur = best = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


def test_twenty_cards_four_at_a_time(store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    trace = proj / "trace.log"  # the agents may write their project directory
    store = open_store(store_url, clock)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "W", path=str(proj))
    refs = [
        board.create_card(
            me, "W", f"card {i}", acceptance_mode="off", meta={"script": _trace_script(trace)}
        ).ref
        for i in range(20)
    ]
    with Running(store_url, config(tmp_path, max_concurrency=4), clock):
        wait_for(
            lambda: all(board.get(r).status.value in ("in_review", "done") for r in refs),
            timeout=120,
            what="all cards delivered",
        )
        wait_for(lambda: _done_rows(store) == 20, what="all rows done")
    spans = _intervals(trace)
    assert sorted(spans) == sorted(refs)
    assert all(len(v) == 1 for v in spans.values()), "a card was worked more than once"
    assert _max_overlap([s for v in spans.values() for s in v]) <= 4
    for line in trace.read_text().splitlines():
        parts = line.split()
        if parts[0] == "start":
            assert parts[3] == str(proj) and parts[4] == parts[2]  # cwd and credential
    for ref in refs:
        comments = board.comments(ref)
        assert [(c.author, c.author_kind.value) for c in comments] == [("worker", "agent")]
    with store.read() as tx:
        rows = records.queue_rows(tx, states=("done",))
        turns = tx.all("SELECT card_id, outcome FROM turns")
    assert len(rows) == 20 and len(turns) == 20
    assert {t["outcome"] for t in turns} == {"ok"}
    store.close()


def test_event_wakes_dispatch_without_fallback_tick(sqlite_store_url: str, tmp_path: Path) -> None:
    """The fallback tick is a day away on the injected clock: only the event path can wake."""
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "E", path=str(proj))
    cfg = config(tmp_path)
    cfg = cfg.__class__(
        **{
            **cfg.__dict__,
            "time": cfg.time.__class__(**{**cfg.time.__dict__, "tick_interval": 1500}),
        }
    )
    with Running(sqlite_store_url, cfg, clock) as run:
        wait_for(lambda: run.sup.ticks >= 1, what="first tick")
        marker = proj / "started"  # the session's own directory: the rest is not its to write
        board.create_card(
            me,
            "E",
            "late card",
            acceptance_mode="off",
            meta={"script": [{"run": f"touch {marker}"}, {"deliver": "ok"}]},
        )
        # the fallback tick is 1,500 s away, so only the write's wake-up can start the agent
        wait_for(marker.exists, timeout=60, what="agent started")
        assert run.sup.ticker.next_due_ms > clock.now_ms() + 60_000  # no fallback tick was due
    store.close()


def test_worker_session_resumed_after_release(sqlite_store_url: str, tmp_path: Path) -> None:
    """A same-round re-dispatch resumes the same native session with a resume prompt."""
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "R", path=str(proj))
    script = [
        {"lb": "card release {card}", "attempt": 1},
        {"deliver": "second turn delivers", "attempt": 2},
    ]
    ref = board.create_card(
        me, "R", "comes back", acceptance_mode="off", meta={"script": script}
    ).ref
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value in ("in_review", "done"), what="delivery")
        wait_for(lambda: settled(store), what="turn recorded")
    with store.read() as tx:
        turns = tx.all("SELECT native_id, prompt, outcome FROM turns ORDER BY id")
    assert len(turns) == 2
    assert turns[0]["native_id"] == turns[1]["native_id"]
    assert "continues" in turns[1]["prompt"] and "handed back" in turns[1]["prompt"]
    assert board.get(ref).claim_epoch == 2
    events = [e.type for e in board.events(limit=1000)]
    assert events.count("turn.started") == 2
    usage = board.card_detail(ref)["turns"]  # what lb card get shows
    assert [(u["round"], u["agent_kind"]) for u in usage] == [(1, "scripted"), (1, "scripted")]
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage)
    store.close()


def test_status_json_reports_pool_and_queue(sqlite_store_url: str, tmp_path: Path) -> None:
    from laneboard.supervisor.status import status_report

    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    cfg = config(tmp_path)
    with Running(sqlite_store_url, cfg, clock, machine="m1") as run:
        wait_for(lambda: run.sup.ticks >= 1, what="a tick")
        rep = status_report(store, clock, cfg, machine="m1")
        assert rep["supervisor"]["state"] == "running"
        assert json.loads(json.dumps(rep)) == rep
    rep = status_report(store, clock, cfg, machine="m1")
    assert rep["supervisor"]["state"] == "stopped"
    store.close()
