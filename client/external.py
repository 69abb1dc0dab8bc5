"""The wire contract of training that runs elsewhere: external jobs (Hugging Face Jobs, managed providers) and
compute plans (SkyPilot, dstack), as the API takes and answers them.

The rules every surface keeps (the operator contract): a BashGym id proves a request was accepted, an upstream id
proves a submission, only `running` with log or metric evidence proves compute started, and a plan is only a plan.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from bashgym.client.specs import Spec
from bashgym.client.validation import HUB_REPO_RE, Identifier
from pydantic import Field

Surface = Literal["hf-jobs", "managed", "skypilot", "dstack"]
# What the upstream says a job is, in our words; `submitting` is the intent written before the upstream is called.
ExternalState = Literal["submitting", "submitted", "running", "completed", "failed", "cancelled", "unknown"]
OPEN_STATES = frozenset({"submitting", "submitted", "running", "unknown"})
ENDED_STATES = frozenset({"completed", "failed", "cancelled"})
ObservationKind = Literal["state", "log", "metric", "event", "receipt", "result", "cancel"]
Engine = Literal["skypilot", "dstack"]

HubRepo = Annotated[str, Field(pattern=HUB_REPO_RE.pattern, max_length=200)]
HubFile = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,299}$", max_length=300)]
Revision = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", max_length=128)]


class HubDataset(Spec):
    """A dataset file on the Hub the job downloads: repo, file in it, revision (a branch or a commit)."""

    repo: HubRepo
    file: HubFile = "train.jsonl"
    revision: Revision = "main"
    eval_file: HubFile | None = None


class HfJobSubmission(Spec):
    """`POST /v1/jobs/hf`: a training request run as a Hugging Face Job.

    `request` is a training request without its data paths (the job downloads `dataset`); `output_repo` is the
    private Hub repo the job pushes its adapter, metrics and run evidence to before it exits, and must sit under
    the namespace the operator allows (setting `hf_namespaces`); `image` must be one the operator allows (setting
    `hf_job_images`; absent: its first)."""

    request: dict[str, Any]
    dataset: HubDataset
    output_repo: HubRepo
    flavor: Annotated[str, Field(min_length=1, max_length=64)] = "a10g-small"
    timeout_s: Annotated[int, Field(ge=60, le=7 * 24 * 3600)] = 2 * 3600
    # The most this job may cost in USD; absent: timeout times the flavor's price. Over it is refused at submission.
    cost_ceiling_usd: Annotated[float, Field(ge=0, le=1_000_000)] | None = None
    image: Annotated[str, Field(min_length=1, max_length=300)] | None = None


class ProviderJobSubmission(Spec):
    """`POST /v1/jobs/providers/{provider}`: a managed fine-tune on an OpenAI-compatible provider.

    `request` is a training request (sft or dpo) whose data the daemon uploads to the provider; `hyperparameters`
    are the provider's own (n_epochs, batch_size, learning_rate_multiplier), sent as given."""

    request: dict[str, Any]
    hyperparameters: dict[str, int | float | str] = Field(default_factory=dict)
    suffix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")] | None = None
    cost_ceiling_usd: Annotated[float, Field(gt=0, le=1_000_000)]


class PlanOptionsSpec(Spec):
    """What a SkyPilot or dstack plan asks of the engine besides the training request."""

    accelerators: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+(:[0-9]+)?$", max_length=64)] = "H100:1"
    cpus: Annotated[str, Field(max_length=16)] | None = None
    memory: Annotated[str, Field(max_length=16)] | None = None
    disk_size_gb: Annotated[int, Field(ge=10, le=100_000)] | None = None
    use_spot: bool = False
    cloud: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,32}$")] | None = None
    region: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$")] | None = None
    # A bucket URI (SkyPilot) or a dstack volume name.
    checkpoint_store: (
        Annotated[str, Field(pattern=r"^((s3|gs|r2|az|oci)://[A-Za-z0-9_./-]{1,500}|[a-z][a-z0-9-]{1,40})$")] | None
    ) = None
    max_price_per_hour: Annotated[float, Field(gt=0, le=10_000)] | None = None
    timeout_minutes: Annotated[int, Field(ge=1, le=7 * 24 * 60)] | None = None


class PlanSubmission(Spec):
    """`POST /v1/compute/plans`: render (and with `launch`, submit) a plan for a training request."""

    engine: Engine
    request: dict[str, Any]
    options: PlanOptionsSpec = Field(default_factory=PlanOptionsSpec)
    launch: bool = False


class ExternalJobSpec(Spec):
    """What the ledger records when a submission is accepted, before the upstream is called."""

    job_id: Identifier
    project_id: Identifier
    run_id: Identifier
    surface: Surface
    provider: Annotated[str, Field(max_length=200)] = ""
    flavor: Annotated[str, Field(min_length=1, max_length=64)]
    timeout_s: int | None = None
    cost_ceiling_usd: float | None = None
    ceiling_gpu_hours: float | None = None
    request: dict[str, Any]
    request_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    lineage: dict[str, Any]
    destination: Annotated[str, Field(min_length=1, max_length=500)]


class ExternalObservation(Spec):
    """One thing seen of an upstream job: its state, a batch of log lines, a metric, a provider event, the
    submission receipt, the imported result, or a cancellation asked for (with who asked, from the actor)."""

    kind: ObservationKind
    state: ExternalState | None = None
    upstream_state: Annotated[str, Field(max_length=64)] = ""
    message: Annotated[str, Field(max_length=4000)] = ""
    data: dict[str, Any] | None = None
    # Log or metric evidence that compute ran: only this turns `compute_started` on.
    shows_compute: bool = False
    reason: Annotated[str, Field(max_length=2000)] = ""


class PlanRecord(Spec):
    plan_id: Identifier
    project_id: Identifier
    engine: Engine
    request_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    plan_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    plan_text: Annotated[str, Field(max_length=200_000)]
    validation: dict[str, Any]
