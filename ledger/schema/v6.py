"""Migration 0006: where each project's notifications go (a Discord channel id), set from Discord or the CLI.
Frozen once applied."""

SQL = """
CREATE TABLE project_channels (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL,
    channel_id TEXT NOT NULL, guild_id TEXT NOT NULL DEFAULT '',
    set_by TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id),
    FOREIGN KEY (workspace_id, project_id) REFERENCES projects (workspace_id, project_id)
) WITHOUT ROWID;
"""
