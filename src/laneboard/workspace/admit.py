"""Admission: resolve the directory a card's agent will run in, before the claim."""

from __future__ import annotations

import os
from typing import Protocol

from laneboard.domain.model import Card, Project


class AdmissionError(Exception):
    """The card cannot be admitted now. ``card_scoped`` failures count toward its bound;
    ``remote``: the project's remote could not be cloned or fetched (the poll does not try
    that project again on this machine for a while: an unreachable remote may take a
    fetch's whole timeout to say so)."""

    def __init__(
        self, message: str, *, card_scoped: bool = True, code: str = "ADMISSION",
        remote: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.card_scoped = card_scoped
        self.code = code
        self.remote = remote


class Admitter(Protocol):
    def admit(self, card: Card, project: Project) -> str: ...


def project_dir(project: Project) -> str:
    """The project's directory on this machine. None, or one that is not here, is the
    project's failure (not counted toward any card): in a cluster its checkout may live
    on another machine."""
    if not project.path:
        raise AdmissionError(
            f"project {project.key} has no directory", card_scoped=False, code="PROJECT_UNMAPPED"
        )
    if not os.path.isdir(project.path):
        raise AdmissionError(
            f"project directory {project.path} does not exist",
            card_scoped=False,
            code="PROJECT_DIR_MISSING",
        )
    return project.path


class DirectoryAdmitter:
    """Runs the card in the project's directory (no lane)."""

    def admit(self, card: Card, project: Project) -> str:
        return project_dir(project)
