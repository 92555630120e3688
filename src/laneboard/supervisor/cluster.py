"""Several supervisors on one board: once-per-cluster passes and host failover.

**Once per cluster.** The passes that act on the whole board — workflow, patrol and lanes
(landing, clean-up), and the schedules (their own lease, ``board.schedules``) — run on
one supervisor at a time, under a lease row named ``pass:<name>``: a tick that runs one of them takes the
leases it can in one transaction before its passes (with its own ``tick:<machine>``
lease, when it does not keep that one already) and gives them back in one after, so the
cluster costs a tick two statements, not two transactions per pass. The
poll pass (claiming for this machine) and the session pool run on every machine. Each
run is recorded in ``pass_runs`` (who, where, when), which ``lb status`` shows.

Leases rather than PostgreSQL advisory locks: they work alike on both backends, a reader
sees who holds one (``lb status``), and a dropped connection does not end a pass midway.
What an advisory lock gives for free — release when its holder dies — failover gives
here: a fenced host's leases are deleted with its claims, so a pass is taken over at
once instead of after the lease's time-to-live.

**Failover.** Every supervisor heartbeats its instance row each ``pool_heartbeat``. Each
beat, a supervisor also looks for instances (on other machines) whose heartbeat is older
than ``failover_beats`` heartbeat intervals (default 3) and fences each in one
transaction, a compare-and-swap on the instance row so one fencer wins: the instance is
marked ``fenced``; every card it was running goes back to ``todo`` with its claim epoch
bumped (so whatever the old host still writes is refused with ``STALE_CLAIM``) and is
claimed by whichever machine polls next; its queue rows are closed, its running turns and
open sessions recorded ``interrupted``; its leases are deleted; one
``supervisor.fenced`` event names it all. A fenced host that comes back finds its
instance fenced at its next beat: it interrupts its sessions and registers anew, and its
closed queue rows are never started again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from laneboard.domain.clock import SystemClock
from laneboard.domain.model import system
from laneboard.domain.status import Status
from laneboard.store.tx import Tx
from laneboard.supervisor import instances, records

if TYPE_CHECKING:
    from laneboard.supervisor.runtime import Runtime

CLUSTER_PASSES = frozenset({"patrol", "workflow", "lanes"})
ACTIVE = ("pending", "processing", "interrupted")
PassFn = Callable[["Runtime", bool], dict[str, Any]]


def lease_name(name: str) -> str:
    return f"pass:{name}"


def holder_of(rt: Runtime) -> str:
    return rt.instance or f"{rt.machine}:{os.getpid()}"


def pass_ttl_ms(rt: Runtime) -> int:
    return max(rt.config.time.turn_timeout * 1000, 60_000)


def take(tx: Tx, rt: Runtime, names: list[str]) -> tuple[dict[str, int], dict[str, str]]:
    """In the tick's first transaction: the leases of these passes this supervisor got
    (pass -> its ``pass_runs`` row) and, for the others, who runs them now. One statement
    takes every free lease; the rest are read in one more, and each other holder is
    looked at once (a dead one's leases are broken, ``leases.dead_reason``)."""
    from laneboard.supervisor import leases

    holder = holder_of(rt)
    ttl = pass_ttl_ms(rt)
    taken = tx.acquire_locks([lease_name(n) for n in names], holder, ttl)
    got = [n for n in names if lease_name(n) in taken]
    rest = [n for n in names if lease_name(n) not in taken]
    held = tx.lock_holders([lease_name(n) for n in rest])
    dead: dict[str, str | None] = {}
    busy: dict[str, str] = {}
    for name in rest:
        other = held.get(lease_name(name))
        if other is None:  # released since: take it as one lease
            ok, note, who = leases.take(tx, lease_name(name), holder, ttl, rt.machine)
        else:
            if other not in dead:
                dead[other] = leases.dead_reason(tx, other, rt.machine)
            why = dead[other]
            ok, who, note = False, other, ""
            if why is not None:
                tx.release_lock(lease_name(name), other)
                ok = tx.acquire_lock(lease_name(name), holder, ttl)
                note = f"took over the {lease_name(name)} lease of {other} ({why})"
        if ok:
            got.append(name)
            if note:
                rt.log.warn("cluster", note)
        else:
            busy[name] = who or "another supervisor"
    got.sort(key=names.index)
    return tx.start_pass_runs(got, holder, rt.machine), busy


def held_elsewhere(rt: Runtime, names: list[str]) -> dict[str, str] | None:
    """Before a tick's first transaction, one read (and one per other holder, as ``take``
    looks at it): when another live holder holds every lease of ``names`` unexpired, who
    holds each — the tick skips those passes and needs no transaction for them. None when
    one of them may be taken (free, expired, its holder dead): ``take`` then decides."""
    from laneboard.supervisor import leases

    holder = holder_of(rt)
    busy: dict[str, str] = {}
    dead: dict[str, str | None] = {}
    with rt.store.autocommit() as tx:
        rows = tx.lease_rows([lease_name(n) for n in names])
        for name in names:
            r = rows.get(lease_name(name))
            if r is None or int(r["expires_at"]) <= int(r["now_ms"]) or r["holder"] == holder:
                return None
            other = str(r["holder"])
            if other not in dead:
                dead[other] = leases.dead_reason(tx, other, rt.machine)
            if dead[other] is not None:
                return None
            busy[name] = other
    return busy


def one_statement(rt: Runtime) -> bool:
    """Whether a resident's tick takes and gives back its pass leases in one statement
    each (``store.pass_sql``: PostgreSQL, where each round trip counts)."""
    return rt.store.dialect == "postgresql"


def take_alone(rt: Runtime, names: list[str]) -> tuple[dict[str, int], list[str]]:
    """``take`` for the leases that are free, expired or already this supervisor's, in
    one statement of its own: pass -> its ``pass_runs`` row, and the passes it did not
    get (held by another: ``take`` looks at them in a transaction)."""
    from laneboard.store.pass_sql import take_and_start

    passes = {lease_name(n): n for n in names}
    runs = take_and_start(rt.store, passes, holder_of(rt), rt.machine, pass_ttl_ms(rt))
    return runs, [n for n in names if n not in runs]


def give_back_alone(rt: Runtime, runs: dict[str, int]) -> None:
    """``give_back`` in one statement of its own."""
    from laneboard.store.pass_sql import end_and_give_back

    end_and_give_back(rt.store, holder_of(rt), runs, [lease_name(n) for n in runs])


def give_back_quietly(rt: Runtime, runs: dict[str, int]) -> None:
    """``give_back_alone`` when a tick fails after ``take_alone``: its leases would
    otherwise wait out their time to live. A failure here is logged (the database may
    be what failed); the leases then expire."""
    if not runs:
        return
    try:
        give_back_alone(rt, runs)
    except Exception as exc:
        rt.log.warn("cluster", f"giving back pass leases failed: {type(exc).__name__}: {exc}")


def give_back(tx: Tx, rt: Runtime, runs: dict[str, int]) -> None:
    """In the tick's last transaction: the runs end, their leases are released."""
    if runs:
        tx.finish_pass_runs(list(runs.values()))
        tx.release_locks(holder_of(rt), [lease_name(n) for n in runs])


# -- failover ----------------------------------------------------------------------------
def failover_bound_ms(rt: Runtime) -> int:
    return rt.config.failover_beats * rt.config.time.pool_heartbeat * 1000


def declared(rt: Runtime) -> dict[str, Any]:
    """What an instance tells the others in its row, measured at each beat: how long
    without a beat it may be fenced after (its own ``failover_beats`` of its own
    ``pool_heartbeat``, which another machine's settings do not know), how far its
    clock, which stamps its beats, is ahead of the database server's, and the agent kind
    it forces every role onto (``--agent``), which no settings file says."""
    rt.clock_offset_ms = clock_offset_ms(rt)
    return {
        "failover_after_ms": failover_bound_ms(rt),
        "clock_offset_ms": rt.clock_offset_ms,
        # ``lb start --agent KIND``: ``lb status`` in another process judges the roles by it
        "force_agent": rt.config.force_agent or None,
        # its pooled connections at most (None: a board that is a file): ``lb doctor``
        # adds them up against what the database server allows
        "db_connections": rt.store.max_connections,
    }


def clock_offset_ms(rt: Runtime) -> int:
    """How far this machine's wall clock is ahead of the database server's, in ms (0 on a
    board that is a file, or with a clock that is not the wall clock: a test's)."""
    clock = rt.store.clock
    if not isinstance(clock, SystemClock):
        return 0
    with rt.store.autocommit() as tx:
        before = clock.now_ms()
        server = tx.database_now_ms()
        after = clock.now_ms()
    return 0 if server is None else (before + after) // 2 - server


def _declared(row: dict[str, Any], key: str) -> int | None:
    """An integer ``row``'s instance declared in its info (None: it declared none)."""
    got = instances.info_of(row).get(key)
    return got if isinstance(got, int) and not isinstance(got, bool) else None


def _cutoff(row: dict[str, Any], now: int, own_bound: int, own_offset: int) -> int:
    """The heartbeat, on ``row``'s instance's own clock, before which it is silent: its
    declared bound back from now, both clocks brought to the server's."""
    bound = _declared(row, "failover_after_ms")
    offset = _declared(row, "clock_offset_ms") or 0
    return now - own_offset + offset - (bound if bound and bound > 0 else own_bound)


def sweep(rt: Runtime) -> list[dict[str, Any]]:
    """Fence every other instance whose heartbeat is older than its failover bound."""
    out: list[dict[str, Any]] = []
    with rt.store.read() as tx:
        now, own = tx.now(), failover_bound_ms(rt)
        silent = [
            (r, cutoff)
            for r in tx.live_supervisors_everywhere()
            if r["id"] != rt.instance
            and int(r["heartbeat_at"]) < (cutoff := _cutoff(r, now, own, rt.clock_offset_ms))
        ]
    for row, cutoff in silent:
        with rt.store.write() as tx:
            done = fence(tx, rt, row, cutoff)
        if done is not None:
            rt.log.warn(
                "failover",
                f"fenced {done['instance']} (no heartbeat since {done['heartbeat_at']})",
                cards=",".join(done["cards"]),
            )
            out.append(done)
    return out


def fence(tx: Tx, rt: Runtime, row: dict[str, Any], cutoff: int) -> dict[str, Any] | None:
    """Fence one instance and take back its cards (None: someone else fenced it first,
    or it beat meanwhile)."""
    iid, machine = str(row["id"]), str(row["machine"])
    if not tx.fence_supervisor(iid, cutoff):
        return None
    refs: list[str] = []
    card_ids: list[int] = []
    for q in records.queue_rows(tx, machine=machine, states=ACTIVE, limit=10_000):
        tx.lose_running_turns(q.id, "interrupted")
        records.set_row(
            tx, q.id, state="done", owner=None, pid=None, payload={**q.payload, "note": "fenced"}
        )
        card = tx.card(q.card_id)
        if card is None or card.status is not Status.IN_PROGRESS or card.claim_epoch != q.epoch:
            continue
        fields = {
            "status": Status.TODO.value,
            "status_since": tx.now(),
            "holder": None,
            "holder_kind": None,
            "session_id": None,
            "heartbeat_at": None,
            "claim_epoch": card.claim_epoch + 1,
        }
        if tx.update_card(card.id, card.version, fields):
            refs.append(card.ref)
            card_ids.append(card.id)
            tx.append_event(
                "card.fenced",
                system("Orchestrator"),
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"ref": card.ref, "epoch": card.claim_epoch + 1, "host": machine},
            )
    sessions = tx.interrupt_sessions(card_ids)
    leases = tx.release_locks_of(iid) + tx.release_locks_of(f"{iid}/tick")
    payload = {
        "instance": iid,
        "machine": machine,
        "by": rt.instance,
        "cards": refs,
        "sessions": sessions,
        "leases": leases,
        "heartbeat_at": int(row["heartbeat_at"]),
    }
    tx.append_event("supervisor.fenced", system("Orchestrator"), payload=payload)
    return payload


def fenced(rt: Runtime) -> bool:
    """Whether this supervisor's own instance was fenced by another."""
    if rt.instance is None:
        return False
    with rt.store.read() as tx:
        return tx.supervisor_state(rt.instance) == "fenced"


# -- what lb status shows ------------------------------------------------------------------
def summary(tx: Tx) -> dict[str, Any]:
    from laneboard.domain.clock import iso

    leases = [
        {
            "pass": str(r["name"]).removeprefix("pass:"),
            "holder": r["holder"],
            "since": iso(r["acquired_at"]),
        }
        for r in tx.pass_leases()
    ]
    running = {x["pass"]: x["holder"] for x in leases}
    last = [
        {
            "pass": r["name"],
            "machine": r["machine"],
            "holder": r["holder"],
            "started_at": iso(r["started_at"]),
            "finished_at": iso(r["finished_at"]),
            "running_on": running.get(str(r["name"])),  # None: not running now
        }
        for r in tx.last_pass_runs()
    ]
    return {"leases": leases, "last_runs": last}
