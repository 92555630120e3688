"""Git as the runtime runs it: hooks disabled, every call bounded by a timeout."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass

GIT_TIMEOUT_S = 120.0
# hooks off, and no command a lane's own config could name (an agent writes its lane's
# .git/config; the runtime's git runs outside the sandbox)
NO_HOOKS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
# used only when the repository has no identity of its own (runtime commits and merges)
FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "laneboard",
    "GIT_AUTHOR_EMAIL": "laneboard@localhost",
    "GIT_COMMITTER_NAME": "laneboard",
    "GIT_COMMITTER_EMAIL": "laneboard@localhost",
}
EXCLUDES = (".worktrees/", ".laneboard/")


class GitError(Exception):
    """git could not run, timed out, or failed where failure was not expected."""

    def __init__(self, message: str, *, probe_failed: bool = False) -> None:
        super().__init__(message)
        self.probe_failed = probe_failed


@dataclass(frozen=True)
class GitResult:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def detail(self) -> str:
        """git's reason: its first ``fatal:`` or ``error:`` line (the advice after it, such as
        "Please make sure you have the correct access rights", says less), else its last."""
        text = (self.err.strip() or self.out.strip()).splitlines()
        for line in text:
            if line.startswith(("fatal: ", "error: ")):
                return line
        return text[-1] if text else f"exit {self.code}"


# git and the ssh it runs never ask anything, whether laneboard runs in a terminal or not: a
# question nobody sees would hold the supervisor until the timeout. Stored credentials (a
# credential helper, an ssh key or agent, the user's core.sshCommand) are used as usual; a
# host key or a passphrase that needs a person fails at once instead.
NEVER_ASK = {
    "GIT_TERMINAL_PROMPT": "0",
    "SSH_ASKPASS_REQUIRE": "never",
    "GCM_INTERACTIVE": "never",
}


def git(
    cwd: str,
    *args: str,
    check: bool = True,
    timeout: float = GIT_TIMEOUT_S,
    env: dict[str, str] | None = None,
    identity: bool = False,
) -> GitResult:
    """Run ``git -c core.hooksPath=/dev/null ARGS`` in ``cwd``.

    ``check`` raises GitError on a non-zero exit; a missing git, a missing directory or
    a timeout always raises (with ``probe_failed`` set).
    """
    full_env = dict(os.environ if env is None else env)
    for k, v in NEVER_ASK.items():
        full_env.setdefault(k, v)
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        full_env.pop(k, None)
    if identity and not _has_identity(cwd, full_env):
        for k, v in FALLBACK_IDENTITY.items():
            full_env.setdefault(k, v)
    try:
        code, out, err = _run(["git", *NO_HOOKS, *args], cwd, full_env, timeout)
    except subprocess.TimeoutExpired:
        raise GitError(
            f"git {' '.join(args)} timed out after {timeout:g} s in {cwd}", probe_failed=True
        ) from None
    except OSError as exc:
        raise GitError(
            f"git {' '.join(args)} could not run in {cwd}: {exc}", probe_failed=True
        ) from None
    res = GitResult(tuple(args), code, out, err)
    if check and not res.ok:
        raise GitError(f"git {' '.join(args)} failed in {cwd}: {res.detail()}")
    return res


def _run(cmd: list[str], cwd: str, env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run git in a session of its own, with no controlling terminal (ssh cannot ask on
    ``/dev/tty``); at the timeout its whole process group is killed, the ssh it started
    with it. Returns (exit code, stdout, stderr)."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(OSError):  # the group may have ended already
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a child that left the group
            proc.communicate(timeout=5)  # may hold the pipes: not waited for long
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        raise
    return proc.returncode, out, err


def _has_identity(cwd: str, env: dict[str, str]) -> bool:
    if env.get("GIT_COMMITTER_EMAIL") and env.get("GIT_AUTHOR_EMAIL"):
        return True
    try:
        proc = subprocess.run(
            ["git", "config", "user.email"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return bool(proc.stdout.strip())


def toplevel(path: str) -> str | None:
    """The top of the working tree holding ``path``, or None when it is not in one."""
    if not os.path.isdir(path):
        return None
    res = git(path, "rev-parse", "--show-toplevel", check=False)
    return os.path.realpath(res.out.strip()) if res.ok and res.out.strip() else None


def common_dir(repo: str) -> str:
    out = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").out.strip()
    return os.path.realpath(out)


def primary_checkout(path: str) -> str | None:
    """The main working tree of the repository ``path`` belongs to (not a linked one)."""
    top = toplevel(path)
    if top is None:
        return None
    cdir = common_dir(top)
    if os.path.basename(cdir) == ".git":
        return os.path.dirname(cdir)
    return top


def resolves(repo: str, ref: str) -> bool:
    """``rev-parse --verify --quiet REF^{commit}``; GitError when the probe cannot run."""
    res = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if res.code not in (0, 1):
        raise GitError(f"cannot probe {ref} in {repo}: {res.detail()}", probe_failed=True)
    return res.ok


def commit_of(repo: str, ref: str) -> str:
    return git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").out.strip()


def branch_exists(repo: str, branch: str) -> bool:
    return resolves(repo, f"refs/heads/{branch}")


def current_branch(repo: str) -> str | None:
    """The checked-out branch, or None when HEAD is detached."""
    res = git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return res.out.strip() if res.ok and res.out.strip() else None


def is_ancestor(repo: str, ref: str, of: str) -> bool:
    res = git(repo, "merge-base", "--is-ancestor", ref, of, check=False)
    if res.code not in (0, 1):
        raise GitError(f"cannot compare {ref} with {of}: {res.detail()}", probe_failed=True)
    return res.ok


def status_lines(path: str, *, untracked: bool = True) -> list[str]:
    """``git status --porcelain`` lines. Looking never writes: a plain ``git status``
    writes back an index whose stat data it refreshed (``--no-optional-locks``). Paths are
    quoted whatever the repository's ``core.quotePath``: any name reads as ASCII text."""
    mode = "--untracked-files=normal" if untracked else "--untracked-files=no"
    out = git(path, "-c", "core.quotePath=true", "--no-optional-locks", "status",
              "--porcelain", mode).out  # fmt: skip
    return [line for line in out.splitlines() if line.strip()]


def is_checkout(path: str) -> bool:
    """``path`` is itself the top of a working tree."""
    top = toplevel(path)
    return top is not None and top == os.path.realpath(path)


def ensure_excluded(repo: str, patterns: tuple[str, ...] = EXCLUDES) -> None:
    """Add the runtime's directories to the repository's ``info/exclude``."""
    info = os.path.join(common_dir(repo), "info")
    os.makedirs(info, exist_ok=True)
    path = os.path.join(info, "exclude")
    try:
        with open(path, encoding="utf-8") as fh:
            have = {line.strip() for line in fh}
    except FileNotFoundError:
        have = set()
    missing = [p for p in patterns if p not in have]
    if missing:
        with open(path, "a", encoding="utf-8") as fh:
            if os.path.getsize(path) and not _ends_with_newline(path):
                fh.write("\n")
            fh.write("".join(f"{p}\n" for p in missing))


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


@dataclass(frozen=True)
class Worktree:
    path: str
    head: str | None
    branch: str | None  # short name, None when detached
    bare: bool = False
    prunable: bool = False


def worktrees(repo: str) -> list[Worktree]:
    """``git worktree list --porcelain``: the first entry is the main working tree."""
    out = git(repo, "worktree", "list", "--porcelain").out
    found: list[Worktree] = []
    cur: dict[str, str] = {}
    for line in [*out.splitlines(), ""]:
        if not line.strip():
            if "worktree" in cur:
                br = cur.get("branch")
                found.append(
                    Worktree(
                        os.path.realpath(cur["worktree"])
                        if os.path.exists(cur["worktree"])
                        else cur["worktree"],
                        cur.get("HEAD"),
                        br.removeprefix("refs/heads/") if br else None,
                        "bare" in cur,
                        "prunable" in cur,
                    )
                )
            cur = {}
            continue
        key, _, value = line.partition(" ")
        cur[key] = value
    return found
