"""A project's shared remote is checked when it is named: ``lb project add --remote`` and
``lb project edit --remote`` ask the remote (``git ls-remote``, bounded, never prompting)
before anything is written, and refuse an unreachable remote or a base branch it lacks
with one line, on every surface and both backends. ``project edit`` refuses to switch the
remote of a project whose cards have work in flight.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.cluster.test_remote_lanes import bare_remote, claimed_on, machine
from tests.workspace.helpers import ME, commit_file, deliver, git

from laneboard.board.service import Board
from laneboard.errors import CODES, LaneboardError
from laneboard.store import Store
from laneboard.workspace import remote as rm
from laneboard.workspace.lane_admit import LaneAdmitter


def refused(code: str, fn: object, *args: object, **kw: object) -> LaneboardError:
    assert callable(fn)
    with pytest.raises(LaneboardError) as err:
        fn(*args, **kw)
    assert err.value.code == code, err.value.line()
    assert err.value.fix, "the refusal names the fix"
    assert "\n" not in err.value.line()
    return err.value


def events(board: Board) -> int:
    return len(board.events(0, limit=100_000))


# -- the probe ---------------------------------------------------------------------------
def test_the_probe_accepts_a_remote_with_its_base(tmp_path: Path) -> None:
    bare, seed = bare_remote(tmp_path)
    git(seed, "push", "-q", "origin", "HEAD:refs/heads/develop")
    assert rm.check_remote(str(bare)) is None
    assert rm.check_remote(str(bare), "develop") is None
    assert rm.check_remote(str(bare), "refs/heads/main") is None
    assert rm.check_remote(str(bare), "origin/main") is None


def test_the_probe_names_what_is_wrong(tmp_path: Path) -> None:
    bare, _ = bare_remote(tmp_path)
    gone = rm.check_remote(str(tmp_path / "nowhere.git"))
    assert gone is not None and gone.code == "REMOTE_UNREACHABLE"
    assert str(tmp_path / "nowhere.git") in gone.message
    missing = rm.check_remote(str(bare), "release")
    assert missing is not None and missing.code == "WORKSPACE_BASE_UNRESOLVED"
    assert "release" in missing.message and "main" in missing.fix
    empty = tmp_path / "empty.git"
    git(tmp_path, "init", "-q", "--bare", str(empty))
    nothing = rm.check_remote(str(empty))
    assert nothing is not None and nothing.code == "WORKSPACE_BASE_UNRESOLVED"
    assert "no branch" in nothing.message


def headless_remote(tmp_path: Path) -> Path:
    """A bare remote whose default branch (its HEAD) names a branch it does not have:
    ``git init --bare`` points HEAD at ``master`` and only ``main`` was pushed."""
    bare, _ = bare_remote(tmp_path)
    git(bare, "symbolic-ref", "HEAD", "refs/heads/master")
    return bare


def test_the_probe_refuses_a_remote_whose_default_branch_is_missing(tmp_path: Path) -> None:
    bare = headless_remote(tmp_path)
    got = rm.check_remote(str(bare))
    assert got is not None and got.code == "WORKSPACE_BASE_UNRESOLVED"
    assert "default branch" in got.message and str(bare) in got.message
    assert "--base-ref main" in got.fix  # the branch it has, named in the fix
    assert rm.check_remote(str(bare), "main") is None  # a named base needs no default


def test_add_refuses_a_remote_whose_default_branch_is_missing(store: Store, tmp_path: Path) -> None:
    bare = headless_remote(tmp_path)
    a, clones = machine(store, tmp_path, "a")
    before = events(a)
    refused("WORKSPACE_BASE_UNRESOLVED", a.add_project, ME, "P", remote=str(bare))
    assert a.projects() == [] and events(a) == before
    a.add_project(ME, "P", base_ref="main", remote=str(bare))
    _, lane = claimed_on(a, clones)  # lanes start from the named base
    assert git(Path(lane), "rev-parse", "--abbrev-ref", "HEAD").startswith("lane/")


def test_admission_names_the_fix_when_the_default_branch_goes_missing(
    store: Store, tmp_path: Path
) -> None:
    bare, _ = bare_remote(tmp_path)
    a, clones = machine(store, tmp_path, "a")
    a.add_project(ME, "P", remote=str(bare))  # its default branch was main then
    git(bare, "symbolic-ref", "HEAD", "refs/heads/master")  # and is a missing branch now
    card = a.create_card(ME, "P", "do the thing")
    with pytest.raises(Exception) as err:
        LaneAdmitter(a, clones=clones).admit(card, a.project("P"))
    said = str(err.value)
    assert "default branch" in said, said
    assert "git symbolic-ref HEAD refs/heads/main" in said, said  # how to set it there
    assert "lb project config P --set base_ref=main" in said, said  # or name it here


def test_a_remote_that_does_not_answer_is_given_up_after_the_bound() -> None:
    with socket.socket() as srv:  # accepts the connection, never says a word
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        got = rm.check_remote(f"git://127.0.0.1:{port}/x.git", timeout_s=1.0)
    assert got is not None and got.code == "REMOTE_UNREACHABLE"
    assert "did not answer within 1 s" in got.message


@pytest.fixture
def needs_login() -> Iterator[str]:
    """An HTTP git remote that asks for a password (401) on every request."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_a: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/team/srv.git"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_a_remote_that_wants_a_password_is_refused_without_a_prompt(needs_login: str) -> None:
    got = rm.check_remote(needs_login, timeout_s=30.0)
    assert got is not None and got.code == "REMOTE_UNREACHABLE"
    assert "credential" in got.fix


def test_remote_unreachable_is_a_documented_code() -> None:
    assert "REMOTE_UNREACHABLE" in CODES
    assert "`REMOTE_UNREACHABLE`" in (Path(__file__).parents[2] / "docs/lanes.md").read_text()


# -- project add ---------------------------------------------------------------------------
def test_add_refuses_an_unreachable_remote_and_writes_nothing(store: Store, tmp_path: Path) -> None:
    a, _ = machine(store, tmp_path, "a")
    before = events(a)
    err = refused("REMOTE_UNREACHABLE", a.add_project, ME, "P", remote=str(tmp_path / "no.git"))
    assert "project add" in err.fix or "again" in err.fix
    assert a.projects() == [] and events(a) == before


def test_add_refuses_a_base_ref_the_remote_lacks(store: Store, tmp_path: Path) -> None:
    bare, _ = bare_remote(tmp_path)
    a, _ = machine(store, tmp_path, "a")
    before = events(a)
    refused("WORKSPACE_BASE_UNRESOLVED", a.add_project, ME, "P", base_ref="release",
            remote=str(bare))  # fmt: skip
    assert a.projects() == [] and events(a) == before
    assert a.add_project(ME, "P", base_ref="main", remote=str(bare)).remote == str(bare)


@pytest.mark.parametrize(
    "url",
    [
        "https://ci:glpat-Abc123secretXyz@git.example.com/team/srv.git",
        "ssh://git:glpat-Abc123secretXyz@git.example.com:2222/team/srv.git",
        "HTTP://ci:glpat-Abc123secretXyz@git.example.com/srv.git",
    ],
)
def test_a_remote_with_a_password_in_its_url_is_refused_without_echoing_it(
    store: Store, tmp_path: Path, url: str
) -> None:
    """The remote is shared through the board (lists, events, every machine): a password
    in its URL would be shown to everyone who reads them. Nothing is written, and the
    refusal does not repeat the password."""
    a, _ = machine(store, tmp_path, "a")
    asked: list[str] = []
    a.remote_check = lambda url, base, set_base: asked.append(url)
    before = events(a)
    err = refused("BAD_INPUT", a.add_project, ME, "P", remote=url)
    assert "password" in err.message and "credential" in err.fix
    assert "glpat-Abc123secretXyz" not in err.line()
    assert a.projects() == [] and events(a) == before and asked == []
    a.add_project(ME, "P")
    err = refused("BAD_INPUT", a.edit_project, ME, "P", remote=url)
    assert "glpat-Abc123secretXyz" not in err.line()
    assert a.project("P").remote is None and asked == []
    # a user name alone is no secret: ssh's git@, a named https user
    for fine in ("ssh://git@git.example.com/team/srv.git", "https://ci@git.example.com/srv.git",
                 "git@git.example.com:team/srv.git"):  # fmt: skip
        assert a.edit_project(ME, "P", remote=fine).remote == fine


def test_a_key_taken_already_is_refused_before_the_remote_is_asked(
    store: Store, tmp_path: Path
) -> None:
    a, _ = machine(store, tmp_path, "a")
    a.add_project(ME, "P")
    asked: list[str] = []
    a.remote_check = lambda url, base, set_base: asked.append(url)
    refused("CONFLICT", a.add_project, ME, "P", remote=str(tmp_path / "no.git"))
    assert asked == []


# -- project edit --------------------------------------------------------------------------
def test_edit_sets_switches_and_clears_the_remote_with_one_event_each(
    store: Store, tmp_path: Path, repo: Path
) -> None:
    bare, _ = bare_remote(tmp_path)
    other = tmp_path / "other.git"
    git(tmp_path, "clone", "-q", "--bare", str(bare), str(other))
    a, _ = machine(store, tmp_path, "a")
    a.add_project(ME, "P", path=str(repo))
    got = a.edit_project(ME, "P", remote=str(bare))
    assert got.remote == str(bare) and a.project("P").remote == str(bare)
    assert a.edit_project(ME, "P", remote=str(other)).remote == str(other)
    assert a.edit_project(ME, "P", remote=None).remote is None
    edited = [e.payload for e in a.events(0, limit=1000) if e.type == "project.edited"]
    assert edited == [
        {"key": "P", "remote": str(bare), "was": None},
        {"key": "P", "remote": str(other), "was": str(bare)},
        {"key": "P", "remote": None, "was": str(other)},
    ]
    before = events(a)
    assert a.edit_project(ME, "P", remote=None).remote is None  # nothing to change
    assert events(a) == before


def test_edit_checks_the_new_remote_and_the_project_base(store: Store, tmp_path: Path) -> None:
    empty = tmp_path / "empty.git"
    git(tmp_path, "init", "-q", "--bare", str(empty))
    a, _ = machine(store, tmp_path, "a")
    a.add_project(ME, "P", base_ref="main")
    before = events(a)
    refused("REMOTE_UNREACHABLE", a.edit_project, ME, "P", remote=str(tmp_path / "no.git"))
    refused("WORKSPACE_BASE_UNRESOLVED", a.edit_project, ME, "P", remote=str(empty))
    refused("BAD_INPUT", a.edit_project, ME, "P", remote="--upload-pack=touch /tmp/x")
    assert a.project("P").remote is None and events(a) == before


def test_edit_names_its_own_fix_for_a_remote_without_a_default_branch(
    store: Store, tmp_path: Path
) -> None:
    """``project edit`` has no ``--base-ref``: its refusal names how to set the base."""
    bare = headless_remote(tmp_path)
    a, _ = machine(store, tmp_path, "a")
    a.add_project(ME, "P")
    before = events(a)
    err = refused("WORKSPACE_BASE_UNRESOLVED", a.edit_project, ME, "P", remote=str(bare))
    assert "--base-ref" not in err.fix
    assert "lb project config P --set base_ref=main" in err.fix
    assert a.project("P").remote is None and events(a) == before
    a.set_project_config(ME, "P", {"base_ref": "main"})  # as the fix says
    assert a.edit_project(ME, "P", remote=str(bare)).remote == str(bare)


def test_edit_refuses_to_strand_work_in_flight(store: Store, tmp_path: Path) -> None:
    bare, _ = bare_remote(tmp_path)
    other = tmp_path / "other.git"
    git(tmp_path, "clone", "-q", "--bare", str(bare), str(other))
    a, a_clones = machine(store, tmp_path, "a")
    a.add_project(ME, "P", remote=str(bare))
    card, lane = claimed_on(a, a_clones, acceptance_mode="off")
    before = events(a)
    err = refused("CONFLICT", a.edit_project, ME, "P", remote=str(other))
    assert card.ref in err.message and "lb card" in err.fix
    refused("CONFLICT", a.edit_project, ME, "P", remote=None)
    assert a.project("P").remote == str(bare) and events(a) == before
    commit_file(lane, "feature.txt", "new\n", "the work")
    a.move(ME, deliver(a, card).ref, "done")  # landed: nothing left to strand
    assert a.edit_project(ME, "P", remote=str(other)).remote == str(other)


def test_only_a_person_edits_a_project(store: Store, tmp_path: Path) -> None:
    from laneboard.domain.model import agent

    a, _ = machine(store, tmp_path, "a")
    a.add_project(ME, "P")
    refused("FORBIDDEN", a.edit_project, agent("w1"), "P", remote=None)


# -- every surface ---------------------------------------------------------------------------
@pytest.fixture(params=("local", "serve", "socket"))
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    from tests.cli_kit import Cli

    c = Cli(tmp_path, str(request.param))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_the_cli_checks_the_remote_in_every_mode(cli: object, tmp_path: Path) -> None:
    from tests.cli_kit import Cli

    assert isinstance(cli, Cli)
    bare, _ = bare_remote(tmp_path)
    gone = str(tmp_path / "gone.git")
    line = cli.refuse("REMOTE_UNREACHABLE", 1, "project", "add", "P", "--remote", gone)
    assert gone in line
    cli.refuse("WORKSPACE_BASE_UNRESOLVED", 1, "project", "add", "P", "--remote", str(bare),
               "--base-ref", "release")  # fmt: skip
    assert cli.ok("project", "list") == []
    assert cli.ok("project", "add", "P", "--remote", str(bare))["remote"] == str(bare)
    cli.refuse("REMOTE_UNREACHABLE", 1, "project", "edit", "P", "--remote", gone)
    line = cli.refuse("BAD_INPUT", 2, "project", "edit", "P", "--remote", "")
    assert "--no-remote" in line
    cli.refuse("BAD_INPUT", 2, "project", "edit", "P", "--remote", str(bare), "--no-remote")
    cli.refuse("BAD_INPUT", 2, "project", "edit", "P")
    assert cli.ok("project", "edit", "P", "--no-remote")["remote"] is None
    r = cli.run("project", "edit", "P", "--remote", str(bare))
    assert r.code == 0 and f"remote {bare}" in r.out, r.err


def test_rest_and_mcp_refuse_alike(store_url: str, tmp_path: Path) -> None:
    from starlette.testclient import TestClient
    from tests.ops.test_surfaces import NOW, cli_env, mcp_session

    from laneboard.ops.clock import PinnedClock, pinned_ms
    from laneboard.server.app import create_app
    from laneboard.store import open_store

    gone = str(tmp_path / "gone.git")
    store = open_store(store_url, PinnedClock(pinned_ms(NOW)))
    try:
        app = create_app(store, local_user="alice", with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)) as rest:
            got = rest.post("/api/v1/projects", json={"key": "P", "remote": gone})
            assert got.status_code == 409 and got.json()["code"] == "REMOTE_UNREACHABLE"
            assert rest.post("/api/v1/projects", json={"key": "P"}).status_code == 201
            got = rest.patch("/api/v1/projects/P", json={"remote": gone})
            assert got.status_code == 409 and got.json()["code"] == "REMOTE_UNREACHABLE"
        env = cli_env(store_url, tmp_path, LANEBOARD_NOW=NOW, LANEBOARD_USER="alice")
        with mcp_session(store_url, env) as (portal, tools):
            for tool, args in (("add_project", {"key": "Q", "remote": gone}),
                               ("edit_project", {"project": "P", "remote": gone})):  # fmt: skip
                res = portal.call(tools.call_tool, tool, args)
                assert res.is_error
                text = res.content[0].text  # type: ignore[union-attr]
                assert text.startswith("error REMOTE_UNREACHABLE: "), text
        assert [p.key for p in Board(store).projects()] == ["P"]
        assert Board(store).project("P").remote is None
    finally:
        store.close()
