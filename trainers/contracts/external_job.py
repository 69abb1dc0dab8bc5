"""What a job on rented compute and the daemon agree on: the environment the job reads, the files it pushes.

`python -m bashgym.trainers.external_job` (trainers/external_job.py) is the job's command; the daemon builds its
environment (daemon/external/hf_jobs.py) and imports what it pushed by these names.
"""

from __future__ import annotations

import hashlib

REQUEST_ENV = "BASHGYM_JOB_REQUEST"  # the training request, JSON (not secret)
JOB_ID_ENV = "BASHGYM_JOB_ID"  # the BashGym external job id the evidence names
PUSH_REPO_ENV = "BASHGYM_PUSH_REPO"  # the private Hub repo the run's evidence goes to
DATASET_REPO_ENV = "BASHGYM_DATASET_REPO"
DATASET_FILE_ENV = "BASHGYM_DATASET_FILE"
DATASET_REVISION_ENV = "BASHGYM_DATASET_REVISION"
DATASET_EVAL_FILE_ENV = "BASHGYM_DATASET_EVAL_FILE"
EVIDENCE_FILE = "bashgym-run.json"
EVIDENCE_SCHEMA = "bashgym.external-run/v1"
PROFILE_FILE = "model_profile.json"
METRICS_FILE = "metrics.jsonl"
LOG_TAIL_FILE = "training.log.tail"
# What a pushed run holds besides its model files (each listed with its digest in model_profile.json).
EVIDENCE_FILES = (PROFILE_FILE, METRICS_FILE, "effective_config.json", LOG_TAIL_FILE, EVIDENCE_FILE)
# The line the job prints once the push landed: the importer trusts the commit it names only after checking it.
PUSHED_PREFIX = "bashgym: pushed "
OWNER_MARKER_PREFIX = ".bashgym-owner-"


def owner_marker(owner: str) -> str:
    """The file a repository created for project `owner` (`<workspace>/<project>`) holds: its name says whose
    (trainers/hub.py pushes only into a repository holding its project's marker)."""
    return OWNER_MARKER_PREFIX + hashlib.sha256(owner.encode()).hexdigest()[:24]
