"""The one way a run is launched: `prepare` a request (resolve, confine, authorise), then `plan` it or `launch` it.

Plan and launch take the same `Prepared`, so they judge the same request in the same project with the same
rights; both walk check.LaunchChecks' one list (plan collecting every refusal, launch raising the first). The
training routes (and so the CLI, the MCP server, Discord and the demo, which call them) enter at `prepare`,
external jobs at `prepare_job`, a campaign's launches at `prepare_owned`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from bashgym.client.errors import InvalidInput
from bashgym.client.specs import UNASSIGNED, Actor, run_project
from bashgym.daemon.authority import Principal
from bashgym.daemon.lanes.admission import shaped_for_lane
from bashgym.daemon.launch.authorise import authorise_launch, check_request, owner_may_launch, recorded_project
from bashgym.daemon.launch.confine import DATA_FIELDS, MODEL_FIELDS, Reach, confine_request
from bashgym.daemon.launch.resolve import (
    Upstream,
    context_of,
    dataset_version_path,
    in_named_project,
    parse_training_request,
)
from bashgym.daemon.settings import Settings
from bashgym.daemon.training import TrainingService
from bashgym.trainers.contracts.fields import effective_config
from bashgym.trainers.contracts.request import TrainingRequest


@dataclass(frozen=True)
class Prepared:
    """A launch resolved, confined and authorised: what plan judges and launch starts."""

    workspace: str
    request: TrainingRequest
    project: str  # where the run is recorded: its context's project, or `unassigned`
    missing_context_fields: list[str]
    publication: str  # none, private or public
    may_exceed_budget: bool


async def prepare(principal: Principal, reach: Reach, payload: dict[str, Any], query: Mapping[str, str]) -> Prepared:
    """A training route's launch: the payload with every host path and blob it names confined to what the caller
    may reach, authorised for the caller in the project it would be recorded under.

    `?dataset_version=` trains on a registered dataset version's stored content; `?project=` with
    `model_version` and `dataset_version` (and optionally `experiment`) records the run under that project, its
    tracking context composed from the project's records."""
    if "hf_repo_owner" in payload:
        raise InvalidInput("`hf_repo_owner` is set by the daemon: the workspace and project the run is recorded under.")
    payload, stored = await _resolved(principal, reach, payload, query)
    request = parse_training_request(payload)  # a malformed request is said first, then what it may not reach
    project = run_project(context_of(payload), reach.workspace)
    fields = {field: getattr(request, field) for field in (*DATA_FIELDS, *MODEL_FIELDS)}
    confined = await confine_request(reach, fields, project, skip=stored)
    return _authorised(principal, reach, request.model_copy(update=confined))


async def prepare_job(
    principal: Principal,
    reach: Reach,
    payload: dict[str, Any],
    query: Mapping[str, str],
    *,
    upstream: Upstream,
    confined: tuple[str, ...],
    publishes: bool,
) -> Prepared:
    """An external job's launch: resolved as a training route's (`?project=` with its versions makes it official in
    that project, its model version a Hub repo the upstream downloads), authorised like any launch (and
    `artifact.publish_private` when the job pushes), then the `confined` data fields, which the daemon reads and
    uploads, confined like a launch's. A job whose upstream downloads its own data (`confined` empty) names a dataset
    version only for its context: the submission checks the data it downloads is that version's."""
    payload, stored = await _resolved(principal, reach, payload, query, upstream=upstream, reads=confined)
    prepared = _authorised(principal, reach, parse_training_request(payload))
    if publishes:
        principal.require("artifact.publish_private", workspace_id=reach.workspace, project_id=prepared.project)
    paths = {name: getattr(prepared.request, name) for name in confined if name not in stored}
    if not paths:
        return prepared
    request = prepared.request.model_copy(update=await confine_request(reach, paths, prepared.project))
    return replace(prepared, request=request)


async def prepare_owned(
    settings: Settings, workspace: str, request: TrainingRequest, *, may: Callable[[str], Awaitable[bool]]
) -> Prepared | None:
    """A campaign's launch of `request` (resolved and confined by the campaign runner), authorised for the
    campaign's owner: None when `may` made it wait for a holder of a capability the owner lacks."""
    if not await owner_may_launch(request, may):
        return None
    publication = check_request(settings, request)
    project, missing = recorded_project(request, workspace)
    return Prepared(workspace, request, project, missing, publication, may_exceed_budget=False)


async def plan(service: TrainingService, prepared: Prepared) -> dict[str, Any]:
    """What a launch of the prepared request would do, every refusal listed: a launch refuses exactly these."""
    request = await shaped_for_lane(service.ledger, prepared.workspace, prepared.request)
    return {
        "request": request.model_dump(mode="json"),
        "lane": request.lane,
        "device_id": request.ssh_device,
        "device_group": request.device_group,
        "context_status": "unassigned" if prepared.project == UNASSIGNED else "verified",
        "project_id": prepared.project,
        "missing_context_fields": prepared.missing_context_fields,
        "publication": prepared.publication,
        # lane_preflight and the checks a launch makes, every refusal listed: launch refuses exactly these.
        **await service.checks.verdict(prepared.workspace, request),
        "effective_config": effective_config(request),
    }


async def launch(service: TrainingService, actor: Actor, prepared: Prepared) -> dict[str, Any]:
    """Check, register and queue the prepared run (the first refusal raised); answer at once."""
    may_exceed = prepared.may_exceed_budget
    return await service.start(actor, prepared.workspace, prepared.request, may_exceed_budget=may_exceed)


async def _resolved(
    principal: Principal,
    reach: Reach,
    payload: dict[str, Any],
    query: Mapping[str, str],
    *,
    upstream: Upstream | None = None,
    reads: tuple[str, ...] = DATA_FIELDS,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The resolve stage every launch shares: the payload with the context of the project it names and the stored
    content of the dataset version it names (when the daemon reads the data: `reads`), and the fields that now hold
    the daemon's own records, whose paths are not the caller's to confine."""
    named = "project" in query
    if named:
        payload = await in_named_project(principal, reach, payload, query, upstream=upstream)
    version = query.get("dataset_version")
    if not version:
        return payload, ("base_model",) if named else ()
    if "dataset_path" not in reads:
        if not named:
            what = upstream.name if upstream else "the job"
            raise InvalidInput(
                f"dataset_version {version!r} names the data of an official run here: {what} downloads its own "
                "data, so name the project and model_version too, and the submission checks that data is that "
                "version's.",
                hint="Add ?project=P&model_version=MV (bashgym jobs hf submit --project P --model-version MV ...).",
            )
        return payload, ("base_model",)
    if payload.get("dataset_path"):
        raise InvalidInput("Give dataset_path or dataset_version, not both.")
    stored = await dataset_version_path(principal, reach, payload, query, version)
    # A registered version's content is the daemon's own: its stored path is not the caller's to confine.
    return {**payload, "dataset_path": stored}, ("dataset_path", *(("base_model",) if named else ()))


def _authorised(principal: Principal, reach: Reach, request: TrainingRequest) -> Prepared:
    """Refused when the caller may not launch `request` in the project it would be recorded under."""
    project, missing = recorded_project(request, reach.workspace)
    publication = authorise_launch(principal, reach.settings, reach.workspace, project, request)
    may_exceed = principal.holds("budget.amend", project)
    return Prepared(reach.workspace, request, project, missing, publication, may_exceed_budget=may_exceed)
