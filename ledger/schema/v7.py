"""Migration 0007: event sinks, HTTP endpoints the daemon forwards ledger events to by durable cursor.
Frozen once applied."""

SQL = """
CREATE TABLE sinks (
    workspace_id TEXT NOT NULL, name TEXT NOT NULL,
    url TEXT NOT NULL, secret_env TEXT NOT NULL,
    project_id TEXT, types_json TEXT NOT NULL DEFAULT '[]',
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, name)
) WITHOUT ROWID;
"""
