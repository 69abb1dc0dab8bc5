"""The wire contract of an import: runs another tracker recorded (MLflow), sent by the CLI in bounded batches.

The CLI reads the tracker with the user's own network and credentials; the daemon only records what it is sent,
as runs on lane `imported`, never as evidence (docs/imports.md).
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from bashgym.client.specs import MAX_METRIC_BATCH, MetricPoint, Spec
from pydantic import Field, model_validator

IMPORTED_LANE, MLFLOW = "imported", "mlflow"
IMPORTED_TARGET = f"{IMPORTED_LANE}:{MLFLOW}"  # an imported run's compute target: not ours, named by its tracker
MAX_IMPORT_RUNS = 50  # runs per request; their points together stay within MAX_METRIC_BATCH
MAX_ARTIFACT_LISTING = 500  # entries of a run's artifact listing kept (the event that holds it is bounded)
MAX_VALUE_CHARS = 2000  # a param or tag value longer than this is cut by the CLI and named in `truncated`

MlflowId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
Key = Annotated[str, Field(min_length=1, max_length=250)]
Value = Annotated[str, Field(max_length=MAX_VALUE_CHARS)]
Text = Annotated[str, Field(max_length=500)]
MlflowStatus = Literal["RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"]


class ImportedArtifact(Spec):
    """One file of a run's artifact listing: its path in the run's artifact root and size; its bytes stay there."""

    path: Annotated[str, Field(min_length=1, max_length=1000)]
    size_bytes: Annotated[int, Field(ge=0)] | None = None


class ImportedRun(Spec):
    """One MLflow run as its tracker holds it, with a part of its metric points (a long history comes in parts)."""

    source_run_id: MlflowId
    name: Text = ""
    status: MlflowStatus
    start_time_ms: Annotated[int, Field(ge=0)] | None = None
    end_time_ms: Annotated[int, Field(ge=0)] | None = None
    params: dict[Key, Value] = Field(default_factory=dict, max_length=1000)
    tags: dict[Key, Value] = Field(default_factory=dict, max_length=500)
    truncated: list[Key] = Field(default_factory=list, max_length=1500)  # params and tags cut at MAX_VALUE_CHARS
    metric_names: dict[Key, Key] = Field(default_factory=dict, max_length=1000)  # ledger name -> MLflow's own
    artifacts: list[ImportedArtifact] = Field(default_factory=list, max_length=MAX_ARTIFACT_LISTING)
    artifacts_complete: bool = True  # False: the listing stopped at MAX_ARTIFACT_LISTING
    points: list[MetricPoint] = Field(default_factory=list, max_length=MAX_METRIC_BATCH)


class MlflowImport(Spec):
    """A batch of one MLflow experiment's runs: at most MAX_IMPORT_RUNS, and MAX_METRIC_BATCH points in all."""

    tracking_uri: Annotated[str, Field(min_length=1, max_length=2000)]
    experiment_id: MlflowId
    experiment_name: Text
    runs: list[ImportedRun] = Field(min_length=1, max_length=MAX_IMPORT_RUNS)

    @model_validator(mode="after")
    def _bounded(self) -> MlflowImport:
        total = sum(len(run.points) for run in self.runs)
        if total > MAX_METRIC_BATCH:
            raise ValueError(f"the batch holds {total} metric points; send at most {MAX_METRIC_BATCH} per request")
        return self


def public_uri(uri: str) -> str:
    """A tracking URI as it may be stored and shown: no userinfo, query or fragment (where credentials ride)."""
    parts = urlsplit(uri)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
