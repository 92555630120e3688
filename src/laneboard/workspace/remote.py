"""Lanes across machines: a project's shared git remote and this machine's clone of it.

A project with a remote (``lb project add KEY --remote URL``) is worked on by every machine
of a cluster. Each machine keeps its own clone in its state directory
(``<state>/clones/<KEY>``); lanes are made from the clone exactly as from a user's checkout,
so verification and reviews run against this machine's files. The verified commit of a
delivery is pushed to the remote as the lane branch; the landing — on whichever machine
runs it — fetches that branch, merges it onto the remote's base branch without a working
tree (``git merge-tree``) and pushes the merge with the base's old value as the lease
(``--force-with-lease=refs/heads/BASE:OLD``). A push refused because the base moved is
retried from the new base; a merge that conflicts goes back to the worker.

The clone belongs to laneboard: its checked-out branch follows the remote's base at every
fetch. One landing or fetch at a time runs in a clone (a file lock, shared by every process
of the machine).

A remote is checked when a person names it (``check_remote``: ``lb project add --remote``,
``lb project edit --remote``), so a remote this machine cannot reach, or one without the
project's base branch, is refused then rather than at the first lane.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from laneboard.workspace import git as g

if TYPE_CHECKING:
    from laneboard.domain.model import Project

ORIGIN = "origin"
CLONE_MARK = "laneboard-clone"  # a file in the clone's .git: this repository is laneboard's
PUSH_ATTEMPTS = 5  # pushes refused because the base moved, before the landing gives up


def clones_root(root: str | None = None) -> str:
    """Where this machine keeps its clones: ``root``, else ``<state dir>/clones``."""
    if root:
        return root
    from laneboard.config import state_dir

    return os.path.join(state_dir(), "clones")


def clone_dir(root: str | None, project: Project) -> str:
    return os.path.join(clones_root(root), project.key)


def checkout_of(project: Project, root: str | None = None) -> str | None:
    """The directory that holds a project's files on this machine: the clone of its remote,
    else its own directory."""
    return clone_dir(root, project) if project.remote else project.path


def this_machine() -> str:
    """This machine's name in a cluster: ``LANEBOARD_MACHINE``, else the host name (the
    supervisor's rule, ``supervisor.instances.machine_name``)."""
    import socket

    return os.environ.get("LANEBOARD_MACHINE") or socket.gethostname()


def is_mine(lane_repo: str, lane_machine: str | None, root: str | None, machine: str) -> bool:
    """Whether a lane in a clone is this machine's: its clone is under this machine's
    clones directory and its record names this machine (or no machine: recorded before
    machines were). Machines usually keep their clones at the same path, so the path alone
    does not tell."""
    under = os.path.realpath(lane_repo).startswith(os.path.realpath(clones_root(root)) + os.sep)
    return under and (lane_machine is None or lane_machine == machine)


def is_clone(repo: str) -> bool:
    return os.path.isfile(os.path.join(repo, ".git", CLONE_MARK))


def tracking(branch: str) -> str:
    return f"refs/remotes/{ORIGIN}/{branch}"


# -- checking a remote when it is named -----------------------------------------------------
CHECK_TIMEOUT_S = 20.0  # how long ``lb project add/edit --remote`` waits for the remote
# git asks for nothing while it checks (``git.NEVER_ASK``, no terminal), and any askpass
# program it would run answers empty. Stored credentials (a credential helper, an ssh key or
# agent, the user's own core.sshCommand) are used as by any fetch.
NO_PROMPTS = {"GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}


class RemoteProblem(NamedTuple):
    """Why a remote cannot serve a project's lanes: a stable error code, the problem, the
    fix."""

    code: str  # REMOTE_UNREACHABLE | WORKSPACE_BASE_UNRESOLVED
    message: str
    fix: str


def branch_name(ref: str) -> str:
    """A base ref as the remote's branch name (``refs/heads/main``, ``origin/main``)."""
    return ref.removeprefix("refs/heads/").removeprefix(f"{ORIGIN}/")


SET_BASE = "--base-ref {}"  # how ``lb project add`` names the base branch


def check_remote(
    url: str,
    base_ref: str | None = None,
    *,
    timeout_s: float = CHECK_TIMEOUT_S,
    set_base: str = SET_BASE,
) -> RemoteProblem | None:
    """Ask ``url`` for its branches (``git ls-remote``, at most ``timeout_s``, never
    prompting): None when this machine reaches it and it has the base branch (``base_ref``,
    else any branch to start lanes from), else what is wrong. ``set_base`` is how the
    caller's command names a base branch (``{}``: the branch), for the fix."""
    env = {**os.environ, **NO_PROMPTS}
    try:
        got = g.git(tempfile.gettempdir(), "ls-remote", "--symref", "--", url, "HEAD",
                    "refs/heads/*", check=False, timeout=timeout_s, env=env)  # fmt: skip
    except g.GitError as exc:
        timed_out = "timed out" in str(exc)
        return RemoteProblem(
            "REMOTE_UNREACHABLE",
            f"the remote {url} did not answer within {timeout_s:g} s" if timed_out
            else f"cannot run git to reach the remote {url}: {exc}",
            _REACH_FIX,
        )  # fmt: skip
    if not got.ok:
        return RemoteProblem(
            "REMOTE_UNREACHABLE", f"cannot reach the remote {url}: {_says(got)}", _REACH_FIX
        )
    lines = [line.partition("\t") for line in got.out.splitlines()]
    heads = [
        ref.removeprefix("refs/heads/") for _, _, ref in lines if ref.startswith("refs/heads/")
    ]
    if not heads:
        return RemoteProblem(
            "WORKSPACE_BASE_UNRESOLVED",
            f"the remote {url} has no branch to start lanes from",
            f"push a base branch to it first (git push {url} main), then name it again",
        )
    if base_ref and branch_name(base_ref) not in heads:
        shown = _listed(heads)
        return RemoteProblem(
            "WORKSPACE_BASE_UNRESOLVED",
            f"the remote {url} has no branch {branch_name(base_ref)} (the project's base_ref)",
            f"push that branch to the remote, or name one it has as the base "
            f"({set_base.format('BRANCH')}): {shown}",
        )
    resolved = any(ref == "HEAD" and not oid.startswith("ref: ") for oid, _, ref in lines)
    if not base_ref and not resolved:  # lanes would start from the remote's default branch
        return RemoteProblem(
            "WORKSPACE_BASE_UNRESOLVED",
            f"the remote {url} has no default branch: its HEAD names no branch it has",
            f"name the base branch: {set_base.format(_likely(heads))} (the remote has "
            f"{_listed(heads)}), or point the remote's HEAD at one",
        )
    return None


def _likely(heads: list[str]) -> str:
    """The branch a person most likely means as the base, of ``heads``."""
    for name in ("main", "master", "trunk", "develop"):
        if name in heads:
            return name
    return sorted(heads)[0]


def _listed(heads: list[str]) -> str:
    return ", ".join(sorted(heads)[:10]) + (" …" if len(heads) > 10 else "")


def _says(res: g.GitResult) -> str:
    """git's own reason: its first ``fatal:`` line (not the advice after it)."""
    for line in res.err.splitlines():
        if line.startswith("fatal: "):
            return line.removeprefix("fatal: ").strip()
    return res.detail()


_REACH_FIX = (
    "check the URL, and that this machine can fetch from it without a prompt (an ssh key "
    "or agent, or a git credential helper), then run the command again"
)


# -- one landing or fetch at a time in a clone ---------------------------------------------
_guard = threading.Lock()
_locks: dict[str, threading.RLock] = {}
_held: dict[str, list[int]] = {}  # path -> [depth, fd] of the holder


@contextmanager
def locked(clone: str) -> Iterator[None]:
    """Exclusive use of ``clone`` by this thread, across threads and processes (re-entrant
    in one thread)."""
    key = os.path.realpath(clone)
    with _guard:
        lock = _locks.setdefault(key, threading.RLock())
    with lock:
        state = _held.setdefault(key, [0, -1])
        if state[0] == 0:
            os.makedirs(os.path.dirname(key), exist_ok=True)
            fd = os.open(key + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            state[1] = fd
        state[0] += 1
        try:
            yield
        finally:
            state[0] -= 1
            if state[0] == 0:
                os.close(state[1])  # closing the descriptor releases the flock
                state[1] = -1


# -- the clone -----------------------------------------------------------------------------
# when (``time.monotonic``) each clone's newest fetch of this process started; a fetch holds
# what the remote had at its start at least, so one that started after an event holds it
_fetched: dict[str, float] = {}


def ensure_clone(
    root: str | None,
    project: Project,
    declared: str | None = None,
    *,
    fetched_since: float | None = None,
) -> str:
    """This machine's clone of the project's remote, its checked-out branch at the remote's
    base. Returns its path. Fetched now, unless a fetch of it started at or after
    ``fetched_since`` (a ``time.monotonic`` value): that one holds everything pushed
    before then and is reused."""
    assert project.remote, f"project {project.key} has no remote"
    path = clone_dir(root, project)
    with locked(path):
        if not is_clone(path):
            started = time.monotonic()
            _clone(project.remote, path)
            _fetched[os.path.realpath(path)] = started
        elif fetched_since is None or _fetched.get(os.path.realpath(path), -1e18) < fetched_since:
            url = g.git(path, "remote", "get-url", ORIGIN, check=False).out.strip()
            if url != project.remote:
                g.git(path, "remote", "set-url", ORIGIN, project.remote)
            fetch(path)
        _follow_base(path, base_branch(path, declared, project.key))
    return path


def _clone(remote: str, path: str) -> None:
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if os.path.lexists(path):  # a clone half made by a killed process: ours to remove
        shutil.rmtree(path)
    tmp = f"{path}.making-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        g.git(parent, "clone", "-q", "--no-tags", "--template=", remote, tmp)
        if (
            not g.resolves(tmp, "HEAD")
            and not g.git(tmp, "for-each-ref", "--count=1", f"refs/remotes/{ORIGIN}/").out.strip()
        ):
            raise g.GitError(f"the remote {remote} has no commit to start lanes from")
        with open(os.path.join(tmp, ".git", CLONE_MARK), "w", encoding="utf-8") as fh:
            fh.write(remote + "\n")
        g.ensure_excluded(tmp)
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def fetch(clone: str) -> None:
    """Every branch of the remote as ``refs/remotes/origin/*`` (lane branches included)."""
    with locked(clone):
        started = time.monotonic()
        g.git(clone, "fetch", "-q", "--prune", "--no-tags", ORIGIN)
        _fetched[os.path.realpath(clone)] = started


def base_branch(clone: str, declared: str | None, key: str = "KEY") -> str:
    """The remote's branch lanes start from and land on: the project's ``base_ref`` (a
    branch of the remote), else the remote's default branch (``key``: the project's, to
    name in the fix when there is none)."""
    if declared:
        name = branch_name(declared)
        if not g.resolves(clone, tracking(name)):
            raise g.GitError(f"the remote has no branch {name} (the project's base_ref)")
        return name
    got = g.git(clone, "symbolic-ref", "--quiet", f"refs/remotes/{ORIGIN}/HEAD", check=False)
    if not got.ok:
        g.git(clone, "remote", "set-head", ORIGIN, "--auto", check=False)
        got = g.git(clone, "symbolic-ref", "--quiet", f"refs/remotes/{ORIGIN}/HEAD", check=False)
    if got.ok and got.out.strip():
        return got.out.strip().removeprefix(f"refs/remotes/{ORIGIN}/")
    current = g.current_branch(clone)
    if current and g.resolves(clone, tracking(current)):
        return current
    heads = [
        ref.removeprefix(f"refs/remotes/{ORIGIN}/")
        for ref in g.git(
            clone, "for-each-ref", "--format=%(refname)", f"refs/remotes/{ORIGIN}/"
        ).out.split()
        if ref != f"refs/remotes/{ORIGIN}/HEAD"
    ]
    likely = _likely(heads) if heads else "main"
    raise g.GitError(
        "its default branch (its HEAD) is not a branch it has"
        + (f" (it has {_listed(heads)})" if heads else "")
        + f": point it at one (in the bare repository: git symbolic-ref HEAD refs/heads/{likely})"
        + f" or name the base (lb project config {key} --set base_ref={likely})"
    )


def _follow_base(clone: str, branch: str) -> None:
    """The clone's checked-out branch is the base, at the remote's commit."""
    want = g.commit_of(clone, tracking(branch))
    if g.current_branch(clone) != branch:
        g.git(clone, "checkout", "-q", "-f", "-B", branch, want)
    elif g.commit_of(clone, "HEAD") != want:
        g.git(clone, "reset", "-q", "--hard", want)


def push_lane(clone: str, branch: str, commit: str) -> None:
    """Put ``commit`` on the remote as the lane branch (this machine's own lane: forced)."""
    with locked(clone):
        if g.resolves(clone, tracking(branch)) and g.commit_of(clone, tracking(branch)) == commit:
            return  # pushed already
        g.git(clone, "push", "-q", "--no-verify", ORIGIN, f"+{commit}:refs/heads/{branch}")
        g.git(clone, "update-ref", tracking(branch), commit)


def delete_lane(clone: str, branch: str) -> None:
    """Remove a landed lane branch from the remote (best effort: a failure keeps it)."""
    with locked(clone):
        if g.resolves(clone, tracking(branch)):
            g.git(clone, "push", "-q", "--no-verify", ORIGIN, f":refs/heads/{branch}", check=False)


# -- landing on the remote -----------------------------------------------------------------
@dataclass
class RemoteLanding:
    base: str
    merge_commit: str | None = None
    already: bool = False
    onto_commit: str = ""
    conflicts: list[str] = field(default_factory=list)
    error: str | None = None
    retries: int = 0  # pushes refused because the base had moved


def merged_by(repo: str, tip: str, head: str) -> str:
    """The first-parent commit of ``head`` that brought ``tip`` in (the oldest descending
    from it), else ``tip`` itself."""
    got = g.git(
        repo, "rev-list", "--first-parent", "--ancestry-path", f"{tip}..{head}", check=False
    ).out.split()  # fmt: skip
    return got[-1] if got else g.commit_of(repo, tip)


def land_on_remote(clone: str, base: str, commit: str, message: str) -> RemoteLanding:
    """Merge ``commit`` onto the remote's ``base`` and push it with a lease on the base.

    Already contained (landed by hand, or by a landing that pushed and died before it was
    recorded): nothing is pushed, the merge that brought it is returned. A refused push is
    retried from the fetched base when the base moved; otherwise it is an error.
    """
    out = RemoteLanding(base)
    with locked(clone):
        for _ in range(PUSH_ATTEMPTS):
            old = g.commit_of(clone, tracking(base))
            out.onto_commit = old
            if g.is_ancestor(clone, commit, old):
                out.already, out.merge_commit = True, merged_by(clone, commit, old)
                return out
            tried = g.git(clone, "merge-tree", "--write-tree", "--name-only", "--no-messages",
                          old, commit, check=False)  # fmt: skip
            lines = [line for line in tried.out.splitlines() if line.strip()]
            if tried.code == 1:
                out.conflicts = lines[1:21]
                return out
            if not tried.ok or not lines:
                raise g.GitError(f"cannot merge {commit[:12]} onto {base}: {tried.detail()}")
            merge = g.git(clone, "commit-tree", lines[0], "-p", old, "-p", commit, "-m", message,
                          identity=True).out.strip()  # fmt: skip
            pushed = g.git(
                clone, "push", "--porcelain", "--no-verify",
                f"--force-with-lease=refs/heads/{base}:{old}", ORIGIN, f"{merge}:refs/heads/{base}",
                check=False,
            )  # fmt: skip
            if pushed.ok:
                g.git(clone, "update-ref", tracking(base), merge)
                out.merge_commit = merge
                return out
            fetch(clone)
            if g.commit_of(clone, tracking(base)) == old:  # refused, and not for a new base
                out.error = f"the remote refused the push to {base}: {_refusal(pushed)}"
                return out
            out.retries += 1
    out.error = f"the remote's {base} moved on each of {PUSH_ATTEMPTS} pushes"
    return out


def _refusal(res: g.GitResult) -> str:
    for line in res.out.splitlines():
        if line.startswith("!"):
            return line.split("\t")[-1].strip()
    return res.detail()
