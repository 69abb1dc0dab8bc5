"""The notices of external jobs (Hugging Face Jobs, managed provider fine-tunes): submitted, compute started,
completed with what it made, failed with the reason, cancelled with who asked. Built from the job's ledger row:
ids, states and results, never its request (which holds the run's tracking context)."""

from __future__ import annotations

from typing import Any

from bashgym.client.models import NoticeOutcome
from bashgym.client.specs import Event
from bashgym.ledger.store import Ledger

# The external-job events people see. `accepted` (before the upstream is asked), `unknown`, and `running` as the
# upstream's word alone (no compute proven) render to nothing.
EXTERNAL_JOB_OUTCOMES: dict[str, tuple[NoticeOutcome, str]] = {
    "external_job.submitted": ("info", "External job submitted"),
    "external_job.running": ("info", "External job running: compute started"),
    "external_job.completed": ("success", "External job completed"),
    "external_job.failed": ("failure", "External job failed"),
    "external_job.cancelled": ("warning", "External job cancelled"),
}
# The reason ledger/external_jobs.py gives the event of a job's first log or metric evidence.
COMPUTE_STARTED = "compute started"
NOT_RECORDED = "not recorded: see the run's end reason"


async def render_external_job(ledger: Ledger, event: Event) -> tuple[Any, ...] | None:
    """(outcome, title, description, fields) of a job's milestone, or None for an event nobody needs to see."""
    if event.event_type == "external_job.running" and event.payload.get("reason") != COMPUTE_STARTED:
        return None  # the upstream saying running proves no compute; its first log line or metric does
    outcome, title = EXTERNAL_JOB_OUTCOMES[event.event_type]
    job = await ledger.get_external_job(event.workspace_id, str(event.payload["entity_id"]))
    description = str(event.payload.get("reason") or job.get("reason") or "")
    fields = job_fields(job, str(event.payload.get("upstream_job_id") or ""))
    match event.event_type:
        case "external_job.submitted":
            description = "The upstream took it; the run stays preparing until a log line or metric shows compute."
        case "external_job.running":
            description = "A log line or metric shows the job computing."
        case "external_job.completed":
            fields.append(("result", job_result(job.get("result"))))
        case "external_job.cancelled":
            asked = job.get("cancel_requested_by")
            fields.append(("cancelled by", str(asked) if asked else "not through BashGym (upstream)"))
    return outcome, f"{title}: {job['job_id']}", description, fields


def job_fields(job: dict[str, Any], upstream: str) -> list[tuple[str, str]]:
    surface = f"{job['surface']} ({job['provider']})" if job.get("provider") else str(job["surface"])
    return [
        ("job", str(job["job_id"])),
        ("run", str(job["run_id"])),
        ("surface", surface),
        ("upstream job", upstream or str(job.get("upstream_job_id") or "")),
        ("flavor", str(job.get("flavor") or "")),
        ("destination", str(job.get("destination") or "")),
    ]


def job_result(result: object) -> str:
    """What a job made: the Hub repo at its commit, or the provider's model."""
    if not isinstance(result, dict):
        return NOT_RECORDED
    if result.get("repo") and result.get("commit"):
        return f"{result['repo']}@{result['commit']}"
    return str(result.get("fine_tuned_model") or NOT_RECORDED)
