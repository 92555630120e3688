"""Errors every layer raises: a stable code, a message and the fix.

The CLI prints them as one line on stderr; the HTTP API as ``{code, message}``.
"""

from __future__ import annotations

from typing import Any

# code -> (HTTP status, CLI exit code)
CODES: dict[str, tuple[int, int]] = {
    "NOT_FOUND": (404, 1),
    "BAD_INPUT": (422, 2),
    "ILLEGAL_TRANSITION": (409, 1),
    "CLAIM_CONFLICT": (409, 1),
    "NOTHING_READY": (404, 1),
    "STALE_CLAIM": (409, 1),
    "REPORT_REQUIRED": (409, 1),
    "ACCEPTANCE_FORBIDDEN": (409, 1),
    "FORBIDDEN": (403, 1),
    "UNAUTHORIZED": (401, 1),
    "DEPENDENCY_CYCLE": (409, 1),
    "CONFLICT": (409, 1),
    "VERSION_CONFLICT": (409, 1),
    "STORE_UNAVAILABLE": (503, 1),
    "SUPERVISOR_RUNNING": (409, 1),
    "BOARD_NEWER": (409, 1),
    "LOCK_HELD": (409, 3),
    "WORKSPACE_BASE_UNRESOLVED": (409, 1),
    "WORKSPACE_ERROR": (409, 1),
    "REMOTE_UNREACHABLE": (409, 1),
    "VERIFICATION_FAILED": (409, 1),
    "LANDING_BLOCKED": (409, 1),
    "CONFIG_INVALID": (422, 2),
    "AGENT_UNAVAILABLE": (409, 1),
    "SCHEDULER_UNAVAILABLE": (409, 1),
    "SERVICE_FAILED": (409, 1),
    "SANDBOX_UNAVAILABLE": (409, 1),
    "BOUNDARY_VIOLATION": (409, 1),
    "UNSUPPORTED_MEDIA_TYPE": (415, 2),
    # orchestrated runs: the refusals a coordinator or specialist sees verbatim
    "PATH_OVERLAP": (409, 1),
    "OUT_OF_SCOPE": (409, 1),
    "UNKNOWN_DEPENDENCY": (409, 1),
    "DEPTH_LIMIT": (409, 1),
    "ROLE_LIMIT": (409, 1),
    "PLAN_LIMIT": (409, 1),
    "DUPLICATE_ASSIGNMENT": (409, 1),
    "STALE_REVISION": (409, 1),
    "NOT_ACCEPTED": (409, 1),
    "TURN_ACTIVE": (409, 1),
    "CHECKPOINT_REQUIRED": (409, 1),
    "UNVERIFIED_ASSIGNMENTS": (409, 1),
    "BUDGET_EXHAUSTED": (409, 1),
    "PUBLICATION_UNCERTAIN": (409, 1),
    "ILLEGAL_RUN_TRANSITION": (409, 1),
    "IDEMPOTENCY_CONFLICT": (409, 1),
}


class LaneboardError(Exception):
    """A refused operation. Nothing was written when this is raised."""

    def __init__(self, code: str, message: str, fix: str = "", **details: Any) -> None:
        if code not in CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.fix = fix
        self.details = details

    @property
    def http_status(self) -> int:
        return CODES[self.code][0]

    @property
    def exit_code(self) -> int:
        return CODES[self.code][1]

    def line(self) -> str:
        text = f"error {self.code}: {self.message}"
        if self.fix:
            text += f" — {self.fix}"
        return text

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.fix:
            body["fix"] = self.fix
        if self.details:
            body["details"] = self.details
        return body


def not_found(what: str, ref: object, fix: str = "") -> LaneboardError:
    return LaneboardError(
        "NOT_FOUND", f"{what} {ref} does not exist", fix or f"check the {what} reference"
    )


def bad_input(message: str, fix: str) -> LaneboardError:
    return LaneboardError("BAD_INPUT", message, fix)
