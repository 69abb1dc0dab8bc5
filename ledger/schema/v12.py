"""Migration 0012: cascade stages. Frozen once applied.

A cascade campaign's iterations are its declared stages (kind `stage`), so the iteration kind's CHECK takes one
more value, which SQLite can change only by rebuilding the table. A stage records what a candidate does not: the
model version it kept (the next stage trains from it), its comparison against the cascade's starting model (the
final stage), its RunCard and the promotion gate's blockers (codes and messages, JSON).
"""

SQL = """
CREATE TABLE campaign_iterations_v12 (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, campaign_id TEXT NOT NULL, iteration_id TEXT NOT NULL,
    number INTEGER NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('baseline', 'candidate', 'stage')),
    stage TEXT NOT NULL, parent_iteration_id TEXT, primary_variable TEXT NOT NULL DEFAULT '',
    recipe_change_json TEXT NOT NULL DEFAULT '{}', rationale TEXT NOT NULL DEFAULT '', run_id TEXT, result_id TEXT,
    comparison_id TEXT, decision TEXT, reason_code TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    model_version_id TEXT, start_comparison_id TEXT, card_id TEXT, blockers_json TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (workspace_id, project_id, campaign_id, iteration_id)
) WITHOUT ROWID;
INSERT INTO campaign_iterations_v12 (workspace_id, project_id, campaign_id, iteration_id, number, kind, stage,
    parent_iteration_id, primary_variable, recipe_change_json, rationale, run_id, result_id, comparison_id, decision,
    reason_code, created_at, updated_at)
SELECT workspace_id, project_id, campaign_id, iteration_id, number, kind, stage, parent_iteration_id,
    primary_variable, recipe_change_json, rationale, run_id, result_id, comparison_id, decision, reason_code,
    created_at, updated_at
FROM campaign_iterations;
DROP TABLE campaign_iterations;
ALTER TABLE campaign_iterations_v12 RENAME TO campaign_iterations;
CREATE UNIQUE INDEX campaign_iterations_by_number
    ON campaign_iterations (workspace_id, project_id, campaign_id, number);
"""
