"""The error hierarchy every layer raises; each adapter turns these into its own answer."""

from __future__ import annotations

from typing import ClassVar


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
