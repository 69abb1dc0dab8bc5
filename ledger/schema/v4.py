"""Migration 0004: evaluation details (per-task scores, isolation, holdout gate) and immutable RunCards.
Frozen once applied."""

SQL = """
ALTER TABLE eval_results ADD COLUMN details_json TEXT NOT NULL DEFAULT '{}';

CREATE TABLE runcards (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, card_id TEXT NOT NULL,
    run_id TEXT NOT NULL, attempt_id TEXT, claim_tier TEXT NOT NULL, decision TEXT NOT NULL,
    card_json TEXT NOT NULL, created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, card_id)
) WITHOUT ROWID;
CREATE INDEX runcards_by_run ON runcards (workspace_id, project_id, run_id, created_at);
"""
