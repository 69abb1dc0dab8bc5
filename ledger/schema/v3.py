"""Migration 0003: the compute device registry (SSH hosts) with each device's last preflight. Frozen once applied."""

SQL = """
CREATE TABLE devices (
    workspace_id TEXT NOT NULL, device_id TEXT NOT NULL,
    host TEXT NOT NULL, port INTEGER NOT NULL, username TEXT NOT NULL, key_path TEXT NOT NULL,
    work_dir TEXT NOT NULL, python TEXT NOT NULL,
    gpus INTEGER NOT NULL CHECK (gpus >= 0), slots INTEGER NOT NULL CHECK (slots >= 1),
    host_key TEXT NOT NULL DEFAULT '', known_hosts TEXT NOT NULL DEFAULT '',
    spec_json TEXT NOT NULL,
    preflight_json TEXT, preflight_at TEXT, ready INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, device_id)
) WITHOUT ROWID;
"""
