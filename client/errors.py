"""The product's errors, as every layer raises them and every client sees them, with the exit code each maps to.

Each has a code, an HTTP status and a message that says what to do next; the daemon answers them in the
error shape and the client rebuilds them as ApiError. No heavy imports here: the CLI loads this module on every
command, including `bashgym daemon`, and the ledger at its bottom raises these too."""

from __future__ import annotations

from typing import Any, ClassVar


class BashGymError(Exception):
    """A failure the caller can act on: the message says what happened and what to do next."""

    code: ClassVar[str] = "bashgym_error"
    status: ClassVar[int] = 400

    def __init__(self, message: str, *, hint: str = "", details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}


class InvalidInput(BashGymError):
    code = "invalid_input"
    status = 422


class RuleRejected(BashGymError):
    """A valid request that a rule (a gate, a budget, a state) refuses."""

    code = "rejected_by_rule"
    status = 422


class NotFound(BashGymError):
    code = "not_found"
    status = 404


class Conflict(BashGymError):
    code = "conflict"
    status = 409


class IdentityConflict(Conflict):
    code = "ledger_identity_conflict"

    def __init__(self, message: str, *, fields: list[str], hint: str = "") -> None:
        super().__init__(message, hint=hint, details={"fields": fields})
        self.fields = fields


class InvalidTransition(Conflict):
    code = "ledger_invalid_transition"


class IdempotencyConflict(Conflict):
    code = "idempotency_key_reused"


class PayloadTooLarge(BashGymError):
    code = "payload_too_large"
    status = 413


class Unauthenticated(BashGymError):
    code = "authentication_required"
    status = 401


class Forbidden(BashGymError):
    code = "forbidden"
    status = 403


class RateLimited(BashGymError):
    code = "rate_limited"
    status = 429

    def __init__(self, message: str, *, retry_after_s: int, hint: str = "") -> None:
        super().__init__(message, hint=hint, details={"retry_after_s": retry_after_s})
        self.retry_after_s = retry_after_s


class LedgerUnavailable(BashGymError):
    """The ledger file cannot be used as it is (corrupt, changed migrations, newer schema)."""

    code = "ledger_unavailable"
    status = 500


class MigrationMismatch(LedgerUnavailable):
    code = "ledger_migration_mismatch"


class LedgerStorageFailed(LedgerUnavailable):
    """The ledger's storage refused a write; nothing of it was stored and the ledger is intact.

    A condition of the machine, not of the request: answered 503 so callers retry once it is fixed.
    """

    code = "ledger_storage_failed"
    status = 503


class LedgerDiskFull(LedgerStorageFailed):
    code = "ledger_disk_full"


class LedgerReadOnly(LedgerStorageFailed):
    code = "ledger_read_only"


class LedgerBusy(LedgerStorageFailed):
    code = "ledger_busy"


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
