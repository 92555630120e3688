"""Run the real supervisor in a thread against a store, with scripted agents."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from laneboard.config import SupervisorConfig
from laneboard.domain.clock import Clock
from laneboard.store import Store, open_store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Supervisor
from laneboard.supervisor.runtime import Runtime


class RealNowClock:
    """A clock that starts at real time and moves with it, plus any manual advance."""

    def __init__(self) -> None:
        self.offset = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset

    def advance(self, *, minutes: float = 0, seconds: float = 0) -> None:
        self.offset += int(minutes * 60_000 + seconds * 1000)


def config(tmp: Path, **kw: Any) -> SupervisorConfig:
    base = SupervisorConfig(
        default_agent="scripted", state_dir=str(tmp / "state"), event_poll_ms=50, debounce_ms=50
    )
    return replace(base, **kw).validate()


class Running:
    def __init__(
        self, store_url: str, cfg: SupervisorConfig, clock: Clock, machine: str = "test-machine"
    ) -> None:
        self.store: Store = open_store(store_url, clock)
        self.rt = Runtime(self.store, cfg, machine, LogFile(cfg.state_path("supervisor.log")))
        self.sup = Supervisor(self.rt)
        self.thread = threading.Thread(target=self.sup.run, daemon=True)

    def __enter__(self) -> Running:
        self.sup.start()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sup.stop_event.set()
        self.thread.join(60)
        self.store.close()


def wait_for(pred: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Wait for real processes to reach a state (never used to let board time pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def settled(store: Store) -> bool:
    """No queue row is pending or processing (every turn's outcome is recorded)."""
    with store.read() as tx:
        return not tx.all("SELECT id FROM queue WHERE state IN ('pending', 'processing')")


def count_calls(monkeypatch: Any, obj: Any, name: str) -> list[int]:
    """Count the calls of ``obj.name`` from now on (one item per call), passing each on."""
    calls: list[int] = []
    real = getattr(obj, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, counted)
    return calls


def unadmittable_project(tmp: Path, name: str = "occupied") -> Path:
    """A git project whose cards' lane slots are taken (``occupy_slot``): a failure of
    the card's own, counted toward its bound (a missing directory is the project's)."""
    import subprocess

    repo = tmp / name
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com",
                        "-c", "user.name=T", *args], check=True)  # fmt: skip
    return repo


def occupy_slot(repo: Path, ref: str) -> None:
    """Put a checkout of another branch where the card's lane would go."""
    import subprocess

    slot = repo / ".worktrees" / ref
    slot.mkdir(parents=True)
    for args in (["init", "-q", "-b", "other"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(slot), "-c", "user.email=t@example.com",
                        "-c", "user.name=T", *args], check=True)  # fmt: skip
