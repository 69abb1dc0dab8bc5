"""Migration 0009: device groups, named and ordered sets of registered devices that train one run together
(member i is machine rank i), each with its last group preflight. Frozen once applied."""

SQL = """
CREATE TABLE device_groups (
    workspace_id TEXT NOT NULL, group_id TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    preflight_json TEXT, preflight_at TEXT, ready INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, group_id)
) WITHOUT ROWID;
"""
