"""What each tool answers, as models the SDK checks each answer against. The fields named are the ones an agent
acts on; every other field of the daemon's answer passes through as it is (`extra="allow"`). The listing does not
publish these schemas (agents/server.py keeps tools/list small); a tool's answer is compact unless asked for in
detail (agents/compact.py), and names what it left out in `detail_omitted`."""

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
    attempts: list[dict[str, Any]] = Field(default_factory=list, description="the latest (detail: every one)")
    evaluations: list[dict[str, Any]] = Field(default_factory=list, description="results with their metrics")
    artifacts: list[dict[str, Any]] | None = Field(None, description="each with its sha256 (with detail: true)")
    metric_summary: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] | None = Field(
        None, description="what the run's own process measured: summary, the daemon's digest, measured_by"
    )


class Started(Answer):
    run_id: str
    project_id: str = Field(description="where the run is recorded; `unassigned` without a complete context")
    status: str
    lane: str
    context_status: str
    replayed: bool = Field(description="true when this idempotency key had already launched this run")
    note: str | None = Field(None, description="said when the run is not an official one")
    run: Run | None = Field(None, description="the run as it ended, with wait: true")


# -- the other tools: the fields an agent acts on first; the rest passes through --------------------------------


class Written(Answer):
    """A ledger write: the record, whether this exact write was already recorded, and its event cursor."""

    record: dict[str, Any]
    replayed: bool = False
    cursor: int | None = None


class Plan(Answer):
    ready: bool = Field(description="a launch would be accepted")
    reasons: list[Any] = Field(default_factory=list, description="why it would be refused")
    hints: list[Any] = Field(default_factory=list)
    lane: str | None = None
    project_id: str | None = Field(None, description="where the run would be recorded")
    context_status: str | None = None
    effective_config: dict[str, Any] | None = Field(
        None, description="what the trainer would run with (with detail: true)"
    )


class Runs(Answer):
    runs: list[dict[str, Any]] = Field(description="newest first: run_id, method, status, context_status, created_at")


class Log(Answer):
    run_id: str | None = None
    lines: list[str] = Field(default_factory=list, description="the last lines of training.log, redacted")


class RunControl(Answer):
    run_id: str | None = None
    status: str | None = Field(None, description="the run's status after the request")


class Trend(Answer):
    metric: str
    summary: dict[str, Any] = Field(default_factory=dict, description="count, first, latest, min, max, delta, slope")


class Events(Answer):
    events: list[dict[str, Any]]
    next_cursor: int = Field(description="ask again after this cursor for what follows")
    has_more: bool = False


class EvaluationResult(Answer):
    result_id: str
    suite_id: str
    status: str
    metrics: dict[str, Any] = Field(default_factory=dict, description="pass@1 and the suite's other metrics")
    sample_count: int = 0


class Evaluations(Answer):
    suites: list[dict[str, Any]] = Field(default_factory=list)
    results: list[dict[str, Any]] = Field(default_factory=list)
    comparisons: list[dict[str, Any]] = Field(default_factory=list)


class Comparison(Answer):
    comparison_id: str
    delta: float = Field(description="the candidate's pass@1 minus the baseline's, paired by task")
    ci_low: float
    ci_high: float
    details: dict[str, Any] = Field(default_factory=dict)


class RunCards(Answer):
    runcards: list[dict[str, Any]] = Field(description="newest first; each card is immutable")
    since: dict[str, Any] | None = Field(None, description="the last gate verdict, decisions and aliases since")


class Gate(Answer):
    ship: bool
    blockers: list[dict[str, Any]] = Field(default_factory=list, description="each with code, message, next_action")
    warnings: list[dict[str, Any]] = Field(default_factory=list)


class Promotion(Answer):
    gate: dict[str, Any]
    decision: dict[str, Any]
    alias: dict[str, Any] = Field(description="the alias as it now points")


class Campaigns(Answer):
    campaigns: list[dict[str, Any]]


class Campaign(Answer):
    campaign_id: str
    status: str
    version: int = Field(description="pass it as expected_version to guard a change")
    spec: dict[str, Any] = Field(default_factory=dict)
    iterations: list[dict[str, Any]] = Field(default_factory=list)


class Report(Answer):
    report_id: str
    files: list[dict[str, Any]] = Field(default_factory=list, description="read each as a resource")


class Wait(Answer):
    outcome: str = Field(description="terminal, action_required, changed or timeout")
    next_cursor: int


class Devices(Answer):
    devices: list[dict[str, Any]]
    clusters: list[dict[str, Any]] = Field(default_factory=list)


class Doctor(Answer):
    ready: bool
    checks: list[dict[str, Any]] = Field(default_factory=list)


class Principal(Answer):
    actor_id: str
    capabilities: list[str]


class Checks(Answer):
    checks: list[dict[str, Any]] = Field(description="each check with ok, detail and next_action")


class ResearchState(Answer):
    campaign_id: str
    phase: str = Field(
        description="where the campaign stands: draft, running, exhausted, blocked (a cascade stage's gate), ..."
    )
    next_action: dict[str, Any] = Field(default_factory=dict, description="what to do next, with its code")


class Budget(Answer):
    scope: str
    has_limit: bool
    remaining: dict[str, Any] | None = Field(None, description="runs and GPU-hours left; none without a limit")


class CampaignMove(Answer):
    """A guarded transition: the campaign record as it now is; a validation answers its findings instead."""

    record: dict[str, Any] | None = None
    replayed: bool | None = None
    ok: bool | None = Field(None, description="validate: the pins hold and the draft is ready")
    findings: list[dict[str, Any]] | None = None


class Preflight(Written):
    """The device's preflight verdict, recorded (record.verdict: ready, reasons, facts)."""
