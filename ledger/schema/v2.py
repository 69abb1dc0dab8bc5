"""Migration 0002: Discord identity grants and token revocation details. Frozen once applied."""

SQL = """
CREATE TABLE discord_grants (
    grant_id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL, project_id TEXT,
    subject_kind TEXT NOT NULL CHECK (subject_kind IN ('user', 'role')), subject_id TEXT NOT NULL,
    profile TEXT NOT NULL DEFAULT '', capabilities_json TEXT NOT NULL DEFAULT '[]',
    created_by TEXT NOT NULL, created_at TEXT NOT NULL, revoked_at TEXT, revoked_by TEXT
) WITHOUT ROWID;
CREATE INDEX discord_grants_by_subject ON discord_grants (workspace_id, subject_kind, subject_id);

ALTER TABLE api_tokens ADD COLUMN revoked_by TEXT;

CREATE INDEX events_by_actor ON events (actor, cursor);
"""
