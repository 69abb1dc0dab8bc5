"""Migration 0008: a run's source identity is unique per project, not per workspace.

Migration 1 made (workspace, source_system, source_run_id) unique across projects. Because the
source run id defaults to the run id, registering run `r1` in one project failed with an internal
error when another project already held an `r1`, and so revealed that project's run. SQLite cannot
drop a constraint, so the table is rebuilt (SQLite's documented 12-step procedure; the migration
runner turns foreign keys off around it and checks them before committing). Frozen once applied.
"""

SQL = """
CREATE TABLE runs_v8 (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, run_id TEXT NOT NULL,
    experiment_id TEXT NOT NULL, source_system TEXT NOT NULL, source_run_id TEXT NOT NULL,
    method TEXT NOT NULL, status TEXT NOT NULL, context_status TEXT NOT NULL,
    model_version_id TEXT, dataset_version_id TEXT, environment_id TEXT,
    recipe_digest TEXT NOT NULL DEFAULT '', config_json TEXT NOT NULL DEFAULT '{}',
    correlation_id TEXT NOT NULL, is_simulation INTEGER NOT NULL DEFAULT 0,
    launched_by TEXT NOT NULL,
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, started_at TEXT, ended_at TEXT,
    PRIMARY KEY (workspace_id, project_id, run_id),
    UNIQUE (workspace_id, project_id, source_system, source_run_id),
    FOREIGN KEY (workspace_id, project_id, experiment_id)
        REFERENCES experiments (workspace_id, project_id, experiment_id)
) WITHOUT ROWID;
INSERT INTO runs_v8 SELECT
    workspace_id, project_id, run_id, experiment_id, source_system, source_run_id,
    method, status, context_status, model_version_id, dataset_version_id, environment_id,
    recipe_digest, config_json, correlation_id, is_simulation, launched_by,
    identity_json, identity_digest, created_at, updated_at, started_at, ended_at
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v8 RENAME TO runs;
CREATE INDEX runs_by_status ON runs (workspace_id, project_id, status, created_at);
CREATE INDEX runs_by_status_method ON runs (workspace_id, project_id, status, method, created_at);
CREATE INDEX runs_by_activity ON runs (workspace_id, project_id, status, updated_at);
CREATE INDEX runs_incomplete ON runs (workspace_id, project_id, created_at)
    WHERE context_status != 'verified' OR model_version_id IS NULL OR dataset_version_id IS NULL;
CREATE INDEX runs_by_method ON runs (workspace_id, project_id, method, created_at);
CREATE INDEX runs_by_experiment ON runs (workspace_id, project_id, experiment_id, created_at);
CREATE INDEX runs_by_created ON runs (workspace_id, project_id, created_at);
"""
