"""Errors as the daemon's clients see them, and the exit code each maps to. No heavy imports here:
the CLI loads this module on every command, including `bashgym daemon`."""

from __future__ import annotations

from typing import Any

# Exit codes every CLI command uses.
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_FORBIDDEN = 4
EXIT_NOT_FOUND = 5
EXIT_CONFLICT = 6
EXIT_RULE = 7  # rejected by a rule: validation, a gate, a budget
EXIT_UNAVAILABLE = 8  # daemon unreachable, or an internal error
_EXIT_BY_STATUS = {
    401: EXIT_AUTH,
    403: EXIT_FORBIDDEN,
    404: EXIT_NOT_FOUND,
    409: EXIT_CONFLICT,
    413: EXIT_RULE,
    422: EXIT_RULE,
    429: EXIT_RULE,
}


def exit_code_for_status(status: int) -> int:
    return _EXIT_BY_STATUS.get(status, EXIT_UNAVAILABLE)


class ApiError(Exception):
    """An error answer of the daemon, in its {"error": {...}} shape."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        hint: str = "",
        reference: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.hint = hint
        self.reference = reference
        self.details = details or {}

    @property
    def exit_code(self) -> int:
        return exit_code_for_status(self.status)


class DaemonUnreachable(ApiError):
    def __init__(self, target: str, reason: str) -> None:
        super().__init__(
            0,
            "daemon_unreachable",
            f"No BashGym daemon answers at {target} ({reason}).",
            hint="Start one with `bashgym daemon` (or `bashgym up`), or point --api at it.",
        )
