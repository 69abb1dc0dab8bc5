"""The experiment ledger: BashGym's authoritative SQLite record. The only code that holds SQL.

The facade is `bashgym.ledger.store.Ledger`; importing this package loads nothing else, so the wire models
(`bashgym.client.specs`) come without the store and sqlite3.
"""
