"""Campaign validation (draft -> ready) and lifecycle actions on top of the ledger's state machine.

Validation checks what a campaign pins before anything runs, each finding with a code and the
next action: the suite, the starting model, every approved dataset version, the compute lane, the
base recipe, the budget, the deadline and the report schedule.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bashgym.client.errors import BashGymError, NotFound, RuleRejected
from bashgym.client.specs import Actor, BudgetEntrySpec
from bashgym.daemon.launch.authorise import check_publication, owner_lacks
from bashgym.daemon.launch.confine import Reach, check_model_source, confine_request
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.fields import request_from_recipe
from bashgym.trainers.contracts.request import TrainingRequest, parse_compute_target
from bashgym.trainers.environments.terminal_tasks import default_suite
from pydantic import ValidationError

# Placeholders for the fields each iteration fills in, so the base recipe validates on its own.
_FILLED_PER_ITERATION = {"base_model": "campaign-model", "dataset_path": "campaign-data.jsonl"}

ACTIONS = {
    "start": ("active", {"ready"}),
    "pause": ("paused", {"active"}),
    "resume": ("active", {"paused", "awaiting_authority"}),
    "cancel": ("cancelled", {"draft", "ready", "active", "paused", "awaiting_authority"}),
    "conclude": ("completed", {"active", "paused"}),
}


# The status_reason of a campaign waiting for a capability its owner lacks:
# "authority_required: <capability> for <iteration id>: ...". Resuming it lends that capability.
AUTHORITY_REQUIRED = "authority_required:"


def authority_reason(capability: str, iteration_id: str, owner: str) -> str:
    return f"{AUTHORITY_REQUIRED} {capability} for {iteration_id}: the campaign's owner {owner} lacks it"


def lent_capability(status_reason: str) -> tuple[str, str] | None:
    """The (capability, iteration id) a waiting campaign needs lent, from its status_reason; None otherwise."""
    if not status_reason.startswith(AUTHORITY_REQUIRED):
        return None
    words = status_reason.removeprefix(AUTHORITY_REQUIRED).split()
    if len(words) < 3 or words[1] != "for":
        return None
    return words[0], words[2].rstrip(":")


def finding(code: str, message: str, next_action: str) -> dict[str, str]:
    return {"code": code, "severity": "fail", "message": message, "next_action": next_action}


async def validate(
    ledger: Ledger,
    ws: str,
    project: str,
    spec: dict[str, Any],
    *,
    now: datetime,
    reach: Reach | None = None,
) -> list[dict[str, str]]:
    """Every reason the campaign cannot start yet; empty when it may. With what its requests may reach, also
    what no one could allow its launches (paths, Hub namespaces), checked again at each launch."""
    found: list[dict[str, str]] = []
    if reach is not None:
        found += await _launch_rights(spec, project, reach)
    suites = {s["suite_id"] for s in (await ledger.list_evaluations(ws, project))["suites"]}
    if spec["suite_id"] not in suites | {default_suite().suite_id}:
        found.append(
            finding(
                "suite_missing",
                f"Evaluation suite {spec['suite_id']!r} is not registered in {project}.",
                "Register it (POST /v1/projects/P/eval-suites) or pin bash-tasks-v1.",
            )
        )
    try:
        await ledger.get_model_version(ws, project, spec["starting_model_version_id"])
    except NotFound:
        found.append(
            finding(
                "model_missing",
                f"Starting model version {spec['starting_model_version_id']!r} is not in {project}.",
                "bashgym model register, then validate again.",
            )
        )
    for version in spec["dataset_version_ids"]:
        try:
            await ledger.get_dataset_version(ws, project, version)
        except NotFound:
            found.append(
                finding(
                    "dataset_missing", f"Dataset version {version!r} is not in {project}.", "bashgym dataset register"
                )
            )
    found += await _lane(ledger, ws, spec["compute_target"])
    found += _recipe(spec)
    found += _stage_budget(spec)
    budget = spec["budget"]
    if not budget["runs"] and not budget["gpu_hours"]:
        found.append(
            finding(
                "budget_missing",
                "The campaign has no budget: neither runs nor GPU-hours are limited.",
                "Set budget.runs and/or budget.gpu_hours in the spec.",
            )
        )
    for where, deadline in (("budget", budget.get("deadline")), ("stop_rules", spec["stop_rules"].get("deadline"))):
        if deadline and datetime.fromisoformat(deadline.replace("Z", "+00:00")) <= now:
            found.append(finding("deadline_past", f"{where}.deadline {deadline} has passed.", "Set a future deadline."))
    if spec.get("report_schedule"):
        found += _schedule(spec["report_schedule"])
    if spec.get("training_window"):
        try:
            in_training_window(spec["training_window"], now)
        except (KeyError, ValueError) as exc:
            found.append(finding("training_window_invalid", f"training_window: {exc}", "Use an IANA time zone."))
    return found


async def _lane(ledger: Ledger, ws: str, target: str) -> list[dict[str, str]]:
    try:
        lane, device = parse_compute_target(target)
    except ValueError as exc:
        return [finding("compute_target_invalid", str(exc), "Use local, ssh:<device_id> or cloud:nemo-customizer.")]
    if lane != "ssh":
        return []
    try:
        record = await ledger.get_device(ws, str(device))
    except NotFound:
        return [finding("lane_not_ready", f"Device {device!r} is not registered.", "bashgym device add")]
    if not record["ready"]:
        return [finding("lane_not_ready", f"Device {device} is not ready.", f"bashgym device preflight {device}")]
    return []


def launches(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Where each recipe the campaign launches from is written, and the recipe: a search campaign's base_recipe,
    or each stage of a cascade."""
    if spec.get("kind") == "cascade":
        return [(f"stage {stage['name']}", dict(stage["recipe"])) for stage in spec["stages"]]
    return [("base_recipe", dict(spec["base_recipe"]))]


def base_request(spec: dict[str, Any], recipe: dict[str, Any] | None = None) -> TrainingRequest:
    """A recipe (the base recipe unless given) as a launch would send it, with what each iteration fills in;
    raises when invalid."""
    chosen = spec["base_recipe"] if recipe is None else recipe
    return request_from_recipe({**chosen, **_FILLED_PER_ITERATION, "compute_target": spec["compute_target"]})


def _parsed(spec: dict[str, Any], recipe: dict[str, Any]) -> TrainingRequest | None:
    try:
        return base_request(spec, recipe)
    except (ValidationError, ValueError):
        return None  # _recipe reports it


async def _launch_rights(spec: dict[str, Any], project: str, reach: Reach) -> list[dict[str, str]]:
    """What no one could allow the campaign's launches: a path outside the roots (the starting model's source
    too), a Hub namespace the operator did not allow. (A capability its owner lacks is not a finding: that launch
    waits for a holder to lend it, see waits_for.)"""
    found = await _starting_model(spec, project, reach)
    for where, recipe in launches(spec):
        request = _parsed(spec, recipe)
        if request is None:
            continue
        try:
            await confine_request(reach, recipe, project, skip=tuple(_FILLED_PER_ITERATION))
            check_publication(reach.settings, request)
        except BashGymError as exc:
            found.append(finding("launch_refused", f"{where}: {exc.message}", exc.hint or f"Fix {where}."))
    return found


async def _starting_model(spec: dict[str, Any], project: str, reach: Reach) -> list[dict[str, str]]:
    """The starting model's source, confined as a launch confines it (a version registered before the rules too)."""
    starting = spec["starting_model_version_id"]
    try:
        model = await reach.ledger.get_model_version(reach.workspace, project, starting)
    except NotFound:
        return []  # model_missing says so
    try:
        await check_model_source(reach, project, model)
    except BashGymError as exc:
        where = f"starting model version {starting}"
        return [finding("launch_refused", f"{where}: {exc.message}", exc.hint or f"Register {where} again.")]
    return []


async def waits_for(ledger: Ledger, ws: str, project: str, spec: dict[str, Any], owner: str) -> list[str]:
    """The capabilities the campaign's launches imply that its owner lacks: each launch checks them again, and
    waits in awaiting_authority until a holder lends them."""
    lacking: list[str] = []
    for _, recipe in launches(spec):
        request = _parsed(spec, recipe)
        if request is not None:
            lacking += [c for c in await owner_lacks(ledger, owner, ws, project, request) if c not in lacking]
    return lacking


def _recipe(spec: dict[str, Any]) -> list[dict[str, str]]:
    found = []
    for where, recipe in launches(spec):
        try:
            base_request(spec, recipe)
        except (ValidationError, ValueError) as exc:
            message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            found.append(
                finding("recipe_invalid", f"{where}: {message}", f"Fix {where}; bashgym training plan checks one.")
            )
    return found


def _stage_budget(spec: dict[str, Any]) -> list[dict[str, str]]:
    """Each stage of a cascade is one run: a run budget smaller than the stages would stop it halfway."""
    stages, runs = len(spec.get("stages") or []), spec["budget"]["runs"]
    if spec.get("kind") != "cascade" or not runs or runs >= stages:
        return []
    return [
        finding(
            "budget_short",
            f"The cascade has {stages} stages, each one run, but budget.runs is {runs}.",
            f"Set budget.runs to at least {stages}.",
        )
    ]


def in_training_window(window: dict[str, Any] | None, now: datetime) -> bool:
    """Whether training may start now; a window may wrap past midnight (22:00 to 06:00)."""
    if not window:
        return True
    from zoneinfo import ZoneInfo

    local = now.astimezone(ZoneInfo(window["timezone"])).strftime("%H:%M")
    start, end = str(window["start"]), str(window["end"])
    return start <= local < end if start <= end else local >= start or local < end


def schedule_findings(schedule: dict[str, Any]) -> list[dict[str, str]]:
    return _schedule(schedule)


def _schedule(schedule: dict[str, Any]) -> list[dict[str, str]]:
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(schedule["cron"], timezone=schedule["timezone"])
    except Exception as exc:  # ValueError for the expression, ZoneInfoNotFoundError for the zone
        return [
            finding(
                "schedule_invalid",
                f"report_schedule {schedule['cron']!r} in {schedule['timezone']}: {exc}",
                "Use five cron fields and an IANA time zone, e.g. `0 9 * * 1` in Europe/Paris.",
            )
        ]
    return []


# What a candidate may not change: the campaign pins them, or each iteration fills them in.
PINNED_FIELDS = frozenset(
    {
        "method",
        "strategy",
        "base_model",
        "dataset_path",
        "compute_target",
        "tracking_context",
        "correlation_id",
        "device_id",
    }
)


def check_proposal(spec: dict[str, Any], proposal: dict[str, Any]) -> None:
    """One primary variable, a value that changes it, and a recipe that still validates."""
    if spec.get("kind") == "cascade":
        raise RuleRejected(
            f"Campaign {spec['campaign_id']} is a cascade: it runs its declared stages in order and takes no "
            "candidates.",
            hint="Create a search campaign (kind search, with a base_recipe) to try one change at a time.",
        )
    variable, value = proposal["primary_variable"], proposal["value"]
    if variable == "dataset_version_id":
        if value not in spec["dataset_version_ids"]:
            raise RuleRejected(
                f"Dataset version {value!r} is not approved for this campaign.",
                hint=f"Use one of {', '.join(spec['dataset_version_ids'])}.",
            )
        return
    if variable in PINNED_FIELDS or variable not in TrainingRequest.model_fields:
        raise RuleRejected(
            f"`{variable}` cannot be a candidate's primary variable.",
            hint="Change one method field (learning_rate, num_epochs, lora_rank, ...) or dataset_version_id.",
        )
    if spec["base_recipe"].get(variable) == value:
        raise RuleRejected(f"The base recipe already has {variable} = {value!r}; a candidate must change it.")
    recipe = {**spec["base_recipe"], variable: value, **_FILLED_PER_ITERATION, "compute_target": spec["compute_target"]}
    try:
        request_from_recipe(recipe)
    except (ValidationError, ValueError) as exc:
        message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise RuleRejected(f"With {variable} = {value!r} the recipe is invalid: {message}") from exc


async def open_budget(ledger: Ledger, actor: Actor, ws: str, project: str, campaign: dict[str, Any]) -> None:
    """At start: the campaign's own budget scope gets its limit (once, idempotently)."""
    budget = campaign["spec"]["budget"]
    spec = BudgetEntrySpec(
        entry_id=f"{campaign['campaign_id']}.limit",
        scope=f"campaign-{campaign['campaign_id']}"[:128],
        kind="limit",
        gpu_hours=budget["gpu_hours"],
        runs=budget["runs"],
        reason=f"limit of campaign {campaign['campaign_id']}",
    )
    await ledger.add_budget_entry(actor, ws, project, spec)


def utc_now() -> datetime:
    return datetime.now(UTC)
