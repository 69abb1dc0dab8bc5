"""External jobs' notices: submitted, compute started (not the upstream's word alone), completed with what it made,
failed with the reason, cancelled with who asked; in the project's channel, and never with the job's request."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from bashgym.client.external import ExternalJobSpec, ExternalObservation
from bashgym.client.models import Notice
from bashgym.client.render import notice_text
from bashgym.client.specs import Actor, ProjectSpec, RunRegistration
from bashgym.daemon.notices.render import NoticeRenderer
from bashgym.ledger.store import Ledger

from tests.support.factories import tracking_context

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]
SYSTEM = Actor(actor_id="system")
SECRET = "do-not-post-this-objective"


async def external_notices(ledger: Ledger, tmp_path: Path) -> list[Notice]:
    page = await NoticeRenderer(ledger, tmp_path / "reports").page("default", after_cursor=0, limit=500)
    return [n for n in page.notices if n.event_type.startswith("external_job.")]


async def begin_job(ledger: Ledger, actor: Actor, *, surface: str = "hf-jobs", provider: str = "") -> str:
    """A project routed to channel 111 and a job of its run, submitted upstream as `up-1`."""
    await ledger.create_project(actor, "default", ProjectSpec(project_id="nightly", name="Nightly SFT"))
    await ledger.set_channel(actor, "default", "nightly", channel_id="111", guild_id="")
    context = tracking_context(objective=SECRET)
    run = (await ledger.register_run(actor, "default", RunRegistration(method="sft", tracking_context=context))).record
    request: dict[str, Any] = {"method": "sft", "base_model": "acme/tiny", "tracking_context": context}
    spec = ExternalJobSpec(
        job_id="ext-1",
        project_id="nightly",
        run_id=run["run_id"],
        surface=surface,
        provider=provider,
        flavor="a10g-small",
        request=request,
        request_digest=hashlib.sha256(b"request").hexdigest(),
        lineage={"tracking_context": context},
        destination="hf://acme/nightly-sft",
    )
    await ledger.begin_external_job(actor, "default", spec)
    await ledger.record_external_submission(SYSTEM, "default", "ext-1", "up-1", {"id": "up-1"})
    return str(run["run_id"])


async def observe(ledger: Ledger, **observation: Any) -> None:
    await ledger.observe_external_job(SYSTEM, "default", "ext-1", ExternalObservation(**observation))


def fields(notice: Notice) -> dict[str, str]:
    return {f.name: f.value for f in notice.fields}


async def test_a_hub_job_posts_submitted_compute_started_and_completed_with_its_commit(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    run_id = await begin_job(ledger, actor)
    await observe(ledger, kind="state", state="running", upstream_state="RUNNING", reason="the Hub reports RUNNING")
    await observe(ledger, kind="log", upstream_state="RUNNING", message="step 1", shows_compute=True)
    await ledger.record_external_result(SYSTEM, "default", "ext-1", {"repo": "acme/nightly-sft", "commit": "abc123"})
    await observe(ledger, kind="state", state="completed", upstream_state="COMPLETED", reason="the Hub reports done")

    shown = await external_notices(ledger, tmp_path)
    assert [(n.outcome, n.title) for n in shown] == [
        ("info", "External job submitted: ext-1"),
        ("info", "External job running: compute started: ext-1"),
        ("success", "External job completed: ext-1"),
    ], "the upstream's RUNNING alone posted nothing; the first log line did"
    submitted, started, completed = shown
    assert fields(submitted) == {
        "job": "ext-1", "run": run_id, "surface": "hf-jobs", "upstream job": "up-1", "flavor": "a10g-small",
        "destination": "hf://acme/nightly-sft",
    }  # fmt: skip
    assert "log line or metric" in started.description
    assert fields(completed)["result"] == "acme/nightly-sft@abc123"
    assert completed.description == "the Hub reports done"
    assert {n.channel_id for n in shown} == {"111"}, "the project's channel, as its runs' notices"
    assert all(SECRET not in notice_text(n) and "tracking_context" not in notice_text(n) for n in shown)


async def test_the_upstream_saying_running_without_compute_posts_nothing(
    ledger: Ledger, actor: Actor, tmp_path: Path
) -> None:
    await begin_job(ledger, actor)
    await observe(ledger, kind="state", state="running", upstream_state="running", reason="acme reports running")
    assert [n.title for n in await external_notices(ledger, tmp_path)] == ["External job submitted: ext-1"]


async def test_a_failed_job_says_why(ledger: Ledger, actor: Actor, tmp_path: Path) -> None:
    await begin_job(ledger, actor, surface="managed", provider="acme")
    reason = "acme reports failed: the training file has too few examples"
    await observe(ledger, kind="state", state="failed", upstream_state="failed", reason=reason)
    (_, failed) = await external_notices(ledger, tmp_path)
    assert (failed.outcome, failed.title, failed.description) == ("failure", "External job failed: ext-1", reason)
    assert fields(failed)["surface"] == "managed (acme)"


async def test_a_cancelled_job_names_who_asked(ledger: Ledger, actor: Actor, tmp_path: Path) -> None:
    await begin_job(ledger, actor, surface="managed", provider="acme")
    await ledger.record_external_cancel(Actor(actor_id="discord:42"), "default", "ext-1")
    await observe(ledger, kind="state", state="cancelled", upstream_state="cancelled", reason="acme reports cancelled")
    (_, cancelled) = await external_notices(ledger, tmp_path)
    assert (cancelled.outcome, cancelled.title) == ("warning", "External job cancelled: ext-1")
    assert fields(cancelled)["cancelled by"] == "discord:42"
    assert SECRET not in notice_text(cancelled)
