"""Projects and their settings.

A project's shared git remote is checked before it is written (``add_project``,
``edit_project``): the board asks ``remote_check`` — git's side, installed by the runtime's
hooks (``workspace.hooks.install``) like the delivery and landing gates — outside any
transaction, after the cheap checks (input, authority, a key taken) and before the write.
A board without the hooks (a bare ``Board(store)``) takes the remote as given.

A project's settings have one precedence (docs/configuration.md): flag → environment →
the project's ``.laneboard/config.toml`` → the board's settings here → the user's file →
default. The board layer serves projects whose repository carries no file; a board
setting the file already sets is refused, and ``move_project_config_to_file`` moves a
board's settings into the file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from laneboard.board import inputs
from laneboard.board.authority import Caller, require
from laneboard.board.base import BoardBase
from laneboard.config_keys import BOARD_SETTINGS, Bad, all_keys
from laneboard.domain.model import Actor, Project
from laneboard.errors import LaneboardError, bad_input
from laneboard.store import IntegrityError
from laneboard.store.tx import Tx


class ProjectsMixin(BoardBase):
    def add_project(
        self,
        actor: Actor,
        key: str,
        name: str | None = None,
        path: str | None = None,
        base_ref: str | None = None,
        config: dict[str, Any] | None = None,
        remote: str | None = None,
    ) -> Project:
        """Add a project. ``remote`` names a shared git remote (a URL git can push to, or a
        bare repository's path): every machine then works on its own clone of it
        (docs/lanes.md, lanes across machines)."""
        require(actor, Caller.PERSON, "add a project")
        key = inputs.project_key(key)
        name = inputs.text(name or key, "project name", limit=200)
        remote = _remote(remote)
        if remote is not None:
            with self.store.read() as tx:
                _refuse_taken(tx, key, name)
            self._check_remote(remote, base_ref, "--base-ref {}")
        try:
            with self.store.write() as tx:
                _refuse_taken(tx, key, name)
                pid = tx.insert_project(key, name, path, base_ref, remote)
                if config:
                    tx.update_project(pid, config=config)
                tx.append_event(
                    "project.added",
                    actor,
                    project_id=pid,
                    payload={"key": key, "name": name, "path": path, "remote": remote},
                )
                p = tx.project(id=pid)
        except IntegrityError:
            raise LaneboardError(
                "CONFLICT", f"project {key} already exists", "use the existing project"
            ) from None
        assert p is not None
        return p

    def edit_project(self, actor: Actor, ref: str | int, *, remote: str | None) -> Project:
        """Set, switch or clear (``remote=None``) a project's shared git remote.

        The new remote is checked like ``add_project``'s. Refused (``CONFLICT``) while a card
        of the project has work not landed — claimed, delivered, or with an active lane —
        because its lane lives in the old checkout or clone and its branch on the old
        remote: the landing would look for it where it is not. Unchanged: nothing written.
        """
        require(actor, Caller.PERSON, "edit projects")
        remote = _remote(remote) if remote is not None else None
        with self.store.read() as tx:
            p = self._project(tx, ref)
            if p.remote == remote:
                return p
            _refuse_in_flight(tx, p)
            base_ref = p.base_ref or tx.project_config(p.id).get("base_ref")
        if remote is not None:
            base = str(base_ref) if base_ref else None  # edit has no --base-ref: config does
            self._check_remote(remote, base, f"lb project config {p.key} --set base_ref={{}}")
        with self.store.write() as tx:
            p = self._project(tx, p.id)
            if p.remote == remote:
                return p
            _refuse_in_flight(tx, p)
            tx.update_project(p.id, remote=remote)
            tx.append_event(
                "project.edited",
                actor,
                project_id=p.id,
                payload={"key": p.key, "remote": remote, "was": p.remote},
            )
            got = tx.project(id=p.id)
        assert got is not None
        return got

    def _check_remote(self, remote: str, base_ref: str | None, set_base: str) -> None:
        if self.remote_check is not None:
            self.remote_check(remote, base_ref, set_base)

    def projects(self) -> list[Project]:
        with self.store.read() as tx:
            return tx.projects()

    def project(self, ref: str | int) -> Project:
        with self.store.read() as tx:
            return self._project(tx, ref)

    def project_config(self, ref: str | int) -> dict[str, Any]:
        with self.store.read() as tx:
            return tx.project_config(self._project(tx, ref).id)

    def set_project_config(
        self, actor: Actor, ref: str | int, changes: dict[str, Any], unset: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Change a project's settings (workspace, review_gate, check_timeout, base_ref)."""
        require(actor, Caller.PERSON, "change project settings")
        checked = {k: _project_setting(k, v) for k, v in changes.items()}
        for key in unset:
            _project_setting(key, None)
        with self.store.write() as tx:
            p = self._project(tx, ref)
            _refuse_shadowed(p, checked)
            cfg = {**tx.project_config(p.id), **checked}
            for key in unset:
                cfg.pop(key, None)
            tx.update_project(p.id, config=cfg)
            tx.append_event(
                "project.configured",
                actor,
                project_id=p.id,
                payload={"set": sorted(checked), "unset": sorted(unset)},
            )
            return cfg

    def move_project_config_to_file(
        self, actor: Actor, ref: str | int, *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Move the board's settings of a project into its ``.laneboard/config.toml``.

        Settings the file already has stay as the file says (the file wins over the board
        anyway); the rest are appended to its ``[project]`` table. Then the board's copies
        are removed in one transaction with its event. ``dry_run`` writes nothing.
        """
        from laneboard.config_resolve import project_file_path
        from laneboard.config_write import with_project_keys, write_atomic

        require(actor, Caller.PERSON, "change project settings")
        with self.store.read() as tx:
            p = self._project(tx, ref)
            stored = tx.project_config(p.id)
        if not p.path or not os.path.isdir(p.path):
            raise LaneboardError(
                "CONFLICT",
                f"project {p.key} has no directory on this machine",
                f"set one with lb project add … --path, or write {p.key}'s settings by hand",
            )
        path = project_file_path(p.path)
        in_file = _file_values(p)
        board_values = _board_values(p, stored)
        moved = {k: v for k, v in board_values.items() if k not in in_file}
        kept = sorted(k for k in board_values if k in in_file)
        before = _read_text(path)
        after = with_project_keys(before, moved)
        result = {
            "project": p.key,
            "file": path,
            "moved": sorted(moved),
            "kept_from_file": kept,
            "text": after,
            "dry_run": dry_run,
        }
        if dry_run or not board_values:
            return result
        if after != before:
            write_atomic(path, after)
        with self.store.write() as tx:
            p = self._project(tx, p.id)
            cfg = {k: v for k, v in tx.project_config(p.id).items() if k not in board_values}
            tx.update_project(p.id, config=cfg, base_ref=None)
            tx.append_event(
                "project.configured",
                actor,
                project_id=p.id,
                payload={"set": [], "unset": sorted(board_values), "moved_to_file": path},
            )
        return result


PROJECT_SETTINGS = BOARD_SETTINGS


def _remote(remote: str | None) -> str | None:
    """A remote git can be given as an argument: a URL or a path, never an option."""
    if remote is None:
        return None
    remote = inputs.text(remote, "remote", limit=4000, empty=True).strip()
    if not remote or remote.startswith("-") or any(c in remote for c in "\n\r\0"):
        raise bad_input(
            f"remote {remote!r} is not a git remote",
            "give a URL git can push to, or the path of a bare repository (to clear a "
            "project's remote: lb project edit KEY --no-remote)",
        )
    if _password_of(remote):
        raise bad_input(
            f"the remote {_without_password(remote)} holds a password in its URL, which the "
            "board would show to everyone who lists projects or reads events",
            "give the URL without it and let git supply the credential on each machine: a "
            "credential helper (see: git help credentials) or an ssh key",
        )
    return remote


def _password_of(url: str) -> str | None:
    """The password in a ``scheme://user:password@host/…`` URL (None: it has none)."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.replace("+", "").isalpha():
        return None  # a path, or scp-like ``user@host:path``: no place for a password
    userinfo, at, _ = rest.split("/", 1)[0].rpartition("@")
    if not at:
        return None
    _, colon, password = userinfo.partition(":")
    return password if colon else None


def _without_password(url: str) -> str:
    scheme, _, rest = url.partition("://")
    host_part, slash, path = rest.partition("/")
    userinfo, _, host = host_part.rpartition("@")
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{host}{slash}{path}"


def _refuse_taken(tx: Tx, key: str, name: str) -> None:
    if tx.project(key=key) or tx.project(name=name):
        raise LaneboardError(
            "CONFLICT",
            f"project {key} ({name}) already exists",
            "pick another key and name, or use the existing project",
        )


def _refuse_in_flight(tx: Tx, project: Project) -> None:
    """A project whose cards have work not landed keeps its remote (and its checkout)."""
    ids = tx.cards_in_flight(project.id)
    if not ids:
        return
    refs = [c.ref for c in (tx.card(i) for i in ids[:5]) if c is not None]
    more = f" and {len(ids) - len(refs)} more" if len(ids) > len(refs) else ""
    raise LaneboardError(
        "CONFLICT",
        f"project {project.key} has work not landed yet ({', '.join(refs)}{more}): its lanes "
        "are in the current checkout and on the current remote, and would be stranded",
        f"land or cancel those cards first (lb card list --project {project.key}), then "
        "change the remote",
    )


def _project_setting(key: str, value: Any) -> Any:
    """Validate one project setting (``None`` only checks the key)."""
    if key not in PROJECT_SETTINGS:
        raise bad_input(
            f"unknown project setting {key!r}", f"settings: {', '.join(PROJECT_SETTINGS)}"
        )
    if value is None:
        return None
    try:
        checked = all_keys()[f"project.{key}"].check(value)
    except Bad as bad:
        raise bad_input(f"{key} {value!r} is not valid: {bad.message}", bad.fix) from None
    if key == "base_ref" and not checked:
        raise bad_input("base_ref is empty", "give a ref, or --unset base_ref")
    return list(checked) if isinstance(checked, tuple) else checked


def _file_values(project: Project) -> dict[str, tuple[Any, str]]:
    """What the project's own file sets: short name -> (value, file:line)."""
    from laneboard.config_resolve import project_file_path, read_file

    if not project.path or not os.path.isdir(project.path):
        return {}
    found = read_file(project_file_path(project.path), all_keys(), project=True)
    if found is None:
        return {}
    out = {}
    for name, (value, line) in found.values.items():
        where = f"{found.path}:{line}" if line else found.path
        out[name.split(".", 1)[1]] = (value, where)
    return out


def _board_values(project: Project, stored: dict[str, Any]) -> dict[str, Any]:
    values = {k: v for k, v in stored.items() if k in PROJECT_SETTINGS}
    if project.base_ref:
        values["base_ref"] = project.base_ref
    return values


def _refuse_shadowed(project: Project, changes: dict[str, Any]) -> None:
    """A board setting the project's file also sets would never apply: refuse it."""
    in_file = _file_values(project)
    for key in sorted(changes):
        if key in in_file:
            raise LaneboardError(
                "CONFLICT",
                f"{in_file[key][1]} sets {key} for {project.key}, and the project's file "
                "wins over the board",
                "change it in that file (it is checked in with the project)",
            )


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""
