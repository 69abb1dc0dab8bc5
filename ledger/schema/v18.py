"""Migration 0018: tags and a note on a run, a model version or a campaign. Frozen once applied.

One row per tag (`entity_tags`) and per note (`entity_notes`), as they stand now; each change is also a
`tags.set`, `tags.unset` or `note.set` event, which keeps the history. Tracked runs' tags (bashgym.track) and an
MLflow import's are written here too, so every run's tags are read from this one table (ledger/tags.py).
"""

SQL = """
CREATE TABLE entity_tags (
    workspace_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    entity_kind TEXT NOT NULL CHECK (entity_kind IN ('run', 'model_version', 'campaign')),
    entity_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    set_by TEXT NOT NULL,
    set_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, entity_kind, entity_id, key)
);
CREATE INDEX entity_tags_by_key ON entity_tags (workspace_id, project_id, entity_kind, key, value);
CREATE TABLE entity_notes (
    workspace_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    entity_kind TEXT NOT NULL CHECK (entity_kind IN ('run', 'model_version', 'campaign')),
    entity_id TEXT NOT NULL,
    text TEXT NOT NULL,
    set_by TEXT NOT NULL,
    set_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, entity_kind, entity_id)
);
"""
