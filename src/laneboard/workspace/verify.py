"""Delivery verification by the runtime: scope of the changes, then the checks.

The changed paths since the lane's base (committed, staged, unstaged and untracked)
must lie within the card's ``allowed_paths``; then each of the card's ``checks`` and
the project's ``review_gate`` runs in the lane with a timeout, inside the OS sandbox when
one is given (``agents.check_sandbox``: they run the agent's code). Every output is kept as a
log file under the project checkout's ``.laneboard/lanes/<lane>/<card>/checks/`` (it
outlives the lane's tree; its first and last bytes when it is long: ``check_log``) and
summarized as evidence.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Card, Evidence
from laneboard.domain.verdict import LANE_HEAD
from laneboard.store import Store
from laneboard.workspace import git as g
from laneboard.workspace.check_log import CappedLog, copy_output
from laneboard.workspace.lanes import Lane, conflict_to_resolve, lane_for, publish

DEFAULT_CHECK_TIMEOUT_S = 120.0
TIMEOUT_EXIT = 124
TAIL_LINES = 20
TAIL_CHARS = 2000
RUNTIME_DIRS = (".laneboard/", ".worktrees/")

if TYPE_CHECKING:
    from laneboard.agents.check_sandbox import CheckSandbox
    from laneboard.agents.sandbox import Sandbox


@dataclass
class Verification:
    ok: bool
    evidence: list[Evidence] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    failed: Evidence | None = None
    message: str = ""
    fix: str = ""
    directory: str | None = None
    lane: Lane | None = None
    changed: list[str] = field(default_factory=list)

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.violations:
            out["paths"] = self.violations
        if self.failed is not None:
            out["command"] = self.failed.command
            out["exit_code"] = self.failed.exit_code
            out["log_path"] = self.failed.log_path
        return out


def settings(store: Store, project_id: int, checkout: str | None = None) -> dict[str, Any]:
    """The project's resolved settings (its file, the board, the user's file, defaults);
    ``checkout``: where its file is read on this machine (a clone of its remote)."""
    from dataclasses import replace

    from laneboard.config import effective_project_config

    with store.read() as tx:
        project, stored = tx.project(id=project_id), tx.project_config(project_id)
    if project is not None and checkout is not None:
        project = replace(project, path=checkout)
    return effective_project_config(project, stored)


def check_timeout(cfg: dict[str, Any]) -> float:
    raw = cfg.get("check_timeout", DEFAULT_CHECK_TIMEOUT_S)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return DEFAULT_CHECK_TIMEOUT_S
    return value if value > 0 else DEFAULT_CHECK_TIMEOUT_S


def gate_commands(card: Card, cfg: dict[str, Any]) -> list[str]:
    gate = cfg.get("review_gate") or []
    extra = [gate] if isinstance(gate, str) else [str(c) for c in gate]
    return [*card.checks, *[c for c in extra if c.strip()]]


# -- scope -------------------------------------------------------------------------------
def changed_paths(root: str, base_commit: str) -> list[str]:
    """Repository-relative paths changed since ``base_commit``, including uncommitted."""
    found: set[str] = set()
    for args in (
        ("diff", "--name-only", "--no-renames", "-z", f"{base_commit}...HEAD"),
        ("diff", "--name-only", "--no-renames", "-z", "HEAD"),
        ("ls-files", "--others", "--exclude-standard", "-z"),
    ):
        found.update(p for p in g.git(root, *args).out.split("\0") if p)
    return sorted(p for p in found if not p.startswith(RUNTIME_DIRS))


def within(path: str, allowed: list[str] | tuple[str, ...]) -> bool:
    if not allowed:
        return True
    for prefix in allowed:
        pre = prefix.rstrip("/")
        if path == pre or path.startswith(pre + "/"):
            return True
    return False


def scope_violations(
    root: str, changed: list[str], allowed: list[str] | tuple[str, ...]
) -> list[str]:
    real_root = os.path.realpath(root)
    bad: list[str] = []
    for p in changed:
        full = os.path.join(root, p)
        if not within(p, allowed):
            bad.append(p)
        elif os.path.islink(full):
            target = os.path.realpath(full)
            if target != real_root and not target.startswith(real_root + os.sep):
                bad.append(f"{p} (symlink escapes the repository)")
    return bad


# -- checks ------------------------------------------------------------------------------
def _slug(cmd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", cmd).strip("-")[:40] or "check"


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    lines = text.rstrip("\n").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


def check_env() -> dict[str, str]:
    """The user's environment without laneboard's own settings and credentials."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}


def run_check(
    cmd: str, cwd: str, log_path: str, timeout: float, sandbox: Sandbox | None = None
) -> Evidence:
    """Run one shell command in ``cwd`` (in ``sandbox`` when given, with an empty
    ``/tmp`` of its own); its output goes to ``log_path``, which keeps its first
    ``LOG_HEAD`` and last ``LOG_TAIL`` bytes (``check_log``)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "wb") as fh:
        fh.write(f"$ {cmd}\n".encode())
        fh.flush()
        proc = _start(cmd, cwd, sandbox)
        try:
            log = CappedLog(fh)
            timed_out = copy_output(proc, log, time.monotonic() + timeout)
            log.finish()
        finally:
            if sandbox is not None:
                _clear_tmp(sandbox)
        code = TIMEOUT_EXIT if timed_out else proc.returncode
        if timed_out:
            fh.write(f"\n[laneboard] timed out after {timeout:g} s; killed\n".encode())
    digest, end = _digest_and_end(log_path)
    summary = _tail(end)
    if timed_out:
        summary = f"timed out after {timeout:g} s\n{summary}"
    return Evidence(cmd, code, "sha256:" + digest, summary, log_path)


def _start(cmd: str, cwd: str, sandbox: Sandbox | None) -> subprocess.Popen[bytes]:
    """A check's process: its own process group (killed whole at its deadline), output
    on one pipe, nothing on its input."""
    argv = ["/bin/sh", "-c", cmd]
    popen: dict[str, Any] = {
        "cwd": cwd,
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "start_new_session": True,
    }
    if sandbox is None:
        return subprocess.Popen(argv, env=check_env(), **popen)
    from laneboard.agents.sandbox import start

    _clear_tmp(sandbox)
    return start(sandbox, argv, check_env(), **popen)


def _clear_tmp(sandbox: Sandbox) -> None:
    """Remove a check's temporary directory and the resolver file beside it."""
    from laneboard.agents.netns import resolver_path

    shutil.rmtree(sandbox.spec.tmp, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(resolver_path(sandbox))


def _digest_and_end(path: str) -> tuple[str, bytes]:
    """A log's SHA-256 and its last bytes (enough for the summary), read in pieces: a
    check that printed gigabytes costs no more memory than one that printed a line."""
    digest, end = hashlib.sha256(), b""
    keep = TAIL_CHARS * 4 + 4096  # UTF-8 takes at most 4 bytes a character
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            end = (end + chunk)[-keep:]
    return digest.hexdigest(), end


def run_checks(
    commands: list[str],
    cwd: str,
    log_dir: str,
    timeout: float,
    prefix: str = "",
    sandbox: Sandbox | None = None,
) -> tuple[list[Evidence], Evidence | None]:
    """Run commands in order, stopping at the first failure (returned second)."""
    out: list[Evidence] = []
    for i, cmd in enumerate(commands, 1):
        log = os.path.join(log_dir, f"{prefix}{i:02d}-{_slug(cmd)}.log")
        ev = run_check(cmd, cwd, log, timeout, sandbox)
        out.append(ev)
        if ev.exit_code != 0:
            return out, ev
    return out, None


# -- the delivery ------------------------------------------------------------------------
def verify_delivery(
    store: Store, card: Card, sandbox_for: CheckSandbox | None = None
) -> Verification:
    """Verify a delivery in the card's lane; a card without a lane passes unverified.
    The checks run in the sandbox ``sandbox_for`` makes (none: as this process)."""
    with store.autocommit() as tx:  # two rows that need not agree: no snapshot to open
        project, stored = tx.turn_project(card.project_id)
        lane = lane_for(tx, card.id, card.delivery_round)
    from dataclasses import replace

    from laneboard.config import effective_project_config

    if project is not None and project.remote and lane is not None:
        project = replace(project, path=lane.repo)  # its file as this machine's clone has it
    cfg = effective_project_config(project, stored)
    if lane is not None and lane.state == "cleaned":
        lane = None
    commands = gate_commands(card, cfg)
    if lane is None:  # no lane (not a git project, shared workspace, not admitted)
        return Verification(ok=True)
    v = Verification(
        ok=True, lane=lane, directory=lane.target_dir(project.path if project else None)
    )
    if not os.path.isdir(lane.path) or not g.is_checkout(lane.path):
        v.ok = False
        v.message = f"the lane of {card.ref} is missing: {lane.path} is not a checkout"
        v.fix = f"recreate it (move {card.ref} to todo) or restore the worktree"
        return v
    try:
        v.changed = changed_paths(lane.path, lane.base_commit)
    except g.GitError as exc:
        v.ok = False
        v.message = f"cannot read the changes in {lane.path}: {exc}"
        v.fix = "check the lane's git state and deliver again"
        return v
    v.violations = scope_violations(lane.path, v.changed, card.allowed_paths)
    if v.violations:
        v.ok = False
        shown = ", ".join(v.violations[:20]) + (" …" if len(v.violations) > 20 else "")
        scope = ", ".join(card.allowed_paths) or "the repository"
        v.message = f"{card.ref} changed paths outside its scope ({scope}): {shown}"
        v.fix = "revert those changes in the lane, or ask a human to widen allowed_paths"
        return v
    left = unresolved_conflicts(card, lane.path)
    if left:
        v.ok = False
        v.message = (
            f"{card.ref} still holds conflict markers in {', '.join(left)}: this round "
            "exists to resolve the landing conflict"
        )
        v.fix = (
            "edit those files keeping both sides' intent, remove every <<<<<<<, ======= "
            "and >>>>>>> line, then deliver again"
        )
        return v
    try:  # the lane branch holds the delivery before the checks run (and leave artifacts)
        head = _commit_leftovers(lane, card, len(v.changed))
    except g.GitError as exc:
        v.ok = False
        v.message = f"cannot commit the delivery in {lane.path}: {exc}"
        v.fix = "commit the changes in the lane yourself and deliver again"
        return v
    log_dir = _log_dir(lane, card, str(v.directory))
    box = None
    if commands and sandbox_for is not None:
        checkout = project.path if project and project.path else None
        box = sandbox_for(f"worker-{card.ref}", str(v.directory), lane.path, checkout)
    v.evidence, v.failed = run_checks(
        commands, str(v.directory), log_dir, check_timeout(cfg), f"r{card.delivery_round}-", box
    )
    if v.failed is not None:
        return _failed(v, card, sandboxed=box is not None)
    v.evidence.append(head)
    refused = _publish(lane, head)
    if refused is not None:
        v.ok = False
        v.message = f"the verified commit of {card.ref} could not be pushed: {refused}"
        v.fix = "check that this machine can push to the project's remote, then deliver again"
    return v


# a line git writes around the two sides of a conflict (and diff3's base marker)
_MARKER = re.compile(r"^(?:<{7}|>{7}|\|{7})(?: |$)|^={7}$")


def unresolved_conflicts(card: Card, root: str) -> list[str]:
    """The files of the landing conflict this round resolves (``conflict_resolve``) that
    still hold a conflict marker line in the lane; none for any other round (a file may
    hold such lines on purpose: a fixture, a document about git)."""
    resolve = conflict_to_resolve(card)
    if resolve is None:
        return []
    left = []
    for name in [str(f) for f in resolve.get("files") or []]:
        text = _regular_text(os.path.join(root, name))
        if text is not None and any(_MARKER.match(line) for line in text.splitlines()):
            left.append(name)
    return left


def _regular_text(path: str, limit: int = 4_000_000) -> str | None:
    """The start of a regular file of the lane; None for anything else (removed, a link,
    a pipe whose open would wait for a writer, a device): the agent controls the lane."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return fh.read(limit).decode("utf-8", "replace")


def _log_dir(lane: Lane, card: Card, directory: str) -> str:
    """Where the round's check logs go: the project checkout's ``.laneboard/lanes/<lane>/``,
    the place the lane's runtime files are kept when its tree is removed, so a report's
    ``log_path`` stays true after cleanup. A checkout that cannot be written keeps them in
    the lane (and cleanup copies them there)."""
    kept = os.path.join(
        lane.repo, ".laneboard", "lanes", os.path.basename(lane.path), card.ref, "checks"
    )
    try:
        os.makedirs(kept, exist_ok=True)
    except OSError:
        return os.path.join(directory, ".laneboard", card.ref, "checks")
    return kept


def _publish(lane: Lane, head: Evidence) -> str | None:
    """Outside an agent's sandbox the verified commit reaches the user's repository now;
    inside one (the user's repository is read-only there) the pool publishes it after
    the turn. A lane of a clone pushes it to the project's remote: a push that fails
    refuses the delivery (returned: why), since another machine may land it."""
    try:
        publish(lane, head.digest.removeprefix("git:"))
    except g.GitError as exc:
        from laneboard.workspace import remote as rm

        if rm.is_clone(lane.repo):
            return str(exc)
    return None


SANDBOXED_HINT = (
    " (checks run in the sandbox: they write only in the lane and reach no service on "
    "this machine's loopback whose port [supervisor] check_host_ports does not name)"
)


def _failed(v: Verification, card: Card, *, sandboxed: bool) -> Verification:
    assert v.failed is not None
    v.ok = False
    f = v.failed
    what = "timed out" if f.exit_code == TIMEOUT_EXIT else f"exited {f.exit_code}"
    v.message = f"check `{f.command}` on {card.ref} {what}; log: {f.log_path}"
    v.fix = "read the log, fix the cause in the lane, and deliver again"
    if sandboxed:
        v.fix += SANDBOXED_HINT
    return v


def _commit_leftovers(lane: Lane, card: Card, changed: int) -> Evidence:
    """Commit what the agent left uncommitted, so the lane branch holds the delivery."""
    left = g.status_lines(lane.path)
    if left:
        g.git(lane.path, "add", "-A")
        g.git(
            lane.path,
            "commit",
            "-q",
            "--no-verify",
            "-m",
            f"{card.ref}: round {card.delivery_round} delivery (uncommitted changes, "
            "committed by laneboard)",
            identity=True,
        )
    head = g.commit_of(lane.path, "HEAD")
    note = f"; committed {len(left)} uncommitted change(s)" if left else ""
    return Evidence(
        LANE_HEAD,
        0,
        f"git:{head}",
        f"{lane.branch} at {head[:12]}, {changed} path(s) changed since {lane.base}{note}",
        None,
    )
