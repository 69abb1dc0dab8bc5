"""Campaign routes: create, read, validate (draft -> ready) and the lifecycle actions, each checked against
the campaign's version so concurrent changes never overwrite each other."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from bashgym.client.errors import Conflict, Forbidden, InvalidInput
from bashgym.daemon.api.long_polls import recheck_of
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import Call, ReadCall, requires, written
from bashgym.daemon.api.tags import TagQuery, tag_query
from bashgym.daemon.campaigns import research
from bashgym.daemon.campaigns.lifecycle import (
    ACTIONS,
    check_proposal,
    lent_capability,
    open_budget,
    schedule_findings,
    utc_now,
    validate,
    waits_for,
)
from bashgym.daemon.campaigns.reports import campaign_report, report_file
from bashgym.ledger.campaign_specs import CampaignSpec
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

CreateCall = Annotated[Call, requires("campaign.create")]
ControlCall = Annotated[Call, requires("campaign.control")]
ConcludeCall = Annotated[Call, requires("campaign.conclude")]


class Proposal(BaseModel):
    """One candidate: exactly one primary variable changed from the base recipe, and why."""

    model_config = ConfigDict(extra="forbid")
    primary_variable: Annotated[str, Field(min_length=1, max_length=100)]
    value: Any
    rationale: Annotated[str, Field(min_length=1, max_length=2000)]


class Hypotheses(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hypotheses: list[Proposal] = Field(min_length=1, max_length=100)


ReportFormat = Literal["md", "json", "png"]


class ReportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    formats: list[ReportFormat] = Field(default_factory=lambda: list(get_args(ReportFormat)), min_length=1)


class ScheduleBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cron: Annotated[str, Field(min_length=9, max_length=200)]
    timezone: Annotated[str, Field(max_length=64)] = "UTC"
    channel: Annotated[str, Field(max_length=200)] = ""


class VersionedAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected_version: int = Field(ge=1)
    reason: Annotated[str, Field(max_length=2000)] = ""


async def _findings(call: Call, project: str, campaign: dict[str, Any]) -> list[dict[str, str]]:
    """Why the campaign cannot start yet, its launches judged for its owner (campaigns.validate)."""
    return await validate(
        call.services.ledger,
        call.workspace,
        project,
        campaign["spec"],
        now=utc_now(),
        reach=call.reach,
    )


router = APIRouter(prefix="/v1", tags=["campaigns"])


@router.post("/projects/{project}/campaigns", status_code=201)
async def campaign_create(call: CreateCall, project: str, body: CampaignSpec) -> Response:
    return written(await call.services.ledger.create_campaign(call.actor, call.workspace, project, body))


@router.get("/projects/{project}/campaigns")
async def campaign_list(call: ReadCall, project: str, tag: TagQuery = None) -> Response:
    found = await call.services.ledger.list_campaigns(call.workspace, project, tags=tag_query(tag))
    return json_response({"campaigns": found})


@router.get("/projects/{project}/campaigns/{campaign_id}")
async def campaign_show(call: ReadCall, project: str, campaign_id: str) -> Response:
    ledger = call.services.ledger
    campaign = await ledger.get_campaign(call.workspace, project, campaign_id)
    return json_response({**campaign, **await ledger.labels_of(call.workspace, project, "campaign", campaign_id)})


@router.post("/projects/{project}/campaigns/{campaign_id}/validate")
async def campaign_validate(call: ControlCall, project: str, campaign_id: str, body: VersionedAction) -> Response:
    ledger = call.services.ledger
    campaign = await ledger.get_campaign(call.workspace, project, campaign_id)
    findings = await _findings(call, project, campaign)
    if not findings and campaign["status"] == "draft":
        campaign = (
            await ledger.transition_campaign(
                call.actor,
                call.workspace,
                project,
                campaign_id,
                "ready",
                expected_version=body.expected_version,
                reason="validation passed",
            )
        ).record
    lacking = await waits_for(ledger, call.workspace, project, campaign["spec"], campaign["created_by"])
    return json_response({"campaign": campaign, "ok": not findings, "findings": findings, "waits_for": lacking})


async def act(call: Call, project: str, campaign_id: str, action: str, body: VersionedAction) -> Response:
    ledger = call.services.ledger
    campaign = await ledger.get_campaign(call.workspace, project, campaign_id)
    target, sources = ACTIONS[action]
    if action == "resume" and campaign["status"] == "awaiting_authority":
        target = campaign["resume_status"] or "active"
    if campaign["status"] not in sources:
        raise Conflict(
            f"Campaign {campaign_id} is {campaign['status']}; {action} applies to {', '.join(sorted(sources))}.",
            hint="bashgym campaign show tells its state; validate a draft before starting it.",
        )
    if action == "start":
        await open_budget(ledger, call.actor, call.workspace, project, campaign)
    lent = lent_capability(campaign["status_reason"]) if action == "resume" else None
    if lent is not None:
        # Resuming lends the campaign a capability its owner lacks, so it takes a holder of it.
        capability, iteration = lent
        if not call.principal.holds(capability, project):
            raise Forbidden(
                f"Campaign {campaign_id} waits for {capability} (for {iteration}), which its owner lacks; "
                f"{call.principal.actor_id} lacks it too.",
                hint=f"Ask a principal holding {capability} in project {project!r} to resume it.",
                details={"capability": capability, "scope": f"project {project!r}"},
            )
    result = await ledger.transition_campaign(
        call.actor,
        call.workspace,
        project,
        campaign_id,
        target,
        expected_version=body.expected_version,
        reason=body.reason
        or (f"{lent[0]} lent by {call.principal.actor_id}" if lent else f"{action} by {call.principal.actor_id}"),
        approval=lent,
    )
    return written(result)


async def add(call: Call, project: str, campaign_id: str, proposals: list[Proposal]) -> Response:
    ledger = call.services.ledger
    campaign = await ledger.get_campaign(call.workspace, project, campaign_id)
    for proposal in proposals:
        check_proposal(campaign["spec"], proposal.model_dump())
    added = await ledger.add_iterations(
        call.actor, call.workspace, project, campaign_id, [p.model_dump() for p in proposals]
    )
    return written(added)


@router.post("/projects/{project}/campaigns/{campaign_id}/propose", status_code=201)
async def campaign_propose(call: ControlCall, project: str, campaign_id: str, body: Proposal) -> Response:
    return await add(call, project, campaign_id, [body])


@router.post("/projects/{project}/campaigns/{campaign_id}/queue", status_code=201)
async def campaign_queue(call: ControlCall, project: str, campaign_id: str, body: Hypotheses) -> Response:
    return await add(call, project, campaign_id, body.hypotheses)


@router.get("/projects/{project}/campaigns/{campaign_id}/iterations")
async def campaign_iterations(call: ReadCall, project: str, campaign_id: str) -> Response:
    await call.services.ledger.get_campaign(call.workspace, project, campaign_id)
    iterations = await call.services.ledger.list_iterations(call.workspace, project, campaign_id)
    return json_response({"campaign_id": campaign_id, "iterations": iterations})


@router.get("/projects/{project}/campaigns/{campaign_id}/state")
async def research_state(call: ReadCall, project: str, campaign_id: str) -> Response:
    return json_response(await research.state(call.services.ledger, call.workspace, project, campaign_id))


@router.get("/projects/{project}/campaigns/{campaign_id}/wait")
async def research_wait(
    call: ReadCall,
    request: Request,
    project: str,
    campaign_id: str,
    after_cursor: int = 0,
    timeout: float = 30.0,  # noqa: ASYNC109
) -> Response:
    """Long-poll; `timeout` is the caller's wait budget, passed on to research.wait."""
    if not 0 <= timeout <= 600:
        raise InvalidInput(f"timeout is {timeout}; it must be between 0 and 600 seconds.")
    ledger = call.services.ledger
    await ledger.get_campaign(call.workspace, project, campaign_id)
    with call.services.waits.hold(call.principal.actor_id):
        answer = await research.wait(
            ledger,
            call.workspace,
            project,
            campaign_id,
            after_cursor=after_cursor,
            timeout_s=timeout,
            recheck=recheck_of(request, call),
        )
    return json_response(answer)


@router.get("/projects/{project}/campaigns/{campaign_id}/doctor")
async def campaign_doctor(call: ReadCall, project: str, campaign_id: str) -> Response:
    ledger, principal = call.services.ledger, call.principal
    campaign = await ledger.get_campaign(call.workspace, project, campaign_id)
    checks = [
        {"check": f["code"], "ok": False, "detail": f["message"], "next_action": f["next_action"]}
        for f in await _findings(call, project, campaign)
    ]
    if not checks:
        checks.append(
            {"check": "pins", "ok": True, "detail": "model, data, suite, lane, recipe, budget", "next_action": ""}
        )
    for capability in ("campaign.control", "campaign.conclude", "budget.amend"):
        held = principal.holds(capability, project)
        checks.append(
            {
                "check": f"authority:{capability}",
                "ok": held,
                "detail": f"{principal.actor_id} {'holds' if held else 'lacks'} {capability}",
                "next_action": "" if held else "Ask a holder of authority.manage for it.",
            }
        )
    scheduler = call.services.scheduler
    running = scheduler is not None and scheduler.running
    checks.append(
        {
            "check": "scheduler",
            "ok": running,
            "detail": "running" if running else "not running in this daemon",
            "next_action": "" if running else "Restart the daemon (bashgym daemon).",
        }
    )
    budget = await ledger.budget_summary(call.workspace, project, f"campaign-{campaign_id}"[:128])
    spent = budget.get("has_limit") and budget["limit"]["runs"] and budget["remaining"]["runs"] < 1
    checks.append(
        {
            "check": "budget_remaining",
            "ok": not spent,
            "detail": f"remaining {budget.get('remaining')}" if budget.get("has_limit") else "opens at start",
            # How many more runs, and why, are the amender's to say: the rest is filled in.
            "next_action": f"bashgym budget amend --project {project} --campaign {campaign_id} --runs N --reason REASON"
            if spent
            else "",
        }
    )
    waiting = campaign["status"] == "awaiting_authority"
    checks.append(
        {
            "check": "state",
            "ok": not waiting and campaign["status"] not in {"failed", "blocked"},
            "detail": f"{campaign['status']}: {campaign['status_reason']}".rstrip(": "),
            "next_action": f"Satisfy the reason, then bashgym campaign resume {campaign_id} --project {project}"
            if waiting
            else f"Address the blocked stage's blockers (bashgym campaign show {campaign_id} --project {project}), "
            "then create a new cascade."
            if campaign["status"] == "blocked"
            else "",
        }
    )
    return json_response({"campaign_id": campaign_id, "ok": all(c["ok"] for c in checks), "checks": checks})


@router.post("/projects/{project}/campaigns/{campaign_id}/schedule", status_code=201)
async def schedule_set(call: ControlCall, project: str, campaign_id: str, body: ScheduleBody) -> Response:
    problems = schedule_findings(body.model_dump())
    if problems:
        raise InvalidInput(problems[0]["message"], hint=problems[0]["next_action"])
    written_schedule = await call.services.ledger.set_schedule(
        call.actor,
        call.workspace,
        project,
        campaign_id,
        cron=body.cron,
        timezone=body.timezone,
        channel=body.channel,
    )
    if call.services.scheduler is not None:
        await call.services.scheduler.sync()
    return written(written_schedule)


@router.get("/projects/{project}/campaigns/{campaign_id}/schedule")
async def schedule_show(call: ReadCall, project: str, campaign_id: str) -> Response:
    await call.services.ledger.get_campaign(call.workspace, project, campaign_id)
    rows = [
        s
        for s in await call.services.ledger.list_schedules()
        if (s["workspace_id"], s["project_id"], s["campaign_id"]) == (call.workspace, project, campaign_id)
    ]
    jobs = {j["id"]: j["next_run_time"] for j in call.services.scheduler.jobs()} if call.services.scheduler else {}
    for row in rows:
        upcoming = jobs.get(row["schedule_id"])
        row["next_fire_time"] = upcoming.isoformat() if upcoming else None
    return json_response({"campaign_id": campaign_id, "schedules": rows})


@router.post("/projects/{project}/campaigns/{campaign_id}/reports", status_code=201)
async def campaign_report_create(call: ControlCall, project: str, campaign_id: str, body: ReportRequest) -> Response:
    reports_dir = call.services.settings.home / "reports"
    manifest = await campaign_report(
        call.services.ledger,
        reports_dir,
        call.actor,
        call.workspace,
        project,
        campaign_id,
        formats=set(body.formats),
    )
    return json_response(manifest, 201)


@router.get("/projects/{project}/reports/{report_id}/{name}")
async def report_file_read(call: ReadCall, project: str, report_id: str, name: str) -> Response:
    reports_dir = call.services.settings.home / "reports"
    data, media_type = await report_file(call.services.ledger, reports_dir, call.workspace, project, report_id, name)
    return Response(content=data, media_type=media_type)


@router.post("/projects/{project}/campaigns/{campaign_id}/conclude")
async def campaign_conclude(call: ConcludeCall, project: str, campaign_id: str, body: VersionedAction) -> Response:
    return await act(call, project, campaign_id, "conclude", body)


# After the fixed routes: a path parameter here would otherwise catch /validate and /conclude.
@router.post("/projects/{project}/campaigns/{campaign_id}/{action}")
async def campaign_control(
    call: ControlCall,
    project: str,
    campaign_id: str,
    action: Literal["start", "pause", "resume", "cancel"],
    body: VersionedAction,
) -> Response:
    return await act(call, project, campaign_id, action, body)
