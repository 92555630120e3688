"""A running turn's transcript, written to the store as it happens.

The pool hands ``TranscriptSink.on_event`` to ``Session.send``: each adapter event is
normalized (``domain.transcript``) and buffered; a small thread writes the buffer every
``FLUSH_S`` (when it holds anything) in one transaction with one ``turn.output`` event, which is what wakes the
dashboard's stream, ``lb card transcript --follow`` and every other follower; what could
not be sent while the database was away is kept for the next write. When the
turn ends, ``close`` adds what the agent's stream did not say itself (a command agent's
output, the turn's end and usage, its error) and writes the rest (``close_in``: in the
transaction that records the turn's end).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from laneboard.agents.base import AgentEvent, TurnResult
from laneboard.domain.model import Card
from laneboard.domain.transcript import Entry, entry, normalize
from laneboard.store.base import nothing_written
from laneboard.store.transcript_sql import ROWS_PER_STATEMENT, append_output, append_output_in

if TYPE_CHECKING:
    from laneboard.store.tx import Tx
    from laneboard.supervisor.runtime import Runtime

FLUSH_S = 0.5  # a follower sees a running turn's output within half a second


class TranscriptSink:
    def __init__(self, rt: Runtime, card: Card, turn_id: int, kind: str) -> None:
        self.rt, self.card, self.turn_id, self.kind = rt, card, turn_id, kind
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._buf: list[tuple[int, int, Entry]] = []
        self._seq = 0
        self._seen: set[str] = set()
        self._closed = threading.Event()
        self._in_tx: set[int] = set()  # seqs close_in wrote in a transaction not committed
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name=f"transcript-{turn_id}"
        )
        self._thread.start()

    def add(self, e: Entry) -> None:
        with self._lock:
            self._seq += 1
            self._seen.add(e["type"])
            self._buf.append((self._seq, self.rt.now(), e))

    def on_event(self, ev: AgentEvent) -> None:
        e = normalize(self.kind, ev.kind, ev.data)
        if e is not None:
            self.add(e)

    def flush(self) -> None:
        """Write what the buffer holds, a transaction per ``ROWS_PER_STATEMENT`` entries. A
        write that never reached the database (no connection: it is restarting) puts its
        entries and the rest back ahead of what came since, for the next write; one that
        may have been committed does not, so no entry is written twice."""
        with self._write_lock:
            with self._lock:
                batch, self._buf = self._buf, []
            for at in range(0, len(batch), ROWS_PER_STATEMENT):
                part = batch[at : at + ROWS_PER_STATEMENT]
                try:
                    append_output(self.rt.store, self.rt.actor, self.card, self.turn_id, part)
                except BaseException as exc:
                    if nothing_written(exc):
                        with self._lock:
                            self._buf[:0] = batch[at:]
                    raise

    def close(self, result: TurnResult, outcome: str) -> None:
        """The turn ended: add what its stream left out and write everything."""
        self._end(result, outcome)
        self._write()

    def close_in(self, tx: Tx, result: TurnResult, outcome: str) -> None:
        """The turn ended: add what its stream left out and write what is left in ``tx``,
        the transaction that records the turn's end. Kept until ``committed``: should that
        transaction fail, ``abandon`` still writes it."""
        self._end(result, outcome)
        # not under ``_write_lock``: a timed flush still under way may wait for this very
        # transaction's write lock (SQLite); what it puts back is told apart by seq
        with self._lock:
            batch = list(self._buf)
        self._in_tx = {seq for seq, _, _ in batch}
        if batch:
            append_output_in(tx, self.rt.actor, self.card, self.turn_id, batch)

    def committed(self) -> None:
        """The transaction ``close_in`` wrote in committed: its entries are written."""
        with self._lock:
            self._buf = [b for b in self._buf if b[0] not in self._in_tx]
        self._in_tx = set()

    def _end(self, result: TurnResult, outcome: str) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        if result.final_text and "message" not in self._seen:
            self.add(entry("message", result.final_text))
        if result.error and "error" not in self._seen:
            self.add(entry("error", result.error, is_error=True))
        if "result" not in self._seen or outcome != "ok":
            usage = result.usage.to_dict()
            text = (
                f"turn {outcome}: {usage['input_tokens']} in / {usage['output_tokens']} out tokens"
            )
            self.add(entry("result", text, args=usage, exit_code=result.exit_code,
                           is_error=outcome != "ok"))  # fmt: skip

    def abandon(self) -> None:
        """The turn broke off without a result: write what arrived and stop."""
        self._closed.set()
        self._write()

    def _write(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # the transcript must never break the turn
            self.rt.log.warn("pool", f"transcript write failed: {exc}", card=self.card.ref)

    def _loop(self) -> None:
        while not _pause(self._closed, FLUSH_S):
            self._write()


def _pause(closed: threading.Event, seconds: float) -> bool:
    """The timed flush's wait: True once the sink is closed."""
    return closed.wait(seconds)


def stop_requested(rt: Runtime, turn_id: int) -> str | None:
    """Who asked to stop the turn (``lb card stop``), or ``None``."""
    try:
        with rt.store.autocommit() as tx:
            return tx.stop_requested(turn_id)
    except Exception as exc:  # a failed read must not end the watchdog
        rt.log.warn("pool", f"could not read the turn's stop request: {exc}")
        return None
