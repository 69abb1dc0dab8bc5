"""Pydantic models for what enters and leaves the ledger."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from bashgym.client.validation import METRIC_NAME_MAX, METRIC_NAME_RE, Digest, Identifier, ModelSourceUri
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

RunStatus = Literal["queued", "preparing", "running", "paused", "unknown", "completed", "failed", "cancelled"]
ContextStatus = Literal["verified", "unassigned", "stale"]
CredentialKind = Literal["token", "discord", "system"]
Text = Annotated[str, Field(max_length=4000)]
Name = Annotated[str, Field(min_length=1, max_length=200)]

UNASSIGNED = "unassigned"


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Actor(Spec):
    """Who performs a mutation, with which credential and capability, under which correlation id."""

    actor_id: str
    credential_kind: CredentialKind = "token"
    capability: str = "ledger.write"
    correlation_id: str = ""


# What a project trains: `default` the policy methods and reward models, `embedding_retrieval` retrievers only.
ProjectProfile = Literal["default", "embedding_retrieval"]
# What a model version's files are (trainers/contracts/request.py's methods make each of them).
ModelKind = Literal["causal_lm", "reward_model", "embedding_retriever"]


class ProjectSpec(Spec):
    project_id: Identifier
    name: Name
    description: Text = ""
    profile: ProjectProfile = "default"


class ExperimentSpec(Spec):
    experiment_id: Identifier
    name: Name
    objective: Text = ""
    task_type: Annotated[str, Field(max_length=200)] = ""


class FileDigest(Spec):
    path: Annotated[str, Field(min_length=1, max_length=500)]
    sha256: Digest
    size_bytes: Annotated[int, Field(ge=0)]


class ModelVersionSpec(Spec):
    model_version_id: Identifier
    model_id: Identifier
    source_uri: ModelSourceUri
    source_revision: Annotated[str, Field(max_length=200)] = ""
    config_digest: Digest | None = None
    parent_version_id: Identifier | None = None
    files: list[FileDigest] = Field(default_factory=list, max_length=10_000)
    kind: ModelKind = "causal_lm"


class DatasetVersionSpec(Spec):
    dataset_version_id: Identifier
    dataset_id: Identifier
    source_uri: Annotated[str, Field(min_length=1, max_length=2000)]
    content_digest: Digest
    split_manifest: dict[str, Any] = Field(default_factory=dict)
    row_counts: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)


class EnvironmentSpec(Spec):
    environment_id: Identifier
    compute_target: Annotated[str, Field(min_length=1, max_length=200)]
    runtime_digest: Digest
    hardware: dict[str, Any] = Field(default_factory=dict)


class TrackingContext(Spec):
    """The complete identity of an official run (field names of the operator documents)."""

    workspace_id: Identifier
    project_id: Identifier
    project_display_name: Name
    experiment_id: Identifier
    experiment_name: Name
    objective: Text
    task_type: Annotated[str, Field(min_length=1, max_length=200)]
    model_id: Identifier
    model_version_id: Identifier
    model_source_uri: ModelSourceUri
    model_config_digest: Digest
    dataset_id: Identifier
    dataset_version_id: Identifier
    dataset_source_uri: Annotated[str, Field(min_length=1, max_length=2000)]
    dataset_content_digest: Digest
    environment_id: Identifier
    environment_runtime_digest: Digest
    project_description: Text = ""
    model_source_revision: Annotated[str, Field(max_length=200)] = ""
    dataset_split_manifest: dict[str, Any] = Field(default_factory=dict)
    dataset_row_counts: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    environment_hardware: dict[str, Any] = Field(default_factory=dict)
    campaign_id: Identifier | None = None
    tags: list[Annotated[str, Field(max_length=100)]] = Field(default_factory=list, max_length=50)
    metadata: dict[str, Any] = Field(default_factory=dict)


REQUIRED_CONTEXT_FIELDS = tuple(name for name, info in TrackingContext.model_fields.items() if info.is_required())


class RunRegistration(Spec):
    run_id: Identifier | None = None
    source_system: Identifier = "bashgym"
    source_run_id: Identifier | None = None
    method: Identifier
    tracking_context: dict[str, Any] | None = None
    recipe_digest: Digest | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    correlation_id: Annotated[str, Field(max_length=200)] = ""
    is_simulation: bool = False
    compute_target: Annotated[str, Field(max_length=200)] = "local"


class RunTransition(Spec):
    status: RunStatus
    attempt_id: Identifier | None = None
    reason: Annotated[str, Field(max_length=2000)] = ""
    error_summary: Annotated[str, Field(max_length=4000)] = ""


class MetricPoint(Spec):
    metric: Annotated[str, Field(min_length=1, max_length=METRIC_NAME_MAX, pattern=METRIC_NAME_RE.pattern)]
    step: Annotated[int, Field(ge=0)]
    # Checked in pydantic-core: a Python validator here costs ~4 us per point on 10,000-point batches.
    value: Annotated[float, Field(allow_inf_nan=False)]
    # When the trainer logged it, in Unix seconds; None where it was not measured (never made up).
    time: Annotated[float | None, Field(ge=0, allow_inf_nan=False)] = None


MAX_METRIC_BATCH = 10_000


class MetricBatch(Spec):
    run_id: Identifier
    attempt_id: Identifier
    points: list[MetricPoint] = Field(min_length=1, max_length=MAX_METRIC_BATCH)


class ArtifactSpec(Spec):
    artifact_id: Identifier | None = None
    run_id: Identifier | None = None
    attempt_id: Identifier | None = None
    kind: Identifier
    uri: Annotated[str, Field(min_length=1, max_length=2000)]
    sha256: Digest
    size_bytes: Annotated[int, Field(ge=0)]
    media_type: Annotated[str, Field(max_length=200)] = "application/octet-stream"


class MetricContract(Spec):
    direction: Literal["maximize", "minimize"]
    max_regression: Annotated[float, Field(ge=0)] | None = None


class ScoringContract(Spec):
    primary_metric: Annotated[str, Field(min_length=1, max_length=200)]
    metrics: dict[str, MetricContract] = Field(min_length=1)


class EvalSuiteSpec(Spec):
    suite_id: Identifier
    kind: Identifier
    dataset_version_id: Identifier | None = None
    scoring_contract: ScoringContract
    code_digest: Digest
    is_protected: bool = False


class EvalResultSpec(Spec):
    result_id: Identifier | None = None
    suite_id: Identifier
    run_id: Identifier | None = None
    attempt_id: Identifier | None = None
    model_version_id: Identifier | None = None
    status: Literal["completed", "failed"] = "completed"
    metrics: dict[str, float] = Field(default_factory=dict)
    sample_count: Annotated[int, Field(ge=0)] = 0
    is_simulation: bool = False
    # Per-task scores, breakdowns, the isolation obtained and the holdout gate; opened only with
    # eval.protected when the suite is protected.
    details: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metrics")
    @classmethod
    def _finite(cls, metrics: dict[str, float]) -> dict[str, float]:
        bad = [name for name, value in metrics.items() if not math.isfinite(value)]
        if bad:
            raise ValueError(f"metric values must be finite; {', '.join(bad)} is not")
        return metrics


class ComparisonSpec(Spec):
    comparison_id: Identifier | None = None
    baseline_result_id: Identifier
    candidate_result_id: Identifier
    primary_metric: Annotated[str, Field(min_length=1, max_length=200)]
    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class DecisionSpec(Spec):
    decision_id: Identifier | None = None
    decision_type: Identifier
    outcome: Identifier
    rationale: Annotated[str, Field(min_length=1, max_length=4000)]
    run_id: Identifier | None = None
    evidence_refs: list[Identifier] = Field(default_factory=list, max_length=200)


class AliasMove(Spec):
    alias: Identifier
    model_version_id: Identifier
    decision_id: Identifier | None = None


class BudgetEntrySpec(Spec):
    entry_id: Identifier
    scope: Identifier = "project"
    kind: Literal["limit", "reserve", "settle", "release", "amend"]
    gpu_hours: float = 0.0
    runs: int = 0
    reason: Annotated[str, Field(max_length=2000)] = ""
    run_id: Identifier | None = None


# What one budget entry may move at most: far beyond any real run, short of a number that hides a typo.
MAX_BUDGET_GPU_HOURS = 1_000_000.0
MAX_BUDGET_RUNS = 1_000_000


class BudgetBookkeeping(BudgetEntrySpec):
    """A reservation, settlement or release another system records (`POST .../budget-entries`): never negative and
    never past a bound, so no entry lifts a spent budget; limits and amendments have their own route."""

    kind: Literal["reserve", "settle", "release"]
    gpu_hours: Annotated[float, Field(ge=0, le=MAX_BUDGET_GPU_HOURS, allow_inf_nan=False)] = 0.0
    runs: Annotated[int, Field(ge=0, le=MAX_BUDGET_RUNS)] = 0


# The files a report's manifest may list, as the daemon serves them (GET .../reports/{report_id}/{name}).
REPORT_MEDIA_TYPES = {"md": "text/markdown", "json": "application/json", "png": "image/png"}
_EXTENSIONS = [f".{ext}" for ext in REPORT_MEDIA_TYPES]
REPORT_FILE_TYPES = f"{', '.join(_EXTENSIONS[:-1])} or {_EXTENSIONS[-1]}"  # .md, .json or .png
REPORT_FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


def report_file_problem(name: str) -> str | None:
    """Why the daemon cannot serve a report file of this name, or None."""
    if not REPORT_FILE_NAME_RE.match(name):
        return f"report file {name!r} is not a bare file name (letters, digits, '.', '_' and '-')"
    if "." not in name or name.rpartition(".")[2] not in REPORT_MEDIA_TYPES:
        return f"report file {name!r} is none of {REPORT_FILE_TYPES}, the files a report holds"
    return None


class ReportSpec(Spec):
    report_id: Identifier
    kind: Identifier
    title: Name
    manifest: dict[str, Any] = Field(default_factory=dict)

    @field_validator("manifest")
    @classmethod
    def _files_servable(cls, manifest: dict[str, Any]) -> dict[str, Any]:
        """A manifest's `files` are what the daemon serves and its notices link: each must be one it can."""
        files = manifest.get("files")
        if files is None:
            return manifest
        if not isinstance(files, list):
            raise ValueError('`files` is a list of objects, one per file, e.g. [{"name": "report.md"}]')
        for index, entry in enumerate(files):
            name = entry.get("name") if isinstance(entry, dict) else None
            if not isinstance(name, str):
                raise ValueError(f'files[{index}] has no `name`; each file is an object naming it: {{"name": "a.md"}}')
            problem = report_file_problem(name)
            if problem:
                raise ValueError(f"files[{index}]: {problem}")
        return manifest


class AnnotationSpec(Spec):
    text: Annotated[str, Field(min_length=1, max_length=4000)]
    experiment_id: Identifier | None = None
    run_id: Identifier | None = None


class Record(BaseModel):
    """A stored row as the API returns it."""

    model_config = ConfigDict(extra="allow")


class WriteResult(BaseModel):
    """What every ledger write answers: the record, whether it was a replay, and its event cursor."""

    record: dict[str, Any]
    replayed: bool
    cursor: int | None = None


class Event(BaseModel):
    cursor: int
    event_id: str
    event_type: str
    workspace_id: str
    project_id: str
    experiment_id: str | None
    run_id: str | None
    attempt_id: str | None
    actor: str
    credential_kind: str
    capability: str
    correlation_id: str
    payload: dict[str, Any]
    created_at: str
    prev_hash: str
    hash: str


class EventPage(BaseModel):
    after_cursor: int
    next_cursor: int
    has_more: bool
    events: list[Event]


# A host name or address as the shell and SSH take it: no spaces, quotes or shell metacharacters.
Host = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._:\-\[\]]+$")]


class DeviceSpec(Spec):
    """An SSH compute device. Keys are referenced by path only; a password is never stored."""

    device_id: Identifier
    host: Host
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._\-]+$")]
    key_path: Annotated[str, Field(min_length=1, max_length=1000)]
    work_dir: Annotated[str, Field(min_length=1, max_length=1000, pattern=r"^[^'\"`$\\\s;&|<>]+$")] = "bashgym-work"
    # Default: the venv `bashgym device bootstrap` creates in work_dir.
    python: Annotated[str, Field(min_length=1, max_length=1000, pattern=r"^[^'\"`$\\\s;&|<>]+$")]
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    slots: Annotated[int, Field(ge=1, le=64)] = 1
    host_key: Annotated[str, Field(max_length=4000)] = ""
    known_hosts: Annotated[str, Field(max_length=1000)] = ""

    @model_validator(mode="before")
    @classmethod
    def _defaults_and_no_passwords(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if {"password", "passphrase"} & set(data):
                raise ValueError("BashGym never stores passwords; authorise a key and register its path as key_path")
            if not data.get("python"):
                data = {**data, "python": f"{data.get('work_dir') or 'bashgym-work'}/venv/bin/python"}
        return data

    @field_validator("work_dir", "python")
    @classmethod
    def _no_parent_segments(cls, value: str) -> str:
        # `..` walks out of the directory the device's owner named; name the intended directory itself.
        if ".." in value.split("/"):
            raise ValueError(f"{value!r} climbs out with `..`; name the directory itself, e.g. /scratch/bashgym")
        return value

    @field_validator("host_key")
    @classmethod
    def _openssh_public_key(cls, value: str) -> str:
        parts = value.split()
        if value and (len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-"))):
            raise ValueError("host_key must be an OpenSSH public key line such as `ssh-ed25519 AAAA...`")
        return " ".join(parts[:2])


class DeviceGroupSpec(Spec):
    """Registered devices that train one run together. Member i is machine rank i; the first member's machine
    runs the main process, which the others reach at main_process_ip:main_process_port."""

    group_id: Identifier
    members: Annotated[list[Identifier], Field(min_length=2, max_length=64)]
    # Default: the first member's registered host, resolved when the group is registered.
    main_process_ip: Host | None = None
    main_process_port: Annotated[int, Field(ge=1024, le=65535)] = 29500

    @field_validator("members")
    @classmethod
    def _each_machine_once(cls, members: list[str]) -> list[str]:
        for member in members:
            if members.count(member) > 1:
                raise ValueError(f"device {member!r} is listed twice; each member is one machine rank")
        return members


# A Slurm partition, account, QoS or GRES type as sbatch takes it: letters, digits and _ . - only, so a value never
# carries an option, a space or a shell character to the command line (it travels as one argv entry anyway).
SlurmName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
# A shared directory: absolute, without `..`, quotes, whitespace or shell characters (it is written into a script).
SharedDir = Annotated[str, Field(min_length=2, max_length=1000, pattern=r"^/[^'\"`$\\\s;&|<>*?]*$")]


class ClusterSpec(Spec):
    """A Slurm cluster runs can be submitted to: on the daemon's host (`local`: the Slurm client commands there) or
    through a login node reached as a registered SSH device (`ssh`)."""

    cluster_id: Identifier
    kind: Literal["slurm"] = "slurm"
    access: Literal["local", "ssh"] = "local"
    login_device_id: Identifier | None = None
    partition: SlurmName
    account: SlurmName | None = None
    qos: SlurmName | None = None
    gpu_type: SlurmName | None = None
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = 0
    max_nodes: Annotated[int, Field(ge=1, le=64)] = 1
    time_limit_min: Annotated[int, Field(ge=1, le=60 * 24 * 30)]
    shared_dir: SharedDir
    # The Python with bashgym installed on the compute nodes (an environment the cluster's admin provides).
    python: Annotated[str, Field(min_length=1, max_length=1000, pattern=r"^[^'\"`$\\\s;&|<>]+$")] = "python3"

    @model_validator(mode="before")
    @classmethod
    def _access_from_login_device(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("login_device_id") and "access" not in data:
            data = {**data, "access": "ssh"}
        return data

    @model_validator(mode="after")
    def _login_device_with_ssh_only(self) -> ClusterSpec:
        if self.access == "ssh" and not self.login_device_id:
            raise ValueError("access `ssh` reaches the login node as a registered device: set login_device_id")
        if self.access == "local" and self.login_device_id:
            raise ValueError("login_device_id is set with access `local`; a login device means access `ssh`")
        if ".." in self.shared_dir.split("/"):
            raise ValueError(f"shared_dir {self.shared_dir!r} climbs out with `..`; name the directory itself")
        return self


class PreflightVerdict(Spec):
    """What a preflight found on a device, and whether it may take runs."""

    ready: bool
    reasons: list[Annotated[str, Field(max_length=2000)]] = Field(default_factory=list, max_length=50)
    facts: dict[str, Any] = Field(default_factory=dict)


# -- where a run belongs ------------------------------------------------------------------------


def parse_context(raw: dict[str, Any] | None) -> tuple[TrackingContext | None, list[str]]:
    """Return the context when complete and valid, else None and the missing or invalid fields."""
    if raw is None:
        return None, list(REQUIRED_CONTEXT_FIELDS)
    try:
        return TrackingContext.model_validate(raw), []
    except ValidationError as exc:
        return None, sorted({".".join(str(part) for part in err["loc"]) for err in exc.errors()})


def context_in_workspace(raw: dict[str, Any] | None, ws: str) -> tuple[TrackingContext | None, list[str]]:
    """The one rule for where a run belongs: its complete tracking context, if it names this workspace; else none
    (the run goes to `unassigned`), with the fields that were missing. A run's project is never guessed."""
    ctx, missing = parse_context(raw)
    if ctx is not None and ctx.workspace_id != ws:
        return None, ["workspace_id"]
    return ctx, missing


def run_project(raw: dict[str, Any] | None, ws: str) -> str:
    """The project a run with this tracking context is recorded under in workspace `ws`."""
    ctx, _ = context_in_workspace(raw, ws)
    return ctx.project_id if ctx is not None else UNASSIGNED
