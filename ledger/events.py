"""Event kinds: one payload model per kind, and the canonical form the hash chain covers."""

from __future__ import annotations

import json
from typing import Any

from bashgym.client.errors import InvalidInput
from bashgym.client.validation import sha256_text
from pydantic import BaseModel, ConfigDict, ValidationError

GENESIS_HASH = "0" * 64


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class EntityRegistered(_Payload):
    """A lineage or evidence row was created; `entity` names its table-level kind."""

    entity: str
    entity_id: str


class RunStatusChanged(_Payload):
    status: str
    previous_status: str | None = None
    reason: str = ""


class AttemptSuperseded(_Payload):
    """An `unknown` run's lost attempt closed as failed, so the run can go on as a new attempt."""

    attempt_id: str
    next_attempt_id: str
    reason: str


class MetricsIngested(_Payload):
    count: int
    inserted: int
    metrics: list[str]
    first_step: int
    last_step: int


class AliasMoved(_Payload):
    alias: str
    model_version_id: str
    previous_version_id: str | None = None


class RunCheckpoint(_Payload):
    step: int
    path: str


class RunTopology(_Payload):
    """A scaled-out run's shape: its world size, machines, strategy, and each machine (device and environment)."""

    launcher: str
    world_size: int
    num_machines: int
    processes_per_machine: int
    strategy: str
    mixed_precision: str
    device_group: str | None = None
    members: list[dict[str, Any]]


class RunAnomaly(_Payload):
    """NaN or infinite loss, a loss spike, collapsed reward variance, or no progress for too long."""

    kind: str
    detail: str
    step: int | None = None


class Annotation(_Payload):
    text: str


class GateFinding(_Payload):
    code: str
    message: str
    next_action: str


class GateEvaluated(_Payload):
    """The promotion gate's verdict on a run, as asked for by a person, a campaign or the demo."""

    ship: bool
    blockers: list[GateFinding]
    warnings: list[GateFinding]
    evidence_digest: str  # of what the gate read: a second evaluation of the same evidence records nothing
    asked_by: str  # "gate" (a look), "decide" (a promotion decision) or a campaign/demo name


class DevicePreflight(_Payload):
    device_id: str
    ready: bool
    reasons: list[str]


class DeviceGroupPreflight(_Payload):
    group_id: str
    ready: bool
    reasons: list[str]


class CampaignTransitioned(_Payload):
    campaign_id: str
    status: str
    previous_status: str
    reason: str = ""
    # A resume out of awaiting_authority by a holder of the capability the campaign's owner lacked.
    approved_capability: str | None = None
    approved_iteration_id: str | None = None


class CampaignStage(_Payload):
    campaign_id: str
    iteration_id: str
    stage: str
    decision: str = ""
    reason_code: str = ""


class RemoteLog(_Payload):
    """A status line a remote lane reported for a run (NeMo Customizer's status_logs)."""

    message: str
    reported_at: str = ""


class ConsumerCursorMoved(_Payload):
    """A durable consumer's cursor moved by a principal other than the consumer that owns it."""

    consumer: str
    cursor: int
    previous_cursor: int
    owner: str


class NoticeFailed(_Payload):
    """Discord refused a notice for good (a 4xx other than 429): recorded, and its consumer moved past it.

    `cursor` and `event_id` name the notice's event; status, code and message are Discord's answer."""

    consumer: str
    cursor: int
    event_id: str
    event_type: str
    channel_id: str
    status: int
    code: int = 0
    message: str = ""


class RunTracked(_Payload):
    """Params and tags a tracked run (bashgym.track) logged after it opened; later values of a name replace earlier."""

    params: dict[str, Any] = {}
    tags: dict[str, str] = {}


class RunEnvironmentMeasured(_Payload):
    """The environment a run's own process measured (its trainer, or the tracking client in the user's script), and
    the digest the daemon computed from it; `planned_digest` is the tracking context's, set before the run ran."""

    environment: dict[str, Any]
    digest: str
    measured_by: str
    planned_digest: str = ""


class RunImported(_Payload):
    """What another tracker (MLflow) holds of an imported run, recorded when the import first sees it and again
    whenever it changed there (docs/tracking.md, "Importing from MLflow"); its metric points are metric rows like
    any run's."""

    system: str
    source_run_id: str
    experiment_name: str = ""
    name: str = ""
    status: str
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    params: dict[str, str] = {}
    tags: dict[str, str] = {}
    truncated: list[str] = []
    withheld: list[str] = []
    metric_names: dict[str, str] = {}
    artifacts: list[dict[str, Any]] = []
    artifacts_complete: bool = True


class TagsSet(_Payload):
    """Tags set on a run, a model version or a campaign: the keys whose value changed, with their new values."""

    entity_kind: str
    entity_id: str
    tags: dict[str, str]


class TagsUnset(_Payload):
    entity_kind: str
    entity_id: str
    keys: list[str]


class NoteSet(_Payload):
    """The entity's note as it now reads (empty: removed); the earlier ones are the earlier events."""

    entity_kind: str
    entity_id: str
    text: str


class ExternalJobChanged(_Payload):
    """An external job was accepted, submitted, or moved to a state its upstream reported."""

    entity: str
    entity_id: str
    state: str
    upstream_job_id: str = ""
    upstream_state: str = ""
    reason: str = ""


# Every event type the ledger accepts, with the payload model it must validate against.
EVENT_TYPES: dict[str, type[_Payload]] = {
    "project.created": EntityRegistered,
    "experiment.created": EntityRegistered,
    "model_version.registered": EntityRegistered,
    "dataset_version.registered": EntityRegistered,
    "environment.registered": EntityRegistered,
    "run.registered": EntityRegistered,
    "attempt.created": EntityRegistered,
    "attempt.superseded": AttemptSuperseded,
    "artifact.registered": EntityRegistered,
    "eval_suite.registered": EntityRegistered,
    "eval_result.recorded": EntityRegistered,
    "comparison.recorded": EntityRegistered,
    "decision.recorded": EntityRegistered,
    "budget.entry": EntityRegistered,
    "report.recorded": EntityRegistered,
    "run.queued": RunStatusChanged,
    "run.preparing": RunStatusChanged,
    "run.started": RunStatusChanged,
    "run.paused": RunStatusChanged,
    "run.resumed": RunStatusChanged,
    "run.unknown": RunStatusChanged,
    "run.completed": RunStatusChanged,
    "run.failed": RunStatusChanged,
    "run.cancelled": RunStatusChanged,
    "run.checkpoint": RunCheckpoint,
    "run.anomaly": RunAnomaly,
    "run.topology": RunTopology,
    "metrics.ingested": MetricsIngested,
    "alias.moved": AliasMoved,
    "annotation.added": Annotation,
    "auth.token_issued": EntityRegistered,
    "auth.token_revoked": EntityRegistered,
    "auth.token_bound": EntityRegistered,
    "authority.granted": EntityRegistered,
    "authority.revoked": EntityRegistered,
    "device.registered": EntityRegistered,
    "device.removed": EntityRegistered,
    "device.preflight": DevicePreflight,
    "device_group.registered": EntityRegistered,
    "device_group.removed": EntityRegistered,
    "device_group.preflight": DeviceGroupPreflight,
    "cluster.registered": EntityRegistered,
    "cluster.removed": EntityRegistered,
    "runcard.created": EntityRegistered,
    "campaign.created": EntityRegistered,
    "campaign.iteration_added": EntityRegistered,
    "campaign.schedule_set": EntityRegistered,
    "campaign.transitioned": CampaignTransitioned,
    "campaign.stage": CampaignStage,
    "project.channel_set": EntityRegistered,
    "sink.added": EntityRegistered,
    "sink.removed": EntityRegistered,
    "promotion.gated": EntityRegistered,
    "gate.evaluated": GateEvaluated,
    "run.remote_log": RemoteLog,
    "run.tracked": RunTracked,
    "run.environment": RunEnvironmentMeasured,
    "run.imported": RunImported,
    "blob.held": EntityRegistered,
    "consumer.cursor_moved": ConsumerCursorMoved,
    "notice.failed": NoticeFailed,
    **{
        f"external_job.{state}": ExternalJobChanged
        for state in ("accepted", "submitted", "running", "completed", "failed", "cancelled", "unknown")
    },
    "compute_plan.recorded": EntityRegistered,
    "tags.set": TagsSet,
    "tags.unset": TagsUnset,
    "note.set": NoteSet,
}


def validate_payload(event_type: str, payload: dict[str, Any]) -> None:
    model = EVENT_TYPES.get(event_type)
    if model is None:
        raise InvalidInput(f"Unknown event type {event_type!r}.", hint=f"Known types: {', '.join(EVENT_TYPES)}.")
    try:
        model.model_validate(payload)
    except ValidationError as exc:
        raise InvalidInput(f"Payload of {event_type} is invalid: {exc.errors()[0]['msg']}.") from exc


HASHED_FIELDS = (
    "cursor",
    "event_id",
    "event_type",
    "workspace_id",
    "project_id",
    "experiment_id",
    "run_id",
    "attempt_id",
    "actor",
    "credential_kind",
    "capability",
    "correlation_id",
    "payload_json",
    "created_at",
    "prev_hash",
)


def event_hash(fields: dict[str, Any]) -> str:
    """sha256 over the canonical event, prev_hash included, so any edited row breaks the chain.

    The canonical form is the JSON array of HASHED_FIELDS' values in that fixed order.
    """
    values = [fields[name] for name in HASHED_FIELDS]
    return sha256_text(json.dumps(values, separators=(",", ":"), ensure_ascii=False, allow_nan=False))
