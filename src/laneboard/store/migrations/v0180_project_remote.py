"""Migration 180: a project may name a shared git remote.

``projects.remote``: a URL git can push to (or a bare repository's path). A project with a
remote is worked on by every machine of a cluster: each keeps its own clone of the remote
in its state directory, pushes verified lane branches to it, and lands on the remote's base
branch. ``NULL``: the project's lanes are made from its checkout on one machine.
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0001_board
from laneboard.store.schema import Column, Table

VERSION = 180
NAME = "project_remote"

_projects = next(t for t in v0001_board.TABLES if t.name == "projects")

TABLES: tuple[Table, ...] = (
    replace(_projects, columns=(*_projects.columns, Column("remote", "text"))),
)

STATEMENTS: tuple[str, ...] = ("ALTER TABLE projects ADD COLUMN remote {text}",)
