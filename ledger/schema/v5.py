"""Migration 0005: campaigns (a pinned research loop with a state machine and optimistic versions), their
iterations, and the schedules the daemon's scheduler is rebuilt from. Frozen once applied."""

SQL = """
CREATE TABLE campaigns (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, campaign_id TEXT NOT NULL,
    title TEXT NOT NULL, status TEXT NOT NULL, resume_status TEXT, version INTEGER NOT NULL,
    spec_json TEXT NOT NULL, incumbent_iteration_id TEXT, status_reason TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, campaign_id),
    FOREIGN KEY (workspace_id, project_id) REFERENCES projects (workspace_id, project_id)
) WITHOUT ROWID;
CREATE INDEX campaigns_by_status ON campaigns (status, workspace_id, project_id);

CREATE TABLE campaign_iterations (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, campaign_id TEXT NOT NULL, iteration_id TEXT NOT NULL,
    number INTEGER NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('baseline', 'candidate')), stage TEXT NOT NULL,
    parent_iteration_id TEXT, primary_variable TEXT NOT NULL DEFAULT '', recipe_change_json TEXT NOT NULL DEFAULT '{}',
    rationale TEXT NOT NULL DEFAULT '', run_id TEXT, result_id TEXT, comparison_id TEXT,
    decision TEXT, reason_code TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, campaign_id, iteration_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX campaign_iterations_by_number
    ON campaign_iterations (workspace_id, project_id, campaign_id, number);

CREATE TABLE schedules (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, schedule_id TEXT NOT NULL,
    campaign_id TEXT NOT NULL, kind TEXT NOT NULL, cron TEXT NOT NULL, timezone TEXT NOT NULL,
    channel TEXT NOT NULL DEFAULT '', last_fired_at TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, schedule_id)
) WITHOUT ROWID;
"""
