"""The web view's routes under /ui, and the API route that makes a sign-in link (`POST /v1/ui/links`).

A page is served to a session (sessions.py) whose identity resolves, on each request, through the same authority as
the API: the page shows only what that principal may read (ledger.read in the page's project), in the workspace the
link was made for. What a page cannot show says so in a page, never in a stack trace or another record's data.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any

from bashgym.client.errors import BashGymError, Forbidden, InvalidInput, NotFound, RateLimited, Unauthenticated
from bashgym.client.validation import check_identifier, check_metric_name
from bashgym.daemon.api.responses import json_response
from bashgym.daemon.api.routing import AUTHENTICATED, Call, requires
from bashgym.daemon.artifacts import download_response, open_artifact, open_attempts
from bashgym.daemon.authority import Principal
from bashgym.daemon.authority.principals import act_in_workspace, resolve_token_id
from bashgym.daemon.campaigns.reports import report_file
from bashgym.daemon.services import Services
from bashgym.daemon.ui import evaluation, pages
from bashgym.daemon.ui.html import message_page
from bashgym.daemon.ui.runs_table import MAX_COMPARED, QUERY_KEYS
from bashgym.daemon.ui.sessions import (
    COOKIE,
    NEXT_COOKIE,
    SESSION_TTL_S,
    end_session,
    open_session,
    same_site_page,
    session_identity,
)
from bashgym.ledger.store import Ledger, Recheck
from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

router = APIRouter(tags=["web view"])
STATIC = {
    "ui.css": "text/css",
    "ui.js": "text/javascript",
    "uplot-1.6.32.min.js": "text/javascript",
    "uplot-1.6.32.min.css": "text/css",
    "LICENSE.uplot": "text/plain",
    "favicon.svg": "image/svg+xml",
}
# The pages load only their own scripts and styles, and may not be framed.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
LIVE_FOR_S = 600.0  # a live page's stream ends after this; the browser reconnects by itself
KEEP_ALIVE_S = 15.0  # a quiet stream sends a comment this often, so proxies keep it open


# Any valid token, for itself: the link signs in as the caller, with no more than the caller's own reads.
SignInCall = Annotated[Call, requires(AUTHENTICATED, statement="any valid token, for itself alone")]
# Its own sessions; anyone's in the workspace with authority.manage there (another's is "not found" otherwise).
SessionCall = Annotated[
    Call, requires(AUTHENTICATED, statement="any valid token, its own sessions; authority.manage, the workspace's")
]


@dataclass(frozen=True)
class Viewer:
    services: Services
    principal: Principal
    workspace: str

    def may_read(self, project: str) -> bool:
        return self.principal.holds("ledger.read", project) and (
            not self.principal.workspace_id or self.principal.workspace_id == self.workspace
        )

    def require(self, project: str) -> str:
        check_identifier(project, field="project")
        self.principal.require("ledger.read", workspace_id=self.workspace, project_id=project)
        return project


@router.post("/v1/ui/links", status_code=201)
async def ui_link(call: SignInCall, request: Request) -> Response:
    """A one-time sign-in link to the web view for whoever asks (its code is good once, for two minutes)."""
    # The headers as the principal was resolved from them (a header sent twice counts once, the first time).
    code, ttl = call.services.sign_ins.issue_code(request.headers, call.workspace, call.principal)
    base = (call.services.settings.public_url or str(request.base_url)).rstrip("/")
    return json_response({"url": f"{base}/ui/signin?code={code}", "expires_in_s": ttl}, 201)


@router.get("/v1/ui/sessions")
async def ui_sessions(call: SessionCall, every: bool = False) -> Response:
    """The caller's own web view sessions (live and ended); `every=true`: the workspace's, for authority.manage."""
    if every:
        call.principal.require("authority.manage", workspace_id=call.workspace)
    actor = None if every else call.principal.actor_id
    listed = await call.services.ledger.list_ui_sessions(call.workspace, actor)
    return json_response({"sessions": listed})


@router.post("/v1/ui/sessions/{session_id}/revoke")
async def ui_session_revoke(call: SessionCall, session_id: str) -> Response:
    """End a web view session at once: one's own, or (authority.manage in its workspace) anyone's there."""
    check_identifier(session_id, field="session")
    try:
        found = await call.services.ledger.get_ui_session(session_id)
    except NotFound:
        found = None
    if found is None or not _may_revoke(call.principal, found):
        # Another's session is not found either: its id tells a caller who may not end it nothing.
        raise NotFound(f"No web view session {session_id!r} of yours.", hint="See yours with GET /v1/ui/sessions.")
    ended = await call.services.ledger.end_ui_session(call.actor, session_id=session_id, reason="revoked")
    record = await call.services.ledger.get_ui_session(session_id)
    return json_response({"record": record, "replayed": not ended})


def _may_revoke(principal: Principal, session: dict[str, Any]) -> bool:
    if principal.workspace_id and principal.workspace_id != session["workspace_id"]:
        return False
    if session["actor_id"] == principal.actor_id:
        return True
    try:
        principal.require("authority.manage", workspace_id=session["workspace_id"])
    except Forbidden:
        return False
    return True


@router.get("/ui/signin", include_in_schema=False)
async def sign_in(request: Request, code: str = "", next: str = "") -> Response:
    services: Services = request.app.state.services
    identity = services.sign_ins.exchange(code) if code else None
    if identity is None:
        text = "This sign-in link is unknown, already used or expired."
        return _html(message_page("Sign-in refused", text, status_hint=_SIGN_IN_HINT), 401)
    session = await open_session(services.ledger, identity)
    # Back to the page that asked for a sign-in (its address kept in a cookie of its own), or the one named.
    target = same_site_page(next) or same_site_page(request.cookies.get(NEXT_COOKIE, "")) or "/ui"
    answer = RedirectResponse(target, status_code=303, headers=HEADERS)
    answer.delete_cookie(NEXT_COOKIE, path="/ui")
    answer.set_cookie(
        COOKIE, session, max_age=int(SESSION_TTL_S), httponly=True, samesite="strict", path="/ui",
        secure=request.url.scheme == "https",
    )  # fmt: skip
    return answer


@router.post("/ui/signout", include_in_schema=False)
async def sign_out(request: Request) -> Response:
    await end_session(request.app.state.services.ledger, request.cookies.get(COOKIE))
    answer = _html(message_page("Signed out", "The session has ended.", status_hint=_SIGN_IN_HINT), 200)
    answer.delete_cookie(COOKIE, path="/ui")
    return answer


@router.get("/ui/static/{name}", include_in_schema=False)
async def static(name: str) -> Response:
    if name not in STATIC:
        return _html(message_page("Not found", "No such file."), 404)
    data = (resources.files("bashgym.daemon.ui") / "static" / name).read_bytes()
    return Response(data, media_type=STATIC[name], headers={"Cache-Control": "public, max-age=86400"})


@router.get("/ui", include_in_schema=False)
@router.get("/ui/", include_in_schema=False)
async def home(request: Request) -> Response:
    async def build(viewer: Viewer) -> str:
        listed = await viewer.services.ledger.list_projects(viewer.workspace)
        readable = [p for p in listed if viewer.may_read(p["project_id"])]
        return await pages.projects(
            viewer.services.ledger, viewer.workspace, readable, _who(viewer), viewer.services.settings.stale_after_s
        )

    return await _serve(request, build)


@router.get("/ui/p/{project}", include_in_schema=False)
async def project_page(request: Request, project: str) -> Response:
    query = {k: v for k, v in request.query_params.items() if k in QUERY_KEYS}

    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        stale = viewer.services.settings.stale_after_s
        return await pages.project(viewer.services.ledger, viewer.workspace, name, query, _who(viewer), stale)

    return await _serve(request, build)


@router.get("/ui/p/{project}/runs/{run_id}", include_in_schema=False)
async def run_page(request: Request, project: str, run_id: str) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        check_identifier(run_id, field="run")
        every = request.query_params.get("settings") == "all"
        return await pages.run(
            viewer.services.ledger, viewer.workspace, name, run_id, _who(viewer), every_setting=every
        )

    return await _serve(request, build)


@router.get("/ui/p/{project}/compare", include_in_schema=False)
async def compare_page(request: Request, project: str, run: Annotated[list[str] | None, Query()] = None) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        chosen = list(dict.fromkeys(run or []))
        if not 2 <= len(chosen) <= MAX_COMPARED:
            raise InvalidInput(
                f"Compare takes 2 to {MAX_COMPARED} runs; {len(chosen)} were chosen.",
                hint="Tick the runs to compare in the project's runs table.",
            )
        for run_id in chosen:
            check_identifier(run_id, field="run")
        plotted = {k: request.query_params[k] for k in ("param", "metric") if request.query_params.get(k)}
        return await pages.compare(viewer.services.ledger, viewer.workspace, name, chosen, _who(viewer), plotted)

    return await _serve(request, build)


@router.get("/ui/p/{project}/evaluations", include_in_schema=False)
async def evaluations_page(request: Request, project: str) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        return await pages.evaluations(viewer.services.ledger, viewer.workspace, name, _who(viewer))

    return await _serve(request, build)


@router.get("/ui/p/{project}/evaluations/{result_id}", include_in_schema=False)
async def evaluation_page(request: Request, project: str, result_id: str) -> Response:
    """One result task by task (daemon/ui/evaluation.py): families, tasks, samples, canaries and safety."""

    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        check_identifier(result_id, field="result")
        view = await evaluation.result_view(
            viewer.services.ledger, viewer.services.blobs, viewer.workspace, name, result_id,
            may_see_protected=viewer.principal.holds("eval.protected", name),
        )  # fmt: skip
        return evaluation.result_page(name, view, _who(viewer))

    return await _serve(request, build)


@router.get("/ui/p/{project}/comparisons/{comparison_id}", include_in_schema=False)
async def comparison_page(request: Request, project: str, comparison_id: str) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        check_identifier(comparison_id, field="comparison")
        view = await evaluation.comparison_view(
            viewer.services.ledger, viewer.workspace, name, comparison_id,
            may_see_protected=viewer.principal.holds("eval.protected", name),
        )  # fmt: skip
        return evaluation.comparison_page(name, view, _who(viewer))

    return await _serve(request, build)


@router.get("/ui/p/{project}/campaigns", include_in_schema=False)
async def campaigns_page(request: Request, project: str) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        return await pages.campaigns(viewer.services.ledger, viewer.workspace, name, _who(viewer))

    return await _serve(request, build)


@router.get("/ui/p/{project}/campaigns/{campaign_id}", include_in_schema=False)
async def campaign_page(request: Request, project: str, campaign_id: str) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        check_identifier(campaign_id, field="campaign")
        return await pages.campaign(viewer.services.ledger, viewer.workspace, name, campaign_id, _who(viewer), query)

    query = {k: v for k, v in request.query_params.items() if k in QUERY_KEYS}
    return await _serve(request, build)


@router.get("/ui/p/{project}/experiments/{experiment_id}", include_in_schema=False)
async def experiment_page(request: Request, project: str, experiment_id: str) -> Response:
    query = {k: v for k, v in request.query_params.items() if k in QUERY_KEYS}

    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        check_identifier(experiment_id, field="experiment")
        ledger, who = viewer.services.ledger, _who(viewer)
        return await pages.experiment(ledger, viewer.workspace, name, experiment_id, query, who)

    return await _serve(request, build)


@router.get("/ui/p/{project}/model-versions/{version}", include_in_schema=False)
async def model_version_page(request: Request, project: str, version: str) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        check_identifier(version, field="model version")
        return await pages.model_version(viewer.services.ledger, viewer.workspace, name, version, _who(viewer))

    return await _serve(request, build)


@router.get("/ui/p/{project}/reports/{report_id}/{name}", include_in_schema=False)
async def report_page_file(request: Request, project: str, report_id: str, name: str) -> Response:
    """A report's file for a page (its charts drawn in the campaign's page), read as the API reads it."""

    async def build(viewer: Viewer) -> Response:
        checked = viewer.require(project)
        check_identifier(report_id, field="report")
        reports_dir = viewer.services.settings.home / "reports"
        data, media_type = await report_file(
            viewer.services.ledger, reports_dir, viewer.workspace, checked, report_id, name
        )
        return Response(data, media_type=media_type, headers=HEADERS)

    return await _serve(request, build)


@router.get("/ui/p/{project}/events", include_in_schema=False)
async def events_page(request: Request, project: str, after: int = 0) -> Response:
    async def build(viewer: Viewer) -> str:
        name = viewer.require(project)
        return await pages.events(viewer.services.ledger, viewer.workspace, name, max(0, after), _who(viewer))

    return await _serve(request, build)


@router.get("/ui/data/p/{project}/runs/{run_id}/series", include_in_schema=False)
async def series_data(
    request: Request, project: str, run_id: str, metric: str, lo: int | None = None, hi: int | None = None,
    points: int = 1000,
) -> Response:  # fmt: skip
    """A chart's points for the visible range: thinned on the server to what `points` pixels can show."""
    try:
        viewer = await _viewer(request)
        name = viewer.require(project)
        check_identifier(run_id, field="run")
        check_metric_name(metric)
        await viewer.services.ledger.get_run(viewer.workspace, name, run_id)  # 404 for a run not in the project
        found = await viewer.services.ledger.metric_series(
            viewer.workspace, name, run_id, metric, lo=lo, hi=hi, buckets=max(10, min(points, 4000)) // 4
        )
    except BashGymError as exc:
        return Response(json.dumps({"error": exc.message}), status_code=exc.status, media_type="application/json")
    return Response(json.dumps(found), media_type="application/json", headers=HEADERS)


@router.get("/ui/live/p/{project}/runs/{run_id}", include_in_schema=False)
async def live(request: Request, project: str, run_id: str) -> Response:
    """Server-sent events: `points` when the run's metrics grow, `status` when it moves; the page refetches. A
    stream holds one of its principal's long-poll slots while it is open (a page opens one, whatever its charts),
    so no one holds more open streams and waits together than `max_waits_per_principal`. It lasts while its
    session may read the project (long_polls.py): signed out, or its token or grant revoked or expired, it ends."""
    session = request.cookies.get(COOKIE)
    try:
        viewer = await _viewer(request)
        name = viewer.require(project)
        check_identifier(run_id, field="run")
        await viewer.services.ledger.get_run(viewer.workspace, name, run_id)
        with viewer.services.waits.hold(viewer.principal.actor_id):
            pass  # RateLimited now, as a 429, when every slot is held; the stream takes its own below
    except BashGymError as exc:
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, RateLimited) else {}
        body = json.dumps({"error": exc.message, "hint": exc.hint})
        return Response(body, status_code=exc.status, media_type="application/json", headers=headers)
    ledger = viewer.services.ledger

    async def may_still_read() -> None:
        (await _signed_in(viewer.services, session, viewer.workspace)).require(name)

    async def stream() -> AsyncIterator[bytes]:
        # Held while the stream runs, released when it ends or the browser goes (the task is cancelled here);
        # a stream that never started holds nothing.
        with viewer.services.waits.hold(viewer.principal.actor_id):
            async for chunk in events(ledger, viewer, name, run_id, recheck=may_still_read):
                yield chunk

    headers = {**HEADERS, "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


async def events(ledger: Ledger, viewer: Viewer, name: str, run_id: str, *, recheck: Recheck) -> AsyncIterator[bytes]:
    """The run's events as server-sent events, from now on, for LIVE_FOR_S, while `recheck` passes: once the
    session may no longer read them, an `ended` event saying why, and the end."""
    cursor = ledger.last_cursor
    deadline = asyncio.get_running_loop().time() + LIVE_FOR_S
    yield b": live\n\n"
    try:
        while asyncio.get_running_loop().time() < deadline:
            await ledger.wait_for_events(cursor, KEEP_ALIVE_S, recheck=recheck)
            chunks, cursor = await _next_page(ledger, viewer, name, run_id, cursor, recheck=recheck)
            for chunk in chunks:
                yield chunk
    except (Unauthenticated, Forbidden) as exc:
        yield f"event: ended\ndata: {json.dumps({'reason': exc.message})}\n\n".encode()


async def _next_page(
    ledger: Ledger, viewer: Viewer, name: str, run_id: str, cursor: int, *, recheck: Recheck
) -> tuple[list[bytes], int]:
    """The run's events past `cursor` as server-sent events and a keep-alive, and the cursor to go on from; read
    before `recheck`, so nothing read after the session lost its reach is sent."""
    head = ledger.last_cursor  # taken before the read: every event up to it is in the page (or has_more)
    page = await ledger.events_page(viewer.workspace, name, after_cursor=cursor, limit=500, types=None)
    await recheck()
    chunks: list[bytes] = []
    for event in page.events:
        if event.run_id == run_id:
            kind = "points" if event.event_type == "metrics.ingested" else "status"
            data = json.dumps({"cursor": event.cursor, "type": event.event_type})
            chunks.append(f"event: {kind}\ndata: {data}\n\n".encode())
    # Past this project's events read, and past the workspace's others: the next wait is for new ones.
    after = page.next_cursor if page.has_more else max(page.next_cursor, head)
    return [*chunks, b": keep-alive\n\n"], after


@router.get("/ui/p/{project}/runs/{run_id}/artifacts/{path:path}", include_in_schema=False)
async def artifact_download(request: Request, project: str, run_id: str, path: str) -> Response:
    """A run's artifact downloaded from its page, under the session's read of the project: the API's route
    (api/artifacts.py) with the session's authority, its refusals as pages."""

    async def build(viewer: Viewer) -> Response:
        name = viewer.require(project)
        check_identifier(run_id, field="run")
        services = viewer.services
        artifact = await open_artifact(
            services.ledger, services.blobs, services.settings.runs_dir, viewer.workspace, name, run_id, path
        )
        return download_response(artifact, dict(request.headers), extra=HEADERS)

    return await _serve(request, build)


@router.get("/ui/p/{project}/evaluations/{result_id}/attempts", include_in_schema=False)
async def attempts_download(request: Request, project: str, result_id: str) -> Response:
    """A measured result's attempts file downloaded from its page: the API's route with the session's authority."""

    async def build(viewer: Viewer) -> Response:
        name = viewer.require(project)
        check_identifier(result_id, field="result")
        attempts = await open_attempts(
            viewer.services.ledger, viewer.services.blobs, viewer.workspace, name, result_id,
            may_see_protected=viewer.principal.holds("eval.protected", name),
        )  # fmt: skip
        return download_response(attempts, dict(request.headers), extra=HEADERS)

    return await _serve(request, build)


@router.get("/ui/{rest:path}", include_in_schema=False)
async def not_a_page(rest: str) -> Response:
    return _html(message_page("Not found", "There is no such page.", status_hint="Start from /ui."), 404)


_SIGN_IN_HINT = "Run `bashgym ui` (or /ui in Discord) for a new link; it works once, within two minutes."


async def _viewer(request: Request) -> Viewer:
    """The signed-in viewer of a request, resolved afresh, its reads rate-limited (see _signed_in)."""
    services: Services = request.app.state.services
    viewer = await _signed_in(services, request.cookies.get(COOKIE), request.query_params.get("workspace"))
    services.read_limiter.check(viewer.principal.actor_id)
    return viewer


async def _signed_in(services: Services, session: str | None, workspace: str | None) -> Viewer:
    """The session's viewer in `workspace` (else the link's), resolved afresh; Unauthenticated when there is no live
    session or its credential died, which ends the session: a revoked token signs its browser out for good."""
    identity = await session_identity(services.ledger, session)
    if identity is None:
        raise Unauthenticated("You are not signed in to the web view.", hint=_SIGN_IN_HINT)
    ws = workspace or identity.workspace
    check_identifier(ws, field="workspace")
    try:
        token = await resolve_token_id(services.ledger, identity.token_id, services.ledger.now())
        guilds = frozenset(services.settings.discord_guild_ids)
        principal = await act_in_workspace(services.ledger, identity.delegation, token, ws, allowed_guilds=guilds)
    except Unauthenticated:
        await end_session(services.ledger, session, reason="token_dead")
        raise
    return Viewer(services, principal, ws)


async def _serve(request: Request, build: Any) -> Response:
    """A page (or a file a page shows), or a page saying why not: not signed in (401), not yours (403), not there
    (404), not valid (422)."""
    try:
        built = await build(await _viewer(request))
        return built if isinstance(built, Response) else _html(built, 200)
    except Unauthenticated as exc:
        return _sign_in_page(request, exc)
    except Forbidden:
        text = "Your token's grants do not let you read this project."
        return _html(message_page("Not yours to read", text, status_hint="Ask a lead for ledger.read there."), 403)
    except NotFound as exc:
        return _html(message_page("Not found", exc.message), 404)
    except BashGymError as exc:
        return _html(message_page("Refused", exc.message, status_hint=exc.hint), exc.status)


def _sign_in_page(request: Request, exc: Unauthenticated) -> Response:
    """The 401 page; it keeps the page asked for (a cookie of its own, for ten minutes), where sign-in returns."""
    answer = _html(message_page("Sign in", exc.message, status_hint=exc.hint or _SIGN_IN_HINT), 401)
    asked = same_site_page(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    if asked and request.method == "GET":
        # Lax, not Strict: the sign-in link is opened from a terminal or Discord, a navigation from another site.
        answer.set_cookie(
            NEXT_COOKIE, asked, max_age=600, httponly=True, samesite="lax", path="/ui",
            secure=request.url.scheme == "https",
        )  # fmt: skip
    return answer


def _html(text: str, status: int) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=HEADERS)


def _who(viewer: Viewer) -> str:
    return f"{viewer.principal.actor_id} · {viewer.workspace}"
