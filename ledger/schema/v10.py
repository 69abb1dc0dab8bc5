"""Migration 0010: trust boundaries. Frozen once applied.

- Run and report ids are unique across the ledger (their directories are named by id alone): indexes
  to check that at registration.
- A durable consumer's cursor has an owner, the first principal that moved it: a move by anyone else
  is recorded as an event.
- Blobs are held by projects: uploading one, or registering a record that names one, makes the project
  a holder, and only a holder may train on, evaluate, materialise or export it. Existing dataset and
  stored model versions make their projects holders.
- Idempotency records keep a digest of the key, never the key, and no stored answer holds a token
  (answers of token issues lose the secret and say so). bashgym_sha256 is registered by migrate().
"""

SQL = """
CREATE INDEX runs_by_run_id ON runs (run_id);
CREATE INDEX reports_by_report_id ON reports (report_id);

ALTER TABLE consumer_cursors ADD COLUMN owner TEXT NOT NULL DEFAULT '';

CREATE TABLE blob_holders (
    workspace_id TEXT NOT NULL, project_id TEXT NOT NULL, sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL, created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, project_id, sha256)
) WITHOUT ROWID;
CREATE INDEX blob_holders_by_sha256 ON blob_holders (sha256);

INSERT OR IGNORE INTO blob_holders (workspace_id, project_id, sha256, size_bytes, created_by, created_at)
    SELECT workspace_id, project_id, content_digest, 0, 'migration:10', created_at FROM dataset_versions
    WHERE source_uri LIKE 'bashgym://artifacts/sha256/%';
INSERT OR IGNORE INTO blob_holders (workspace_id, project_id, sha256, size_bytes, created_by, created_at)
    SELECT m.workspace_id, m.project_id, json_extract(f.value, '$.sha256'),
           COALESCE(json_extract(f.value, '$.size_bytes'), 0), 'migration:10', m.created_at
    FROM model_versions AS m, json_each(m.files_json) AS f
    WHERE m.source_uri LIKE 'bashgym://models/%' AND json_extract(f.value, '$.sha256') IS NOT NULL;

UPDATE idempotency_keys SET idempotency_key = 'sha256:' || bashgym_sha256(idempotency_key)
    WHERE idempotency_key NOT LIKE 'sha256:%';
UPDATE idempotency_keys
    SET response_json = json_set(response_json, '$.token', json('null'),
        '$.notice', 'This answer held a secret, shown once when the request was carried out. It cannot be shown again.')
    WHERE path = '/v1/auth/tokens' AND status_code = 201 AND json_valid(response_json)
      AND json_type(response_json, '$.token') = 'text';
"""
