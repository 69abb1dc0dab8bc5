"""Wire models of the daemon API; the client, the CLI and the bot import only these."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from bashgym.client.specs import (
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BudgetBookkeeping,
    BudgetEntrySpec,
    ComparisonSpec,
    DatasetVersionSpec,
    DecisionSpec,
    EnvironmentSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    Event,
    EventPage,
    ExperimentSpec,
    MetricBatch,
    MetricPoint,
    ModelVersionSpec,
    ProjectSpec,
    ReportSpec,
    RunRegistration,
    RunTransition,
    TrackingContext,
    WriteResult,
)
from bashgym.client.validation import Digest, Identifier
from pydantic import BaseModel, ConfigDict, Field, field_validator

# The training methods a launch takes (trainers/contracts/request.py's METHODS, which a test compares): the six
# policy methods and the reward-model and retriever workflows. The bot offers exactly these as choices.
TrainingMethod = Literal[
    "sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation", "reward_model", "embedding_retriever"
]  # fmt: skip

__all__ = [
    "AliasMove",
    "AnnotationSpec",
    "ArtifactSpec",
    "BlobStored",
    "BudgetBookkeeping",
    "BudgetEntrySpec",
    "ChannelSet",
    "ComparisonSpec",
    "ConsumerCursor",
    "CursorAck",
    "DatasetFromBlob",
    "DatasetVersionSpec",
    "DecisionSpec",
    "EnvironmentSpec",
    "ErrorBody",
    "ErrorResponse",
    "EvalResultSpec",
    "EvalSuiteSpec",
    "Event",
    "EventPage",
    "ExperimentSpec",
    "GrantSpec",
    "Health",
    "MetricBatch",
    "MetricPoint",
    "ModelVersionSpec",
    "Notice",
    "NoticeField",
    "NoticeFile",
    "NoticeOutcome",
    "NoticePage",
    "ProjectSpec",
    "ReportSpec",
    "RunRegistration",
    "RunTransition",
    "SinkSpec",
    "TrackingContext",
    "TrainingMethod",
    "WhoAmI",
    "WriteResult",
]


class ErrorBody(BaseModel):
    code: str
    message: str
    hint: str = ""
    reference: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorResponse(BaseModel):
    """Every error answer: {"error": {"code", "message", "hint"}}."""

    error: ErrorBody


class Health(BaseModel):
    status: str
    version: str
    uptime_s: float
    ledger: str
    pid: int


class WhoAmI(BaseModel):
    actor_id: str
    token_id: str
    credential_kind: str
    capabilities: list[str]
    workspace_id: str | None
    project_id: str | None


# How a request names an uploaded file (PUT /v1/blobs?project=P): the daemon reads it only for a project holding it.
BLOB_URI = "bashgym://artifacts/sha256/"


class BlobStored(BaseModel):
    """An uploaded file, now held by `project_id`: only that project's records may use it."""

    sha256: str
    size_bytes: int
    project_id: str = "unassigned"


class DatasetFromBlob(BaseModel):
    """Register a dataset version from a file already uploaded to the blob store."""

    model_config = ConfigDict(extra="forbid")
    dataset_id: Identifier
    dataset_version_id: Identifier
    sha256: Digest
    filename: str = Field(min_length=1, max_length=300)
    split_manifest: dict[str, Any] = Field(default_factory=dict)

    @field_validator("filename")
    @classmethod
    def _bare_name(cls, value: str) -> str:
        # The name is recorded in the split manifest; a path there would claim a place the file never was.
        if "/" in value or "\\" in value or value in {".", ".."} or not value.isprintable():
            raise ValueError(f"{value!r} is not a bare file name; send the name alone, e.g. train.jsonl")
        return value


class CursorAck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cursor: int = Field(ge=0)


class ConsumerCursor(BaseModel):
    name: str
    cursor: int
    updated_at: str | None
    owner: str = ""  # the principal whose consumer this is: the first to move it


class TokenIssue(BaseModel):
    """Ask for a new API token; the token itself is shown once, in the answer."""

    model_config = ConfigDict(extra="forbid")
    actor_id: Identifier
    profile: str = ""
    capabilities: list[str] = Field(default_factory=list, max_length=50)
    workspace_id: Identifier | None = None
    project_id: Identifier | None = None
    expires_in_s: int | None = Field(None, ge=60, le=10 * 365 * 86400)


class TokenIssued(BaseModel):
    """A new token. The secret is shown once: a replay of the same request answers without it (null) and says so."""

    token: str | None
    token_id: str
    actor_id: str
    profile: str
    capabilities: list[str]
    workspace_id: str | None
    project_id: str | None
    expires_at: str | None
    notice: str = ""


class GrantSpec(BaseModel):
    """Grant a Discord user or role a profile or capabilities, workspace-wide or in one project."""

    model_config = ConfigDict(extra="forbid")
    subject_kind: Literal["user", "role"]
    subject_id: str = Field(pattern=r"^[0-9]{1,25}$")
    profile: str = ""
    capabilities: list[str] = Field(default_factory=list, max_length=50)
    project_id: Identifier | None = None


class NoticeField(BaseModel):
    name: str
    value: str
    inline: bool = True


class NoticeFile(BaseModel):
    """A file that goes with a notice (a report's chart), fetched from the daemon by `path`."""

    name: str
    path: str


NoticeOutcome = Literal["success", "failure", "warning", "info", "neutral"]


class Notice(BaseModel):
    """One ledger event rendered for people: a Discord post, or a line block on the console channel."""

    cursor: int
    event_id: str
    event_type: str
    workspace_id: str
    project_id: str
    channel_id: str | None = Field(None, description="Discord channel it goes to; None when the project has none set.")
    nonce: str = Field(description="Derived from the event id: a resend after a crash is dropped by Discord.")
    outcome: NoticeOutcome
    title: str
    description: str = ""
    fields: list[NoticeField] = Field(default_factory=list)
    footer: str
    files: list[NoticeFile] = Field(default_factory=list)


class NoticePage(BaseModel):
    """Notices after a cursor; next_cursor also passes the events that render to nothing."""

    notices: list[Notice]
    next_cursor: int


class ChannelSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channel_id: Annotated[str, Field(pattern=r"^\d{1,25}$", description="A Discord channel snowflake.")]
    guild_id: Annotated[str, Field(pattern=r"^\d{0,25}$")] = ""


class SinkSpec(BaseModel):
    """An HTTP endpoint the daemon forwards ledger events to, signed with the secret a variable holds."""

    model_config = ConfigDict(extra="forbid")
    name: Identifier
    url: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2000)]
    secret_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=200)]
    project_id: Identifier | None = None
    types: list[Annotated[str, Field(max_length=100)]] = Field(default_factory=list, max_length=100)
