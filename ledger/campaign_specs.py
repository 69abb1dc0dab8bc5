"""What a campaign pins: objective, metric, suite, model, data, lane, budget, stop rules and schedules."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from bashgym.client.specs import Name, Spec, Text
from bashgym.client.validation import Identifier
from pydantic import Field, field_validator

Clock = Annotated[str, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]
CAMPAIGN_STATES = (
    "draft", "ready", "active", "paused", "awaiting_authority", "completed", "exhausted", "failed", "cancelled",
)  # fmt: skip


class CampaignBudget(Spec):
    gpu_hours: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    runs: Annotated[int, Field(ge=0)] = 0
    deadline: datetime | None = None


class StopRules(Spec):
    max_iterations: Annotated[int, Field(ge=1, le=1000)] = 10
    target_metric: float | None = None
    min_improvement: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    protected_metrics: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict
    )  # metric -> max regression
    max_consecutive_discards: Annotated[int, Field(ge=1)] | None = None
    deadline: datetime | None = None


class ReportSchedule(Spec):
    cron: Annotated[str, Field(min_length=9, max_length=200)]  # five fields: minute hour day month weekday
    timezone: Annotated[str, Field(max_length=64)] = "UTC"
    channel: Annotated[str, Field(max_length=200)] = ""

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if len(value.split()) != 5 or not re.fullmatch(r"[\d*/,\-A-Za-z ]+", value):
            raise ValueError("cron takes five fields: minute hour day-of-month month day-of-week, e.g. `0 9 * * 1`")
        return value


class TrainingWindow(Spec):
    """Training may start only between `start` and `end` (wrapping past midnight) in `timezone`."""

    start: Clock
    end: Clock
    timezone: Annotated[str, Field(max_length=64)] = "UTC"


class CampaignEvaluation(Spec):
    """How each iteration is evaluated on the pinned suite."""

    samples: Annotated[int, Field(ge=1, le=64)] = 1
    # At least two: a comparison's cluster bootstrap needs two task families, and a limited evaluation
    # takes its tasks one family at a time.
    limit_tasks: Annotated[int, Field(ge=2)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.7


class CampaignSpec(Spec):
    campaign_id: Identifier
    title: Name
    objective: Text
    primary_metric: Annotated[str, Field(min_length=1, max_length=200)] = "pass@1"
    direction: Literal["maximize", "minimize"] = "maximize"
    suite_id: Identifier
    starting_model_version_id: Identifier
    dataset_version_ids: list[Identifier] = Field(min_length=1, max_length=50)
    compute_target: Annotated[str, Field(min_length=1, max_length=200)] = "local"
    # Method fields the candidates start from (method, max_steps, learning_rate, ...); each candidate
    # changes exactly one of them (or the dataset version).
    base_recipe: dict[str, Any] = Field(default_factory=dict)
    budget: CampaignBudget = Field(default_factory=CampaignBudget)
    stop_rules: StopRules = Field(default_factory=StopRules)
    report_schedule: ReportSchedule | None = None
    training_window: TrainingWindow | None = None
    evaluation: CampaignEvaluation = Field(default_factory=CampaignEvaluation)
