"""The experiment ledger: BashGym's authoritative SQLite record. The only code that holds SQL."""

from bashgym.ledger.store import Ledger

__all__ = ["Ledger"]
