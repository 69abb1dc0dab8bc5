"""Operator routes: the daemon's side of `bashgym doctor`, and any evidence row by kind and id (what the
curator renders receipts from)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from bashgym.client.errors import InvalidInput, NotFound
from bashgym.client.models import SinkSpec
from bashgym.client.redaction import redact_url, redact_url_text, url_credentials
from bashgym.client.render import sentences
from bashgym.daemon.api.evaluations import withhold_protected
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import AUTHENTICATED, Call, ReadCall, requires
from bashgym.daemon.lanes.slurm_doctor import check_registered
from bashgym.daemon.notices.sinks import SinkForwarder
from bashgym.daemon.services import Services
from bashgym.daemon.settings import child_environment
from bashgym.ledger.queries import ENTITY_KINDS
from fastapi import APIRouter
from starlette.responses import Response

BOT_SILENT_AFTER_S = 60.0  # the bot long-polls notices every ~10 s; a minute without a poll means it is gone
NOTICE_FAILURES_WINDOW = timedelta(hours=24)  # a refusal fixed a day ago no longer needs anyone's attention
NOTICE_FAILURES_SHOWN = 3
SURFACES_TIMEOUT_S = 10.0  # asking the Hub who the token is crosses the internet; doctor must still answer


def check(name: str, ready: bool, detail: str, *, required: bool = True, **facts: Any) -> dict[str, Any]:
    return {"check": name, "ready": ready, "required": required, "detail": detail, "facts": facts}


def _gpus(env: dict[str, str]) -> list[str]:
    if shutil.which("nvidia-smi", path=env.get("PATH")) is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            env=env,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


async def server_checks(services: Services, workspace: str | None) -> list[dict[str, Any]]:
    """The daemon's checks, with the lanes, sinks and notices of `workspace` (None: the caller may read none)."""
    settings = services.settings
    checks = []
    health = await services.ledger.health()
    checks.append(
        check(
            "ledger",
            health.get("status") == "ok",
            f"ledger {health.get('status')}",
            last_cursor=health.get("last_cursor"),
        )
    )
    gpus = await asyncio.to_thread(_gpus, child_environment(settings, services.environ))
    trainer_has_torch = settings.trainer_python == "" and importlib.util.find_spec("torch") is not None
    local_detail = f"{os.cpu_count()} CPUs, {len(gpus)} GPUs" + ("" if not gpus else f" ({'; '.join(gpus)})")
    if settings.trainer_python == "" and not trainer_has_torch:
        local_detail += "; torch is not installed for training (pip install 'bashgym[train]')"
    checks.append(
        check(
            "lane local",
            settings.trainer_python != "" or trainer_has_torch,
            local_detail,
            cpus=os.cpu_count(),
            gpus=gpus,
            slots=settings.local_slots,
        )
    )
    checks += await _device_checks(services, workspace) if workspace else []
    checks += await _cluster_checks(services, workspace) if workspace else []
    if settings.nemo_base_url:
        ready = services.nemo_key_set
        detail = "configured" if ready else f"{settings.nemo_api_key_env} is not set in the daemon's environment"
        checks.append(check("lane cloud:nemo-customizer", ready, detail, base_url=settings.nemo_base_url))
    else:
        checks.append(check("lane cloud:nemo-customizer", True, "not configured (optional)", required=False))
    checks += await _external_surface_checks(services)
    if services.discord_configured:
        polled = services.bot_polled_at
        connected = polled is not None and time.monotonic() - polled < BOT_SILENT_AFTER_S
        detail = "the bot is connected" if connected else "a bot token is set but no bot polls notices; run bashgym up"
        checks.append(check("discord", connected, detail, guilds=settings.discord_guild_ids))
    else:
        where = "and on the daemon's console" if settings.console_notices else "(--console-notices also prints them)"
        checks.append(check("discord", True, f"not configured (optional); notices in the API {where}", required=False))
    failures = await _notice_failures_check(services, workspace) if workspace else None
    if failures is not None:
        checks.append(failures)
    scheduler = services.scheduler
    running = scheduler is not None and scheduler.running
    jobs = len(scheduler.jobs()) if scheduler is not None and running else 0
    checks.append(check("scheduler", running, f"running, {jobs} report schedules" if running else "not running"))
    return checks + (await _sink_checks(services, workspace) if workspace else [])


async def _device_checks(services: Services, workspace: str) -> list[dict[str, Any]]:
    """The workspace's SSH devices and device groups, as their last preflight left them."""
    checks = []
    for device in await services.ledger.list_devices(workspace):
        verdict = device.get("preflight") or {}
        reasons = sentences(verdict.get("reasons", [])) if verdict else "never preflighted"
        checks.append(
            check(
                f"lane ssh:{device['device_id']}",
                bool(verdict.get("ready")),
                "ready at the last preflight" if verdict.get("ready") else reasons,
                required=False,
                preflight_at=device.get("preflight_at"),
            )
        )
    for group in await services.ledger.list_device_groups(workspace):
        verdict = group.get("preflight") or {}
        reasons = sentences(verdict.get("reasons", [])) if verdict else "never preflighted"
        members = ", ".join(group["members"])
        checks.append(
            check(
                f"lane ssh-group:{group['group_id']}",
                bool(verdict.get("ready")),
                f"{members}: ready at the last preflight" if verdict.get("ready") else f"{members}: {reasons}",
                required=False,
                preflight_at=group.get("preflight_at"),
            )
        )
    return checks


async def _cluster_checks(services: Services, workspace: str) -> list[dict[str, Any]]:
    """The workspace's Slurm clusters, asked now (together) where the lane would run their commands."""
    environment = child_environment(services.settings, services.environ)
    clusters = await services.ledger.list_clusters(workspace)
    logins = {
        c["cluster_id"]: await services.ledger.get_device(workspace, c["login_device_id"])
        for c in clusters
        if c["login_device_id"]
    }
    found = await asyncio.gather(
        *(check_registered(c, logins.get(c["cluster_id"]), environment, services.settings.slurm_conf) for c in clusters)
    )
    checks = []
    for cluster, findings in zip(clusters, found, strict=True):
        failed = [f for f in findings if not f["ok"]]
        detail = "; ".join(f["detail"] for f in (failed or findings))
        failures = [{"summary": f["detail"], "advice": f["advice"]} for f in failed]
        name = f"lane slurm:{cluster['cluster_id']}"
        checks.append(check(name, not failed, detail, required=False, checks=findings, failures=failures))
    return checks


async def _sink_checks(services: Services, workspace: str) -> list[dict[str, Any]]:
    """The workspace's event sinks: delivered, or the last error (URLs with their credentials redacted)."""
    checks = []
    forwarder = services.sinks
    for sink in await services.ledger.list_sinks(workspace):
        state = (forwarder.status.get((sink["workspace_id"], sink["name"])) if forwarder else None) or {}
        healthy = not state.get("last_error")
        detail = f"{state.get('delivered', 0)} events delivered" if healthy else str(state["last_error"])
        checks.append(check(f"sink {sink['name']}", healthy, detail, required=False, url=redact_url(sink["url"])))
    return checks


async def _external_surface_checks(services: Services) -> list[dict[str, Any]]:
    """Hugging Face Jobs and each configured provider: informational, since a surface nobody set up is no fault."""
    if services.external is None:
        return []
    try:
        async with asyncio.timeout(SURFACES_TIMEOUT_S):
            surfaces = await services.external.surfaces()
    except TimeoutError:
        detail = f"the Hub did not say who the token is within {SURFACES_TIMEOUT_S:.0f} s"
        return [check("surface hf-jobs", False, detail, required=False)]
    hub = surfaces["hf_jobs"]
    # Unset is "not configured", like the NeMo lane; a set token without an image or a fit job token submits nothing.
    is_usable = not hub["token_set"] or not (hub.get("problem") or hub.get("job_problems"))
    facts = {key: value for key, value in hub.items() if key != "problem"}
    checks = [check("surface hf-jobs", is_usable, _hub_detail(hub), required=False, **facts)]
    for name, provider in sorted(surfaces["providers"].items()):
        is_set = bool(provider["key_set"])
        detail = "key set" if is_set else f"${provider['api_key_env']} is not set in the daemon's environment"
        checks.append(check(f"surface managed:{name}", is_set, detail, required=False, **provider))
    return checks


def _hub_detail(hub: dict[str, Any]) -> str:
    if not hub.get("token_set"):
        return f"not configured (optional): ${hub['token_env']} is not set in the daemon's environment"
    if hub.get("problem"):
        return f"${hub['token_env']} is set, but {hub['problem']}"
    role = f", role {hub['role']}" if hub.get("role") else ""
    verified = f"${hub['token_env']} verified as {hub.get('verified_as')}{role}"
    if hub.get("job_problems"):
        return f"{verified}, but no job can be submitted: {'; '.join(hub['job_problems'])}"
    images = len(hub.get("job_images") or [])
    return (
        f"{verified}; jobs get ${hub['job_token_env']} (verified as {hub.get('job_verified_as')}, "
        f"role {hub.get('job_role')}), {images} allowed image{'s' if images != 1 else ''}"
    )


async def _notice_failures_check(services: Services, workspace: str) -> dict[str, Any] | None:
    """Notices Discord refused for good in the last day (`notice.failed`), the latest with what to do."""
    since = (datetime.now(UTC) - NOTICE_FAILURES_WINDOW).isoformat(timespec="microseconds").replace("+00:00", "Z")
    count, latest = await services.ledger.notice_failures(workspace, since=since, limit=NOTICE_FAILURES_SHOWN)
    if not count:
        if not services.discord_configured:
            return None
        return check("discord notices", True, "Discord took every notice of the last 24 h", required=False)
    shown = [{**f, "summary": notice_failure_summary(f), "advice": notice_failure_advice(f)} for f in latest]
    noun = "notice" if count == 1 else "notices"
    detail = f"{count} {noun} refused by Discord in the last 24 h; the latest: {shown[0]['advice']}"
    return check("discord notices", False, detail, required=False, count=count, failures=shown)


def notice_failure_summary(failure: dict[str, Any]) -> str:
    code = f" code {failure['code']}" if failure.get("code") else ""
    return (
        f"notice #{failure['cursor']} ({failure['event_type']}, project {failure['project_id'] or '-'}) in channel "
        f"{failure['channel_id']}: HTTP {failure['status']}{code} {failure.get('message') or ''}".rstrip()
    )


def notice_failure_advice(failure: dict[str, Any]) -> str:
    """What to do about a notice Discord refused, from its status and Discord's error code."""
    channel, project = failure["channel_id"], failure["project_id"] or "P"
    set_one = f"`bashgym project channel {project} --channel ID` (or /project channel-set in that channel)"
    match failure["status"], failure.get("code") or 0:
        case (_, 50008):
            return f"Channel {channel} is not a text channel (a category or forum?): set a text channel with {set_one}."
        case (403, _) | (_, 50001) | (_, 50013):
            return (
                f"The bot may not post in channel {channel}: give it View Channels, Send Messages, Embed Links and "
                f"Attach Files there, or set another with {set_one}."
            )
        case (404, _) | (_, 10003):
            return f"Channel {channel} does not exist or the bot is not in its server: set another with {set_one}."
        case (413, _) | (_, 40005):
            return "Its files were over the server's upload limit; the report itself stays in the ledger."
        case (_, 50035):
            return f"Discord refused its content: a BashGym bug; report it with event {failure['event_id']}."
    return f"Read Discord's message; if it is about the channel, set another with {set_one}."


def _sink_status(forwarder: SinkForwarder | None, ws: str, name: str) -> dict[str, Any]:
    state = dict((forwarder.status.get((ws, name)) if forwarder else None) or {})
    if state.get("last_error"):
        state["last_error"] = redact_url_text(str(state["last_error"]))
    return state


router = APIRouter(prefix="/v1", tags=["operator"])


@router.get("/doctor")
async def doctor(call: Annotated[Call, requires(AUTHENTICATED)]) -> Response:
    """The daemon's readiness, each check ready or not with a reason."""
    # Lanes, sinks and notices are a workspace's: shown to those who may read it, never another workspace's.
    readable = call.workspace if call.principal.holds_anywhere("ledger.read") else None
    checks = await server_checks(call.services, readable)
    ready = all(c["ready"] for c in checks if c["required"])
    return json_response({"version": call.services.version, "ready": ready, "checks": checks})


@router.get("/projects/{project}/entities/{kind}/{entity_id}")
async def entity(call: ReadCall, project: str, kind: str, entity_id: str) -> Response:
    if kind not in ENTITY_KINDS:
        raise InvalidInput(f"Unknown entity kind {kind!r}.", hint=f"Kinds: {', '.join(ENTITY_KINDS)}.")
    row = await call.services.ledger.entity(call.workspace, project, kind, entity_id)
    if row is None:
        raise NotFound(f"No {kind} {entity_id!r} in project {project!r}.")
    if kind == "eval_result":
        row = (await withhold_protected(call, project, [row]))[0]
    return json_response(row)


@router.post("/sinks", status_code=201)
async def sink_add(call: Annotated[Call, requires("authority.manage")], body: SinkSpec) -> Response:
    """Forward this workspace's events (or one project's, of some types) to an HTTP endpoint."""
    carried = url_credentials(body.url)
    if carried:
        raise InvalidInput(
            f"The sink URL carries {carried[0]}; the ledger never stores a secret, and every viewer sees sink URLs.",
            hint=f"Give the endpoint a URL without credentials: it authenticates the daemon by the signature "
            f"made with the secret in ${body.secret_env} (X-BashGym-Signature).",
        )
    result = await call.services.ledger.add_sink(
        call.actor,
        call.workspace,
        name=body.name,
        url=body.url,
        secret_env=body.secret_env,
        project_id=body.project_id,
        types=body.types,
    )
    present = bool(call.services.sinks and call.services.sinks.environ.get(body.secret_env))
    return json_response(
        {"record": result.record, "replayed": result.replayed, "secret_present": present},
        200 if result.replayed else 201,
    )


@router.get("/sinks")
async def sink_list(call: ReadCall) -> Response:
    forwarder = call.services.sinks
    rows = await call.services.ledger.list_sinks(call.workspace)
    return json_response(
        {
            "sinks": [
                {**s, "url": redact_url(s["url"]), "status": _sink_status(forwarder, s["workspace_id"], s["name"])}
                for s in rows
            ]
        }
    )


@router.delete("/sinks/{name}")
async def sink_remove(call: Annotated[Call, requires("authority.manage")], name: str) -> Response:
    return json_response(await call.services.ledger.remove_sink(call.actor, call.workspace, name))
