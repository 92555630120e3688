"""Lane admission on real git repositories, with lane records on both backends."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.workspace.helpers import ME, commit_file, gated, git, project

from laneboard.domain.status import Status
from laneboard.store import Store
from laneboard.workspace.admit import AdmissionError
from laneboard.workspace.lane_admit import LaneAdmitter
from laneboard.workspace.lanes import lane_for, lanes_of


def lane_events(store: Store) -> list[dict[str, object]]:
    with store.read() as tx:
        return [
            {"type": e.type, **e.payload}
            for e in tx.events(0, limit=1000)
            if e.type.startswith("lane.")
        ]


def test_lane_from_the_current_branch(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    card = board.create_card(ME, "P", "first")
    target = LaneAdmitter(board).admit(card, board.project("P"))
    assert target == str(repo.resolve() / ".worktrees" / "P-1")
    assert git(target, "rev-parse", "--abbrev-ref", "HEAD") == "lane/P-1"
    assert git(target, "rev-parse", "HEAD") == git(repo, "rev-parse", "main")
    exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert ".worktrees/" in exclude and ".laneboard/" in exclude
    assert git(repo, "status", "--porcelain") == ""  # the lane does not dirty the checkout
    with store.read() as tx:
        lane = lane_for(tx, card.id, 1)
    assert lane is not None
    assert (lane.branch, lane.base, lane.state) == ("lane/P-1", "main", "active")
    assert lane.base_commit == git(repo, "rev-parse", "main")
    assert lane_events(store) == [
        {
            "type": "lane.created",
            "ref": "P-1",
            "round": 1,
            "path": target,
            "branch": "lane/P-1",
            "base": "main",
            "base_commit": lane.base_commit,
            "how": "created",
        }
    ]
    # admitting again reuses the same checkout
    assert LaneAdmitter(board).admit(card, board.project("P")) == target
    assert [e["how"] for e in lane_events(store)] == ["created", "reused"]


def test_lane_from_the_declared_base(store: Store, repo: Path) -> None:
    git(repo, "switch", "-q", "-c", "develop")
    dev = commit_file(repo, "dev.txt", "dev\n", "develop work")
    git(repo, "switch", "-q", "main")
    board = gated(store)
    project(board, repo, base_ref="develop")
    card = board.create_card(ME, "P", "on develop")
    target = LaneAdmitter(board).admit(card, board.project("P"))
    assert git(target, "rev-parse", "HEAD") == dev
    assert Path(target, "dev.txt").read_text() == "dev\n"
    with store.read() as tx:
        lane = lane_for(tx, card.id, 1)
    assert lane is not None and (lane.base, lane.base_commit) == ("develop", dev)


def test_declared_base_in_the_project_config(store: Store, repo: Path) -> None:
    git(repo, "branch", "release")
    board = gated(store)
    board.add_project(ME, "P", path=str(repo), config={"base_ref": "release"})
    card = board.create_card(ME, "P", "on release")
    LaneAdmitter(board).admit(card, board.project("P"))
    with store.read() as tx:
        lane = lane_for(tx, card.id, 1)
    assert lane is not None and lane.base == "release"


def test_missing_declared_base_is_an_error_not_a_fallback(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo, base_ref="no-such-branch")
    card = board.create_card(ME, "P", "nowhere")
    with pytest.raises(AdmissionError) as err:
        LaneAdmitter(board).admit(card, board.project("P"))
    assert err.value.code == "WORKSPACE_BASE_UNRESOLVED" and err.value.card_scoped
    assert "no-such-branch" in str(err.value)
    assert not (repo / ".worktrees" / "P-1").exists()
    assert "lane/P-1" not in git(repo, "branch", "--list")
    with store.read() as tx:
        assert lanes_of(tx, card.id) == []


def rework(board, card):  # type: ignore[no-untyped-def]
    """Deliver round 1 and send the card back for round 2 (as the workflow pass does)."""
    from tests.workspace.helpers import deliver

    deliver(board, card)
    with board.store.write() as tx:
        fresh = tx.card(card.id)
        return board.move_in(tx, ME, fresh, Status.IN_PROGRESS, new_round=True)


def test_rework_starts_from_the_previous_rounds_branch(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    card = board.create_card(ME, "P", "twice")
    adm = LaneAdmitter(board)
    t1 = adm.admit(card, board.project("P"))
    r1 = commit_file(t1, "src/a.py", "one\n", "round one")
    card = board.claim(ME, card.ref, holder="worker")
    card = rework(board, card)
    assert card.delivery_round == 2
    t2 = adm.admit(card, board.project("P"))
    assert t2.endswith("/.worktrees/P-1-r2")
    assert git(t2, "rev-parse", "--abbrev-ref", "HEAD") == "lane/P-1-r2"
    assert git(t2, "rev-parse", "HEAD") == r1
    with store.read() as tx:
        lane = lane_for(tx, card.id, 2)
    assert lane is not None and (lane.base, lane.base_commit) == ("lane/P-1", r1)


def test_rework_falls_back_to_the_current_branch_when_the_old_lane_is_gone(
    store: Store, repo: Path
) -> None:
    board = gated(store)
    project(board, repo)
    card = board.create_card(ME, "P", "twice")
    adm = LaneAdmitter(board)
    t1 = adm.admit(card, board.project("P"))
    card = board.claim(ME, card.ref, holder="worker")
    card = rework(board, card)
    shutil.rmtree(t1)  # the lane and its published branch are gone
    git(repo, "branch", "-D", "lane/P-1")
    main = commit_file(repo, "later.txt", "x\n", "main moved")
    t2 = adm.admit(card, board.project("P"))
    assert git(t2, "rev-parse", "HEAD") == main


def test_reattach_the_lane_branch_after_prune(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    card = board.create_card(ME, "P", "lost tree")
    adm = LaneAdmitter(board)
    target = adm.admit(card, board.project("P"))
    work = commit_file(target, "work.txt", "kept\n", "work in the lane")
    git(repo, "fetch", "-q", target, "HEAD:refs/heads/lane/P-1")  # published, as a delivery is
    shutil.rmtree(target)  # the lane is gone; its published branch survives
    again = adm.admit(card, board.project("P"))
    assert again == target
    assert git(again, "rev-parse", "HEAD") == work  # the branch was re-attached, not re-made
    assert Path(again, "work.txt").read_text() == "kept\n"
    assert [e["how"] for e in lane_events(store)] == ["created", "reattached"]


def test_a_non_checkout_in_the_slot_is_moved_aside_with_its_contents(
    store: Store, repo: Path, clock
) -> None:  # type: ignore[no-untyped-def]
    board = gated(store)
    project(board, repo)
    card = board.create_card(ME, "P", "slot taken")
    slot = repo / ".worktrees" / "P-1"
    (slot / "sub").mkdir(parents=True)
    (slot / "sub" / "notes.txt").write_text("precious\n")
    warnings: list[str] = []
    target = LaneAdmitter(board, warn=warnings.append).admit(card, board.project("P"))
    orphan = repo / ".worktrees" / f"P-1.orphan-{clock.now_ms()}"
    assert (orphan / "sub" / "notes.txt").read_text() == "precious\n"
    assert git(target, "rev-parse", "--abbrev-ref", "HEAD") == "lane/P-1"
    assert any("moved a non-checkout directory" in w for w in warnings)


def test_a_checkout_of_another_branch_in_the_slot_is_refused(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    git(repo, "worktree", "add", "-q", "-b", "other", str(repo / ".worktrees" / "P-1"))
    card = board.create_card(ME, "P", "occupied")
    with pytest.raises(AdmissionError) as err:
        LaneAdmitter(board).admit(card, board.project("P"))
    assert err.value.code == "WORKSPACE_ERROR" and "other" in str(err.value)


def test_a_non_git_directory_runs_in_place(store: Store, tmp_path: Path) -> None:
    board = gated(store)
    plain = tmp_path / "plain"
    plain.mkdir()
    project(board, plain)
    card = board.create_card(ME, "P", "no git")
    assert LaneAdmitter(board).admit(card, board.project("P")) == str(plain)
    assert not (plain / ".worktrees").exists()


def test_a_project_subdirectory_runs_in_the_same_subdirectory_of_the_lane(
    store: Store, repo: Path
) -> None:
    (repo / "svc").mkdir()
    commit_file(repo, "svc/app.py", "app\n", "service")
    board = gated(store)
    project(board, repo / "svc")
    card = board.create_card(ME, "P", "in svc")
    target = LaneAdmitter(board).admit(card, board.project("P"))
    assert target == str(repo.resolve() / ".worktrees" / "P-1" / "svc")
    assert Path(target, "app.py").read_text() == "app\n"


def test_shared_workspace_is_the_explicit_opt_out_and_warns_once(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo, workspace="shared")
    a = board.create_card(ME, "P", "a")
    b = board.create_card(ME, "P", "b")
    c = board.create_card(ME, "P", "c")
    warnings: list[str] = []
    adm = LaneAdmitter(board, warn=warnings.append)
    assert adm.admit(a, board.project("P")) == str(repo)
    board.claim(ME, a.ref, holder="worker")
    assert adm.admit(b, board.project("P")) == str(repo)
    board.claim(ME, b.ref, holder="worker")
    assert adm.admit(c, board.project("P")) == str(repo)
    assert len(warnings) == 1 and "shared" in warnings[0]
    assert not (repo / ".worktrees").exists()
    with store.read() as tx:
        assert lanes_of(tx, a.id) == []


def test_project_without_a_directory_is_not_admitted(store: Store) -> None:
    board = gated(store)
    board.add_project(ME, "P")
    card = board.create_card(ME, "P", "nowhere")
    with pytest.raises(AdmissionError) as err:
        LaneAdmitter(board).admit(card, board.project("P"))
    assert err.value.code == "PROJECT_UNMAPPED"


def test_the_admitter_asks_git_for_the_checkout_once_a_pass(store: Store, tmp_path: Path) -> None:
    """Cards of one project admitted together share one probe; a directory that becomes a
    repository is seen once the short memory has passed."""
    board = gated(store)
    plain = tmp_path / "plain"
    plain.mkdir()
    project(board, plain, key="Q")
    now = [100.0]
    admitter = LaneAdmitter(board, monotonic=lambda: now[0])
    cards = [board.create_card(ME, "Q", f"c{i}") for i in range(2)]
    assert [admitter.admit(c, board.project("Q")) for c in cards] == [str(plain)] * 2
    git(plain, "init", "-q", "-b", "main")
    git(plain, "-c", "user.email=t@e", "-c", "user.name=T", "commit", "-q", "--allow-empty",
        "-m", "first")  # fmt: skip
    assert admitter.primary_checkout(str(plain)) is None  # remembered
    now[0] += LaneAdmitter.CHECKOUT_TTL_S
    assert admitter.primary_checkout(str(plain)) == str(plain)


def test_a_lane_half_made_by_a_killed_process_is_made_again(store: Store, repo: Path) -> None:
    """A process killed while making a lane left a fresh repository (no commit, on the
    default branch) at the slot, or its ``.making-`` directory: the next admission makes
    the lane instead of refusing the slot at every try."""
    board = gated(store)
    project(board, repo)
    card = board.create_card(ME, "P", "killed mid-admission")
    slot = repo / ".worktrees" / "P-1"
    slot.parent.mkdir(exist_ok=True)
    git(slot.parent, "init", "-q", str(slot))  # what `git init` alone leaves
    leftover = repo / ".worktrees" / "P-1.making-999999"
    leftover.mkdir()
    target = LaneAdmitter(board).admit(card, board.project("P"))
    assert git(target, "rev-parse", "--abbrev-ref", "HEAD") == "lane/P-1"
    assert git(target, "rev-parse", "HEAD") == git(repo, "rev-parse", "main")
    assert not leftover.exists()
    assert not list((repo / ".worktrees").glob("P-1.making-*"))


def test_a_lane_made_but_not_recorded_by_a_killed_process_is_reused(
    store: Store, repo: Path
) -> None:
    """A process killed after making a lane and before recording it left a whole lane whose
    branch exists only in the lane (it reaches the user's repository with a delivery):
    the next admission reuses and records it, with its fork point from the checkout,
    instead of failing at every try until the card is held."""
    from laneboard.workspace.lanes import make_lane

    board = gated(store)
    project(board, repo)
    card = board.create_card(ME, "P", "killed before the record")
    base = git(repo, "rev-parse", "main")
    slot = repo / ".worktrees" / "P-1"
    slot.parent.mkdir(exist_ok=True)
    make_lane(str(repo), str(slot), "lane/P-1", base)  # made, never recorded
    commit_file(slot, "work.txt", "work\n", "lane work")  # and the turn began working in it
    target = LaneAdmitter(board).admit(card, board.project("P"))
    assert target == str(slot.resolve())
    assert (slot / "work.txt").read_text() == "work\n"  # nothing lost
    with store.read() as tx:
        lane = lane_for(tx, card.id, 1)
    assert lane is not None
    assert (lane.branch, lane.base, lane.base_commit) == ("lane/P-1", "main", base)
    assert [e["how"] for e in lane_events(store)] == ["reused"]
