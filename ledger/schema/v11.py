"""Migration 0011: consumer leases. Frozen once applied.

A durable consumer's cursor is followed by one process at a time (one Discord bot per notice cursor): that
process holds a lease on the consumer's name, renews it while it runs and releases it when it stops. A lease
that is not renewed expires, so a holder that crashed blocks the next one for one TTL at most. A lease is
operational state, not history: taking, renewing and releasing one appends no event.
"""

SQL = """
CREATE TABLE consumer_leases (
    name TEXT PRIMARY KEY, holder TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    actor_id TEXT NOT NULL, acquired_at TEXT NOT NULL, renewed_at TEXT NOT NULL, expires_at TEXT NOT NULL
) WITHOUT ROWID;
"""
