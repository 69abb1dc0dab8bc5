"""What a campaign pins: objective, metric, suite, model, data, lane, budget, stop rules and schedules."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from bashgym.client.specs import Name, Spec, Text
from bashgym.client.validation import Identifier, canonical_json
from pydantic import Field, field_validator, model_validator

Clock = Annotated[str, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]
CAMPAIGN_STATES = (
    "draft", "ready", "active", "paused", "awaiting_authority", "completed", "exhausted", "blocked", "failed",
    "cancelled",
)  # fmt: skip
CAMPAIGN_KINDS = ("search", "cascade")
# What a cascade stage's recipe may not name: the runner fills them in for each stage (the model the previous
# stage kept, the stage's approved dataset version, the campaign's lane and tracking context).
STAGE_FILLED_FIELDS = frozenset(
    {"base_model", "dataset_path", "compute_target", "tracking_context", "correlation_id", "device_id"}
)
MIN_STAGES, MAX_STAGES = 2, 8


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


class CascadeStage(Spec):
    """One declared step of a cascade: a direct-method recipe on one approved dataset version. It trains from the
    model the previous stage kept (the first stage from the campaign's starting model)."""

    name: Annotated[Identifier, Field(max_length=64)]
    # {"method": "sft" | "dpo" | "grpo" | ..., and any training-request field but the ones the runner fills in}
    recipe: dict[str, Any]
    dataset_version_id: Identifier
    # How this stage is evaluated on the pinned suite; the campaign's evaluation when left out.
    evaluation: CampaignEvaluation | None = None

    @field_validator("recipe")
    @classmethod
    def _names_a_method(cls, recipe: dict[str, Any]) -> dict[str, Any]:
        if not recipe.get("method") and not recipe.get("strategy"):
            raise ValueError('a stage recipe names its method, e.g. {"method": "sft", "max_steps": 200}')
        filled = sorted(STAGE_FILLED_FIELDS & set(recipe))
        if filled:
            raise ValueError(
                f"a stage recipe may not set {', '.join(filled)}: the runner fills them in (the previous stage's "
                "model, the stage's dataset_version_id, the campaign's compute_target); remove them"
            )
        return recipe


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
    # search: a baseline, then candidates each changing one field of base_recipe. cascade: a baseline, then the
    # declared stages in order (SFT -> DPO -> GRPO, say), each training from the model the previous one kept.
    kind: Literal["search", "cascade"] = "search"
    stages: list[CascadeStage] = Field(default_factory=list, max_length=MAX_STAGES)

    @model_validator(mode="after")
    def _kind_matches_stages(self) -> CampaignSpec:
        if self.kind == "search":
            if self.stages:
                raise ValueError(
                    'a search campaign takes no stages: send "kind": "cascade" to run the stages in order, or leave '
                    "stages out and put the recipe candidates start from in base_recipe"
                )
            return self
        if not MIN_STAGES <= len(self.stages) <= MAX_STAGES:
            raise ValueError(
                f"a cascade declares {MIN_STAGES} to {MAX_STAGES} stages in order; it has {len(self.stages)}: send "
                'stages: [{"name": "sft", "recipe": {"method": "sft", ...}, "dataset_version_id": "..."}, ...]'
            )
        _check_cascade(self)
        return self

    def stored_json(self) -> str:
        """The canonical JSON the ledger stores and compares on replay. A search campaign leaves out the cascade
        fields at their defaults, so a spec written before cascades existed keeps its stored identity."""
        body = self.model_dump(mode="json")
        if self.kind == "search":
            body.pop("kind")
            body.pop("stages")
        return canonical_json(body)


def _check_cascade(spec: CampaignSpec) -> None:
    """A cascade's stages carry their own recipes on approved data, each evaluated on the whole suite."""
    if spec.base_recipe:
        raise ValueError("a cascade takes its recipes from its stages: leave base_recipe out")
    names = [stage.name for stage in spec.stages]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"stage names are unique within a cascade; {', '.join(twice)} appears more than once")
    for stage in spec.stages:
        if stage.dataset_version_id not in spec.dataset_version_ids:
            raise ValueError(
                f"stage {stage.name} trains on {stage.dataset_version_id}, which is not among the campaign's "
                f"dataset_version_ids ({', '.join(spec.dataset_version_ids)}); add it there or pick one of them"
            )
    # A partial suite never ships (the gate's partial_suite_only), so a limited cascade could never pass a stage.
    limited = [
        where
        for where, evaluation in [("evaluation", spec.evaluation)]
        + [(f"stage {s.name}", s.evaluation) for s in spec.stages]
        if evaluation is not None and evaluation.limit_tasks is not None
    ]
    if limited:
        raise ValueError(
            f"a cascade evaluates every stage on the whole suite, since a partial suite never ships a stage; remove "
            f"limit_tasks from {', '.join(limited)}"
        )
