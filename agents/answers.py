"""What the platform contract's four tools answer, as models: their JSON Schema is each tool's output schema, so an
agent knows the fields before it calls. The fields named are the ones an agent acts on; every other field of the
daemon's answer passes through as it is (`extra="allow"`), so nothing the daemon says is lost."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class ProjectRow(Answer):
    project_id: str
    name: str
    description: str = ""
    created_at: str | None = None


class Projects(Answer):
    projects: list[ProjectRow] = Field(description="the projects this token may read")


class Context(Answer):
    project: dict[str, Any] = Field(description="the project record")
    signals: dict[str, Any] = Field(description="health signals: run ids needing attention, by signal")
    inventory: dict[str, Any] = Field(description="counts of runs (by status), versions, evaluations, artifacts")
    lineage: dict[str, Any] = Field(description="model and dataset versions, environments, aliases")
    recent: dict[str, Any] = Field(description="latest runs (with their key metric), evaluations, decisions, events")


class Run(Answer):
    run_id: str
    project_id: str
    method: str
    status: str = Field(description="queued, preparing, running, paused, unknown, completed, failed or cancelled")
    context_status: str = Field(description="verified (an official run) or unassigned")
    model_version_id: str | None = None
    dataset_version_id: str | None = None
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    evaluations: list[dict[str, Any]] = Field(default_factory=list)
    artifacts: list[dict[str, Any]] = Field(default_factory=list, description="each with its sha256")
    metric_summary: dict[str, Any] = Field(default_factory=dict)


class Started(Answer):
    run_id: str
    project_id: str = Field(description="where the run is recorded; `unassigned` without a complete context")
    status: str
    lane: str
    context_status: str
    replayed: bool = Field(description="true when this idempotency key had already launched this run")
    note: str | None = Field(None, description="said when the run is not an official one")
    run: Run | None = Field(None, description="the run as it ended, with wait: true")
