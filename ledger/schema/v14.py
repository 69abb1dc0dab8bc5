"""Migration 0014: training that runs elsewhere. Frozen once applied.

An external job is a run whose compute belongs to someone else: a Hugging Face Job or a managed provider's
fine-tune, or a SkyPilot/dstack plan once it was launched. The row keeps what the upstream needs to be asked
again (surface, provider, its job id, the receipt of the submission) and what was asked of it (the exact request
and its digest, flavor, timeout, cost ceiling, lineage, where the artifacts go). `state` is the upstream's, as
last observed; `submitting` is the intent written before the upstream was called, so a crash between the two is
reconciled by asking the upstream, never by submitting again. `compute_started` turns 1 only on log or metric
evidence. Observations are append-only: every state, log line batch, metric or provider event that moved a job.

A compute plan is only a plan: the engine's own task definition and its digest, with no job id. A plan that is
launched names the external job that launch created.
"""

SQL = """
CREATE TABLE external_jobs (
    workspace_id TEXT NOT NULL, job_id TEXT NOT NULL,
    project_id TEXT NOT NULL, run_id TEXT NOT NULL,
    surface TEXT NOT NULL CHECK (surface IN ('hf-jobs', 'managed', 'skypilot', 'dstack')),
    provider TEXT NOT NULL DEFAULT '',
    upstream_job_id TEXT,
    state TEXT NOT NULL CHECK (
        state IN ('submitting', 'submitted', 'running', 'completed', 'failed', 'cancelled', 'unknown')
    ),
    upstream_state TEXT NOT NULL DEFAULT '',
    compute_started INTEGER NOT NULL DEFAULT 0 CHECK (compute_started IN (0, 1)),
    flavor TEXT NOT NULL, timeout_s INTEGER, cost_ceiling_usd REAL, ceiling_gpu_hours REAL,
    request_json TEXT NOT NULL, request_digest TEXT NOT NULL,
    lineage_json TEXT NOT NULL, destination TEXT NOT NULL,
    receipt_json TEXT, result_json TEXT,
    reason TEXT NOT NULL DEFAULT '',
    cancel_requested_by TEXT,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, job_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX external_jobs_upstream ON external_jobs (surface, provider, upstream_job_id)
    WHERE upstream_job_id IS NOT NULL;
CREATE UNIQUE INDEX external_jobs_run ON external_jobs (workspace_id, run_id);
CREATE INDEX external_jobs_open ON external_jobs (state)
    WHERE state IN ('submitting', 'submitted', 'running', 'unknown');
CREATE TABLE external_job_observations (
    workspace_id TEXT NOT NULL, job_id TEXT NOT NULL, seq INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('state', 'log', 'metric', 'event', 'receipt', 'result', 'cancel')),
    upstream_state TEXT NOT NULL DEFAULT '', message TEXT NOT NULL DEFAULT '', data_json TEXT,
    observed_by TEXT NOT NULL, observed_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, job_id, seq),
    FOREIGN KEY (workspace_id, job_id) REFERENCES external_jobs (workspace_id, job_id)
) WITHOUT ROWID;
CREATE TABLE compute_plans (
    workspace_id TEXT NOT NULL, plan_id TEXT NOT NULL, project_id TEXT NOT NULL,
    engine TEXT NOT NULL CHECK (engine IN ('skypilot', 'dstack')),
    request_digest TEXT NOT NULL, plan_digest TEXT NOT NULL, plan_text TEXT NOT NULL,
    validation_json TEXT NOT NULL, launched_job_id TEXT,
    created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, plan_id)
) WITHOUT ROWID;
"""
