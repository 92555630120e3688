"""Process logs: several writers on one rotated file, captured output, ``lb logs``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.ops_service.conftest import Home

from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.logs_read import parse, read

WRITER = textwrap.dedent(
    """
    import sys
    from laneboard.supervisor.logs import LogFile
    log = LogFile(sys.argv[1], max_bytes=3000, keep=200)
    for i in range(300):
        log.info("tick", f"{sys.argv[2]} {i:03d}")
    """
)


def test_two_processes_share_one_rotated_file_without_losing_a_line(tmp_path: Path) -> None:
    path = tmp_path / "supervisor.log"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name]) for name in ("a", "b")
    ]
    assert [p.wait(60) for p in procs] == [0, 0]
    files = [path, *sorted(tmp_path.glob("supervisor.log.*"), key=lambda p: p.name)]
    assert len(files) > 10 and all(f.stat().st_size <= 3000 for f in files if f.suffix != ".lock")
    seen = [
        parse(x)["msg"] for f in files if f.suffix != ".lock" for x in f.read_text().splitlines()
    ]
    assert sorted(seen) == sorted(f"{n} {i:03d}" for n in ("a", "b") for i in range(300))


CAPTURED = textwrap.dedent(
    """
    import subprocess, sys
    from laneboard.supervisor.logs import LogFile, OutputCapture
    cap = OutputCapture(LogFile(sys.argv[1])).start()
    print("to stdout")
    sys.stderr.write("to stderr with token=s3cret\\n")
    subprocess.run(["sh", "-c", "echo from a child"], check=True)
    cap.stop()
    print("after the capture")
    """
)


def test_output_capture_puts_stdout_stderr_and_children_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    out = subprocess.run(
        [sys.executable, "-c", CAPTURED, str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "after the capture\n"
    lines = [parse(x) for x in path.read_text().splitlines()]
    got = [(x["component"], x["stream"], x["msg"]) for x in lines]
    stdout = [g for g in got if g[1] == "stdout"]  # each stream keeps its own order
    assert stdout == [("output", "stdout", "to stdout"), ("output", "stdout", "from a child")]
    assert [g for g in got if g[1] == "stderr"] == [
        ("output", "stderr", "to stderr with token=***")
    ]


def _fill(home: Home) -> None:
    sup = LogFile(str(home.state / "supervisor.log"), max_bytes=600, keep=9)
    srv = LogFile(str(home.state / "server.log"))
    for i in range(12):
        sup.info("poll", f"claimed card {i}", card=f"W-{i % 3}")
    sup.warn("workflow", "review of W-1 dispatched")
    srv.info("output", "GET /api/v1/cards 200", stream="stderr")


def test_lb_logs_reads_every_kept_file_in_order_and_filters_by_card(home: Home) -> None:
    _fill(home)
    assert (home.state / "supervisor.log.1").exists()
    out = home.lb("logs", "--lines", "0", "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    claimed = [int(r["msg"].split()[-1]) for r in rows if r["msg"].startswith("claimed")]
    assert claimed == list(range(12))
    assert {r["process"] for r in rows} == {"supervisor", "server"}
    out = home.lb("logs", "--card", "W-1")
    assert out.returncode == 0, out.stderr
    assert [re.search(r'msg="([^"]+)"', x).group(1) for x in out.stdout.splitlines()] == [  # type: ignore[union-attr]
        "claimed card 1",
        "claimed card 4",
        "claimed card 7",
        "claimed card 10",
        "review of W-1 dispatched",
    ]
    out = home.lb("logs", "--process", "server", "--lines", "1")
    assert out.stdout.startswith("[server] ") and "GET /api/v1/cards" in out.stdout


def test_lb_logs_names_a_cards_agent_output(home: Home) -> None:
    stderr_dir = home.state / "agents" / "stderr"
    stderr_dir.mkdir(parents=True)
    (stderr_dir / "worker-W-1-r1.log").write_text("raw\n")
    (stderr_dir / "worker-W-12-r1.log").write_text("raw\n")
    out = home.lb("logs", "--card", "W-1")
    assert out.stdout.splitlines()[-1] == f"# agent output: {stderr_dir / 'worker-W-1-r1.log'}"
    assert "W-12" not in out.stdout


def test_lb_logs_follow_prints_new_lines_across_a_rotation(home: Home) -> None:
    log = LogFile(str(home.state / "supervisor.log"), max_bytes=2000, keep=3)
    log.info("supervisor", "before the follow")
    proc = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "logs", "--follow", "--process", "supervisor"],
        env=home.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "before the follow" in proc.stdout.readline()
        log.info("pool", "first new line", card="W-9")
        assert "first new line" in proc.stdout.readline()
        for i in range(40):  # past max_bytes: the writer rotates while the reader follows
            log.info("tick", f"filler {i:02d}")
        log.info("pool", "after the rotation")
        got = [proc.stdout.readline() for _ in range(41)]
        assert [parse(x)["msg"] for x in got[:40]] == [f"filler {i:02d}" for i in range(40)]
        assert "after the rotation" in got[-1]
        assert (home.state / "supervisor.log.1").exists()
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert read(str(home.state), ("supervisor",))[-1].fields["msg"] == "after the rotation"
