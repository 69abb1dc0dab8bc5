"""The ledger's schema, one numbered migration per module (append-only: ledger/migrations.py pins each)."""
