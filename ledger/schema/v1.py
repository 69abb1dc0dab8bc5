"""Migration 0001: the first ledger schema. Applied migrations are frozen: never edit this text."""

SQL = """
CREATE TABLE projects (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL,
    name TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id)
) WITHOUT ROWID;

CREATE TABLE experiments (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, experiment_id TEXT NOT NULL,
    name TEXT NOT NULL, objective TEXT NOT NULL DEFAULT '', task_type TEXT NOT NULL DEFAULT '',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, experiment_id),
    FOREIGN KEY (workspace_id, project_id) REFERENCES projects (workspace_id, project_id)
) WITHOUT ROWID;

CREATE TABLE model_versions (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, model_version_id TEXT NOT NULL,
    model_id TEXT NOT NULL, source_uri TEXT NOT NULL, source_revision TEXT NOT NULL DEFAULT '',
    config_digest TEXT NOT NULL DEFAULT '', parent_version_id TEXT,
    files_json TEXT NOT NULL DEFAULT '[]',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, model_version_id),
    FOREIGN KEY (workspace_id, project_id) REFERENCES projects (workspace_id, project_id)
) WITHOUT ROWID;

CREATE TABLE dataset_versions (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, dataset_version_id TEXT NOT NULL,
    dataset_id TEXT NOT NULL, source_uri TEXT NOT NULL, content_digest TEXT NOT NULL,
    split_manifest_json TEXT NOT NULL DEFAULT '{}', row_counts_json TEXT NOT NULL DEFAULT '{}',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, dataset_version_id),
    FOREIGN KEY (workspace_id, project_id) REFERENCES projects (workspace_id, project_id)
) WITHOUT ROWID;

CREATE TABLE environments (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, environment_id TEXT NOT NULL,
    compute_target TEXT NOT NULL, runtime_digest TEXT NOT NULL, hardware_json TEXT NOT NULL DEFAULT '{}',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, environment_id),
    FOREIGN KEY (workspace_id, project_id) REFERENCES projects (workspace_id, project_id)
) WITHOUT ROWID;

CREATE TABLE runs (
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
    UNIQUE (workspace_id, source_system, source_run_id),
    FOREIGN KEY (workspace_id, project_id, experiment_id)
        REFERENCES experiments (workspace_id, project_id, experiment_id)
) WITHOUT ROWID;
CREATE INDEX runs_by_status ON runs (workspace_id, project_id, status, created_at);
CREATE INDEX runs_by_status_method ON runs (workspace_id, project_id, status, method, created_at);
CREATE INDEX runs_by_activity ON runs (workspace_id, project_id, status, updated_at);
CREATE INDEX runs_incomplete ON runs (workspace_id, project_id, created_at)
    WHERE context_status != 'verified' OR model_version_id IS NULL OR dataset_version_id IS NULL;
CREATE INDEX runs_by_method ON runs (workspace_id, project_id, method, created_at);
CREATE INDEX runs_by_experiment ON runs (workspace_id, project_id, experiment_id, created_at);
CREATE INDEX runs_by_created ON runs (workspace_id, project_id, created_at);

CREATE TABLE attempts (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, attempt_id TEXT NOT NULL,
    run_id TEXT NOT NULL, attempt_number INTEGER NOT NULL, status TEXT NOT NULL,
    status_reason TEXT NOT NULL DEFAULT '', error_summary TEXT NOT NULL DEFAULT '',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, started_at TEXT, ended_at TEXT,
    PRIMARY KEY (workspace_id, project_id, attempt_id),
    UNIQUE (workspace_id, project_id, run_id, attempt_number),
    FOREIGN KEY (workspace_id, project_id, run_id) REFERENCES runs (workspace_id, project_id, run_id)
) WITHOUT ROWID;

-- A series is one metric of one attempt; points key on (series_id, step), which keeps each row
-- a few bytes and makes a 1,000-point batch one short B-tree append.
CREATE TABLE metric_series (
    series_id INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, run_id TEXT NOT NULL,
    metric TEXT NOT NULL, attempt_id TEXT NOT NULL,
    UNIQUE (workspace_id, project_id, run_id, metric, attempt_id)
);

CREATE TABLE metric_points (
    series_id INTEGER NOT NULL REFERENCES metric_series (series_id), step INTEGER NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (series_id, step)
) WITHOUT ROWID;

CREATE VIEW metric_values AS
    SELECT s.workspace_id, s.project_id, s.run_id, s.metric, s.attempt_id, p.step, p.value
    FROM metric_series s JOIN metric_points p ON p.series_id = s.series_id;

CREATE TABLE artifacts (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, artifact_id TEXT NOT NULL,
    run_id TEXT, attempt_id TEXT, kind TEXT NOT NULL, uri TEXT NOT NULL, sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL, media_type TEXT NOT NULL DEFAULT 'application/octet-stream',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, artifact_id)
) WITHOUT ROWID;
CREATE INDEX artifacts_by_run ON artifacts (workspace_id, project_id, run_id);

CREATE TABLE eval_suites (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, suite_id TEXT NOT NULL,
    kind TEXT NOT NULL, dataset_version_id TEXT, scoring_contract_json TEXT NOT NULL,
    code_digest TEXT NOT NULL, is_protected INTEGER NOT NULL DEFAULT 0,
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, suite_id)
) WITHOUT ROWID;

CREATE TABLE eval_results (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, result_id TEXT NOT NULL,
    suite_id TEXT NOT NULL, run_id TEXT, attempt_id TEXT, model_version_id TEXT,
    status TEXT NOT NULL, metrics_json TEXT NOT NULL, sample_count INTEGER NOT NULL DEFAULT 0,
    is_simulation INTEGER NOT NULL DEFAULT 0,
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, result_id),
    FOREIGN KEY (workspace_id, project_id, suite_id) REFERENCES eval_suites (workspace_id, project_id, suite_id)
) WITHOUT ROWID;
CREATE INDEX eval_results_by_run ON eval_results (workspace_id, project_id, run_id);
CREATE INDEX eval_results_by_created ON eval_results (workspace_id, project_id, created_at);

CREATE TABLE comparisons (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, comparison_id TEXT NOT NULL,
    suite_id TEXT NOT NULL, baseline_result_id TEXT NOT NULL, candidate_result_id TEXT NOT NULL,
    primary_metric TEXT NOT NULL, delta REAL, ci_low REAL, ci_high REAL,
    details_json TEXT NOT NULL DEFAULT '{}',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, comparison_id)
) WITHOUT ROWID;

CREATE TABLE decisions (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, decision_id TEXT NOT NULL,
    decision_type TEXT NOT NULL, outcome TEXT NOT NULL, rationale TEXT NOT NULL,
    run_id TEXT, evidence_refs_json TEXT NOT NULL DEFAULT '[]', actor TEXT NOT NULL,
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, decision_id)
) WITHOUT ROWID;
CREATE INDEX decisions_by_created ON decisions (workspace_id, project_id, created_at);

CREATE TABLE model_aliases (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, alias TEXT NOT NULL,
    model_version_id TEXT NOT NULL, updated_by TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, alias)
) WITHOUT ROWID;

CREATE TABLE model_alias_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, alias TEXT NOT NULL,
    model_version_id TEXT NOT NULL, previous_version_id TEXT, decision_id TEXT,
    moved_by TEXT NOT NULL, moved_at TEXT NOT NULL
);

CREATE TABLE budget_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, entry_id TEXT NOT NULL,
    scope TEXT NOT NULL, kind TEXT NOT NULL, gpu_hours REAL NOT NULL DEFAULT 0, runs INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '', run_id TEXT,
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    UNIQUE (workspace_id, project_id, entry_id)
);

CREATE TABLE reports (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, report_id TEXT NOT NULL,
    kind TEXT NOT NULL, title TEXT NOT NULL, manifest_json TEXT NOT NULL DEFAULT '{}',
    identity_json TEXT NOT NULL, identity_digest TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, report_id)
) WITHOUT ROWID;

-- The single writer assigns cursors (last + 1) and rows are never deleted, so a plain rowid key
-- is monotonic without AUTOINCREMENT's extra write per insert.
CREATE TABLE events (
    cursor INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE, event_type TEXT NOT NULL,
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL,
    experiment_id TEXT, run_id TEXT, attempt_id TEXT,
    actor TEXT NOT NULL, credential_kind TEXT NOT NULL, capability TEXT NOT NULL,
    correlation_id TEXT NOT NULL, payload_json TEXT NOT NULL, created_at TEXT NOT NULL,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL
);
CREATE INDEX events_by_project ON events (workspace_id, project_id, cursor);
CREATE INDEX events_by_run ON events (workspace_id, project_id, run_id, cursor);

CREATE TABLE consumer_cursors (
    name TEXT PRIMARY KEY, cursor INTEGER NOT NULL, updated_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE api_tokens (
    token_id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, actor_id TEXT NOT NULL,
    profile TEXT NOT NULL DEFAULT '', capabilities_json TEXT NOT NULL DEFAULT '[]',
    workspace_id TEXT, project_id TEXT, expires_at TEXT, revoked_at TEXT,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE idempotency_keys (
    principal TEXT NOT NULL, idempotency_key TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL,
    request_digest TEXT NOT NULL, status_code INTEGER NOT NULL, response_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (principal, idempotency_key)
) WITHOUT ROWID;
"""
