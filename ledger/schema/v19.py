"""Migration 0019: Slurm clusters runs are submitted to, per workspace (ledger/clusters.py). Frozen once applied.

`access` says where the Slurm client commands run: `local` on the daemon's host, `ssh` on a login node reached as
the registered device `login_device_id`. `shared_dir` is where run directories live, seen by the daemon (local) or
the login node (ssh) and by the compute nodes.
"""

SQL = """
CREATE TABLE clusters (
    workspace_id TEXT NOT NULL,
    cluster_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('slurm')),
    access TEXT NOT NULL CHECK (access IN ('local', 'ssh')),
    login_device_id TEXT,
    partition TEXT NOT NULL,
    account TEXT,
    qos TEXT,
    gpu_type TEXT,
    gpus_per_node INTEGER NOT NULL DEFAULT 0,
    max_nodes INTEGER NOT NULL DEFAULT 1,
    time_limit_min INTEGER NOT NULL,
    shared_dir TEXT NOT NULL,
    python TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, cluster_id)
) WITHOUT ROWID;
"""
