"""Downloads: a run's artifacts (`GET /v1/projects/{project}/runs/{run}/artifacts/{path}`, under the authority that
reads the run, ledger.read in its project, the path being the one in its `bashgym://runs/<run>/<path>` uri), and a
measured evaluation's attempts file (`GET /v1/projects/{project}/eval-results/{result}/attempts`, also eval.protected
for a protected suite's)."""

from __future__ import annotations

from bashgym.client.validation import check_identifier
from bashgym.daemon.api.routing import ReadCall
from bashgym.daemon.artifacts import download_response, open_artifact, open_attempts
from fastapi import APIRouter, Request
from starlette.responses import Response

router = APIRouter(prefix="/v1", tags=["runs"])


@router.get("/projects/{project}/runs/{run_id}/artifacts/{path:path}")
async def download_artifact(call: ReadCall, request: Request, project: str, run_id: str, path: str) -> Response:
    """The artifact's bytes, streamed, checked against its recorded sha256 (sent as Repr-Digest, X-Content-SHA256
    and the ETag); one byte range with `Range: bytes=FIRST-LAST`."""
    check_identifier(run_id, field="run")
    services = call.services
    artifact = await open_artifact(
        services.ledger, services.blobs, services.settings.runs_dir, call.workspace, project, run_id, path
    )
    return download_response(artifact, dict(request.headers), extra={"Cache-Control": "private, no-cache"})


@router.get("/projects/{project}/eval-results/{result_id}/attempts", tags=["evaluations"])
async def download_attempts(call: ReadCall, request: Request, project: str, result_id: str) -> Response:
    """A measured result's attempts file (every sample's command, exit code, verdict and transcript, one JSON line
    each) as its evaluator wrote it, checked against the digest recorded in the result; ranges as for artifacts."""
    check_identifier(result_id, field="result")
    services = call.services
    attempts = await open_attempts(
        services.ledger, services.blobs, call.workspace, project, result_id,
        may_see_protected=call.principal.holds("eval.protected", project),
    )  # fmt: skip
    return download_response(attempts, dict(request.headers), extra={"Cache-Control": "private, no-cache"})
