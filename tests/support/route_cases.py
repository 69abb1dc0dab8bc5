"""One prepared request per mutating route, over the daemon's app in this event loop: the cases the authority tests
(tests/unit/daemon/api/test_authority_routes.py) and the route walk (tests/e2e/trust_boundaries/test_route_walk.py)
send with tokens of every reach."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from bashgym.client.external import ExternalJobSpec
from bashgym.client.specs import Actor
from bashgym.daemon.api.app import create_app
from bashgym.daemon.api.route_table import declared_rule
from bashgym.daemon.authority import hash_token, new_token
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.external.service import ExternalJobs
from bashgym.daemon.external.tracked import TrackedRuns
from bashgym.daemon.services import Services
from bashgym.daemon.settings import load_settings
from bashgym.daemon.training import TrainingService
from bashgym.ledger.store import Ledger
from fastapi.routing import APIRoute

from tests.support.factories import digest, suite, tracking_context

_counter = itertools.count()


def declared_capability(route: APIRoute) -> str | None:
    rule = declared_rule(route)
    return None if rule is None else rule.capability


def needed(route: APIRoute) -> list[str]:
    """Every capability the route's rule names: its own and those it needs too."""
    rule = declared_rule(route)
    assert rule is not None
    return [rule.capability, *rule.also]


@dataclass
class Harness:
    client: httpx.AsyncClient
    ledger: Ledger
    admin: str
    tmp: Path
    app: Any

    async def token(
        self,
        capabilities: list[str],
        actor_id: str | None = None,
        *,
        profile: str = "",
        workspace_id: str | None = None,
        project_id: str | None = None,
    ) -> str:
        """A bearer token of `profile` plus `capabilities`, of no workspace unless one is named."""
        token = new_token()
        await self.ledger.insert_token(
            Actor(actor_id="test"),
            token_id=f"tok-{next(_counter)}",
            token_hash=hash_token(token),
            actor_id=actor_id or f"user-{next(_counter)}",
            profile=profile,
            capabilities=capabilities,
            workspace_id=workspace_id,
            project_id=project_id,
            expires_at=None,
        )
        return token

    async def admin_call(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = await self.client.request(method, path, headers={"Authorization": f"Bearer {self.admin}"}, **kwargs)
        assert answer.status_code < 300, answer.text
        return answer.json()


@contextlib.asynccontextmanager
async def open_harness(ledger: Ledger, tmp_path: Path) -> AsyncIterator[Harness]:
    """The daemon's app over `ledger` with an admin token of no workspace (`tok-admin`), served in this loop."""
    # The operator lets callers name files in tmp_path, keeps the home apart inside it, and backs up into tmp_path.
    settings = load_settings(
        {},
        home=str(tmp_path / "home"),
        rate_limit_per_minute=100_000,
        rate_limit_burst=100_000,
        data_roots=[tmp_path],
        export_roots=[tmp_path],
        backup_dir=tmp_path,
        ssh_keys_dir=tmp_path,
        allow_private_device_hosts=True,
        slurm_shared_root=tmp_path,
    )
    training = TrainingService(settings, ledger)
    external = ExternalJobs(settings, ledger, {})
    blobs = BlobStore(settings.artifacts_dir)
    tracked = TrackedRuns(settings, ledger)
    services = Services(settings, ledger, blobs, "test", 0.0, training=training, external=external, tracked=tracked)
    app = create_app(services)
    admin = new_token()
    await ledger.insert_token(
        Actor(actor_id="system"),
        token_id="tok-admin",
        token_hash=hash_token(admin),
        actor_id="admin",
        profile="admin",
        capabilities=[],
        workspace_id=None,
        project_id=None,
        expires_at=None,
    )
    transport = httpx.ASGITransport(app=app)
    async with training, external, tracked, httpx.AsyncClient(transport=transport, base_url="http://daemon") as client:
        yield Harness(client, ledger, admin, tmp_path, app)


# One request per mutating route: a factory that prepares state with the admin token and returns
# (path, request kwargs). Adding a mutating route without a case here fails the coverage test.
Case = Callable[[Harness], Any]


async def _project(h: Harness) -> str:
    name = f"p{next(_counter)}"
    await h.admin_call("POST", "/v1/projects", json={"project_id": name, "name": name})
    return name


async def _run(h: Harness) -> tuple[str, str]:
    project = f"p{next(_counter)}"
    run = await h.admin_call(
        "POST", "/v1/runs", json={"method": "sft", "tracking_context": tracking_context(project_id=project)}
    )
    return project, run["record"]["run_id"]


async def _results(h: Harness) -> tuple[str, str, str]:
    project, run = await _run(h)
    await h.admin_call("POST", f"/v1/projects/{project}/eval-suites", json=suite("s"))
    ids = []
    for value in (0.1, 0.2):
        r = await h.admin_call(
            "POST",
            f"/v1/projects/{project}/eval-results",
            json={"suite_id": "s", "run_id": run, "metrics": {"pass_at_1": value}},
        )
        ids.append(r["record"]["result_id"])
    return project, ids[0], ids[1]


async def _blob(h: Harness, project: str = "unassigned") -> str:
    stored = await h.admin_call("PUT", "/v1/blobs", params={"project": project}, content=b'{"text": "row"}\n')
    return str(stored["sha256"])


async def case_projects(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/projects", {"json": {"project_id": f"new{next(_counter)}", "name": "N"}}


async def case_experiments(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/experiments", {"json": {"experiment_id": "e", "name": "E"}}


async def case_model_versions(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/model-versions", {
        "json": {"model_version_id": "m", "model_id": "m", "source_uri": "hf://a/b", "source_revision": "x"}
    }


async def case_dataset_versions(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/dataset-versions", {
        "json": {"dataset_version_id": "d", "dataset_id": "d", "source_uri": "s3://d", "content_digest": digest("d")}
    }


async def case_dataset_from_blob(h: Harness) -> tuple[str, dict[str, Any]]:
    project = await _project(h)
    sha = await _blob(h, project)
    return f"/v1/projects/{project}/dataset-versions/from-blob", {
        "json": {"dataset_id": "d", "dataset_version_id": "v", "sha256": sha, "filename": "d.jsonl"}
    }


async def case_environments(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/environments", {
        "json": {"environment_id": "env", "compute_target": "local", "runtime_digest": digest("r")}
    }


async def case_runs(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/runs", {"json": {"method": "sft"}}


async def case_transitions(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    return f"/v1/projects/{project}/runs/{run}/transitions", {"json": {"status": "running"}}


async def case_metrics(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    return f"/v1/projects/{project}/metrics", {
        "json": {"run_id": run, "attempt_id": f"{run}.a1", "points": [{"metric": "m", "step": 0, "value": 1.0}]}
    }


async def case_artifacts(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    return f"/v1/projects/{project}/artifacts", {
        "json": {"run_id": run, "kind": "adapter", "uri": "u", "sha256": digest("a"), "size_bytes": 1}
    }


async def case_eval_suites(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/eval-suites", {"json": suite("x")}


async def case_eval_results(h: Harness) -> tuple[str, dict[str, Any]]:
    project = await _project(h)
    await h.admin_call("POST", f"/v1/projects/{project}/eval-suites", json=suite("s"))
    return f"/v1/projects/{project}/eval-results", {"json": {"suite_id": "s", "metrics": {"pass_at_1": 0.5}}}


async def case_comparisons(h: Harness) -> tuple[str, dict[str, Any]]:
    project, base, cand = await _results(h)
    return f"/v1/projects/{project}/comparisons", {
        "json": {"baseline_result_id": base, "candidate_result_id": cand, "primary_metric": "pass_at_1"}
    }


async def case_decisions(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/decisions", {
        "json": {"decision_type": "note", "outcome": "hold", "rationale": "waiting"}
    }


async def case_aliases(h: Harness) -> tuple[str, dict[str, Any]]:
    project, _ = await _run(h)
    return f"/v1/projects/{project}/aliases", {"json": {"alias": "champion", "model_version_id": "tiny-v1"}}


async def case_budget_entries(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/budget-entries", {
        "json": {"entry_id": "b", "kind": "settle", "gpu_hours": 5}
    }


async def case_reports(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/reports", {"json": {"report_id": "r", "kind": "k", "title": "T"}}


async def case_annotations(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/annotations", {"json": {"text": "note"}}


async def case_channel_set(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/channel", {"json": {"channel_id": "4242"}}


async def case_backup(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/ledger/backup", {"params": {"to": str(h.tmp / f"backup-{next(_counter)}.sqlite3")}}


async def case_blobs(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/blobs", {"content": b"some bytes"}


async def case_cursor(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/consumers/notifier/cursor", {"json": {"cursor": 1}}


async def case_notice_failure(h: Harness) -> tuple[str, dict[str, Any]]:
    await h.admin_call("POST", "/v1/projects", json={"project_id": f"p{next(_counter)}", "name": "P"})
    event = (await h.ledger.events_page("default", None, after_cursor=h.ledger.last_cursor - 1, limit=1)).events[0]
    body = {"cursor": event.cursor, "event_id": event.event_id, "channel_id": "123", "status": 400, "code": 50008}
    return "/v1/consumers/notifier/failures", {"json": body}


async def case_lease_take(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/consumers/notifier/lease", {"params": {"holder": f"bot-{next(_counter)}", "pid": 1, "ttl_s": 30}}


async def case_lease_release(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/consumers/notifier/lease", {"params": {"holder": "bot-1", "pid": 1}}


async def case_issue_token(h: Harness) -> tuple[str, dict[str, Any]]:
    # A token carries only what its issuer holds: a holder of authority.manage alone hands on that alone.
    return "/v1/auth/tokens", {"json": {"actor_id": "bob", "capabilities": ["authority.manage"]}}


async def case_revoke_token(h: Harness) -> tuple[str, dict[str, Any]]:
    issued = await h.admin_call("POST", "/v1/auth/tokens", json={"actor_id": "carol", "profile": "viewer"})
    return f"/v1/auth/tokens/{issued['token_id']}/revoke", {}


async def case_grant(h: Harness) -> tuple[str, dict[str, Any]]:
    body = {"subject_kind": "user", "subject_id": "42", "capabilities": ["authority.manage"]}
    return "/v1/authority/grants", {"json": body}


async def case_revoke_grant(h: Harness) -> tuple[str, dict[str, Any]]:
    grant = await h.admin_call(
        "POST", "/v1/authority/grants", json={"subject_kind": "role", "subject_id": "7", "profile": "viewer"}
    )
    return f"/v1/authority/grants/{grant['grant_id']}/revoke", {}


async def case_training_plan(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/training/plan", {"json": {"strategy": "sft", "base_model": "m", "dataset_path": "d.jsonl"}}


async def case_training_start(h: Harness) -> tuple[str, dict[str, Any]]:
    data = h.tmp / f"sft-{next(_counter)}.jsonl"
    data.write_text('{"text": "wc -l notes.txt"}\n')
    # The model does not exist, so the trainer this launches fails at once; the launch is what is tested.
    return "/v1/training/start", {
        "json": {"strategy": "sft", "base_model": "org/absent-model", "dataset_path": str(data)}
    }


async def case_hf_job(h: Harness) -> tuple[str, dict[str, Any]]:
    request = {"method": "sft", "base_model": "org/tiny", "tracking_context": tracking_context(project_id="p-hf")}
    return "/v1/jobs/hf", {"json": {"request": request, "dataset": {"repo": "org/data"}, "output_repo": "org/out"}}


async def case_provider_job(h: Harness) -> tuple[str, dict[str, Any]]:
    data = h.tmp / f"sft-{next(_counter)}.jsonl"
    data.write_text('{"text": "wc -l notes.txt"}\n')
    request = {"method": "sft", "base_model": "gpt-4o-mini", "dataset_path": str(data)}
    return "/v1/jobs/providers/acme", {"json": {"request": request, "cost_ceiling_usd": 5.0}}


async def case_compute_plan(h: Harness) -> tuple[str, dict[str, Any]]:
    data = h.tmp / f"sft-{next(_counter)}.jsonl"
    data.write_text('{"text": "wc -l notes.txt"}\n')
    request = {"method": "sft", "base_model": "org/tiny", "dataset_path": str(data)}
    return "/v1/compute/plans", {"json": {"engine": "dstack", "request": request}}


async def case_job_cancel(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    job = ExternalJobSpec(
        job_id=f"ext-{next(_counter)}",
        project_id=project,
        run_id=run,
        surface="managed",
        provider="acme",
        flavor="managed",
        request={},
        request_digest=digest("request"),
        lineage={},
        destination="managed://acme",
    )
    await h.ledger.begin_external_job(Actor(actor_id="admin"), "default", job)
    return f"/v1/projects/{project}/jobs/{job.job_id}/cancel", {}


OWNER = "run-owner"  # the actor of the capability-holding token in the table test


async def _versioned_project(h: Harness) -> str:
    """A project holding model version mv (a Hub repo) and dataset version dv: what a tracked run names."""
    project = await _project(h)
    model = {"model_version_id": "mv", "model_id": "m", "source_uri": "hf://org/m", "source_revision": "x"}
    await h.admin_call("POST", f"/v1/projects/{project}/model-versions", json=model)
    data = {"dataset_version_id": "dv", "dataset_id": "d", "source_uri": "file:///d", "content_digest": digest("d")}
    await h.admin_call("POST", f"/v1/projects/{project}/dataset-versions", json=data)
    return project


def _names(project: str) -> dict[str, Any]:
    return {"params": {"project": project, "model_version": "mv", "dataset_version": "dv"}, "json": {"method": "sft"}}


async def case_tracked_open(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/tracked-runs", _names(await _versioned_project(h))


async def case_mlflow_import(h: Harness) -> tuple[str, dict[str, Any]]:
    body = {"tracking_uri": "http://mlflow", "experiment_id": "1", "experiment_name": "e", "runs": [
        {"source_run_id": f"r{next(_counter)}", "status": "FINISHED"}]}  # fmt: skip
    return f"/v1/projects/{await _project(h)}/imports/mlflow", {"json": body}


def _tracked(tail: str, **request: Any) -> Case:
    """A route of a tracked run that OWNER opened (with a token of its own, as bashgym.track does)."""

    async def case(h: Harness) -> tuple[str, dict[str, Any]]:
        project = await _versioned_project(h)
        token = await h.token(["training.launch", "ledger.read"], actor_id=OWNER)
        opened = await h.client.post(
            "/v1/tracked-runs", headers={"Authorization": f"Bearer {token}"}, **_names(project)
        )
        assert opened.status_code == 201, opened.text
        return f"/v1/projects/{project}/tracked-runs/{opened.json()['run_id']}/{tail}", request

    return case


async def _run_in(h: Harness, *statuses: str, owner: bool = False) -> tuple[str, str]:
    if owner:
        token = await h.token(["ledger.write"], actor_id=OWNER)
        project = f"p{next(_counter)}"
        answer = await h.client.post(
            "/v1/runs",
            headers={"Authorization": f"Bearer {token}"},
            json={"method": "sft", "tracking_context": tracking_context(project_id=project)},
        )
        run = answer.json()["record"]["run_id"]
    else:
        project, run = await _run(h)
    for status in statuses:
        await h.admin_call("POST", f"/v1/projects/{project}/runs/{run}/transitions", json={"status": status})
    return project, run


async def case_pause(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run_in(h, "running", owner=True)
    return f"/v1/projects/{project}/runs/{run}/pause", {}


async def case_resume(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run_in(h, "running", "paused", owner=True)
    return f"/v1/projects/{project}/runs/{run}/resume", {}


async def case_stop(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run_in(h)
    return f"/v1/projects/{project}/runs/{run}/stop", {}


# Routes whose answer, once authority passed, depends on a live trainer the harness does not run:
# pausing a run no supervisor owns is a 409, which still proves the capability check let it through.
# Past the capability check these answer from state, not success: the pause targets a run no trainer runs,
# and the bootstrap a device nothing listens for.
BEYOND_AUTHORITY = {
    ("POST", "/v1/jobs/hf"): 403,  # a Hub job also publishes to a private repo: artifact.publish_private
    ("POST", "/v1/jobs/providers/{provider}"): 404,  # no provider is configured here
    ("POST", "/v1/projects/{project}/jobs/{job_id}/cancel"): 409,  # never submitted: nothing to cancel upstream
    ("POST", "/v1/projects/{project}/runs/{run_id}/pause"): 409,
    ("POST", "/v1/devices/{device_id}/bootstrap"): 503,
    ("POST", "/v1/projects/{project}/evaluations"): 409,  # the run has not completed
    ("POST", "/v1/projects/{project}/evaluations/compare"): 422,  # results recorded without per-task scores
    ("POST", "/v1/projects/{project}/runs/{run_id}/promote"): 422,  # the gate blocks a run without evidence
    ("POST", "/v1/projects/{project}/model-versions/{version}/export"): 422,  # its files are not on this host
    ("POST", "/v1/projects/{project}/model-versions/import"): 422,  # no bundle at that path
    ("POST", "/v1/projects/{project}/runs/{run_id}/model-version"): 422,  # the run has not completed
}


def _campaign_spec(campaign_id: str) -> dict[str, Any]:
    return {
        "campaign_id": campaign_id,
        "title": "T",
        "objective": "O",
        "suite_id": "bash-tasks-v1",
        "starting_model_version_id": "mv",
        "dataset_version_ids": ["dv"],
        "base_recipe": {"strategy": "sft"},
        "budget": {"runs": 2},
    }


async def _campaign(h: Harness, *actions: str) -> tuple[str, str]:
    project, campaign = await _project(h), f"c{next(_counter)}"
    await h.admin_call("POST", f"/v1/projects/{project}/campaigns", json=_campaign_spec(campaign))
    for action in actions:
        if action == "ready":  # validation needs the pinned model and data to exist
            model = {"model_version_id": "mv", "model_id": "m", "source_uri": "hf://org/m"}
            await h.admin_call("POST", f"/v1/projects/{project}/model-versions", json=model)
            data = {
                "dataset_version_id": "dv",
                "dataset_id": "d",
                "source_uri": "file:///d",
                "content_digest": digest("d"),
            }
            await h.admin_call("POST", f"/v1/projects/{project}/dataset-versions", json=data)
            action = "validate"
        current = await h.admin_call("GET", f"/v1/projects/{project}/campaigns/{campaign}")
        await h.admin_call(
            "POST",
            f"/v1/projects/{project}/campaigns/{campaign}/{action}",
            json={"expected_version": current["version"]},
        )
    return project, campaign


async def case_campaign_create(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/campaigns", {"json": _campaign_spec(f"c{next(_counter)}")}


async def case_campaign_validate(h: Harness) -> tuple[str, dict[str, Any]]:
    project, campaign = await _campaign(h)
    return f"/v1/projects/{project}/campaigns/{campaign}/validate", {"json": {"expected_version": 1}}


async def case_campaign_control(h: Harness) -> tuple[str, dict[str, Any]]:
    project, campaign = await _campaign(h, "ready")
    return f"/v1/projects/{project}/campaigns/{campaign}/start", {"json": {"expected_version": 2}}


async def case_campaign_conclude(h: Harness) -> tuple[str, dict[str, Any]]:
    project, campaign = await _campaign(h, "ready", "start")
    return f"/v1/projects/{project}/campaigns/{campaign}/conclude", {"json": {"expected_version": 3}}


async def case_campaign_propose(h: Harness) -> tuple[str, dict[str, Any]]:
    project, campaign = await _campaign(h)
    body = {"primary_variable": "learning_rate", "value": 1e-3, "rationale": "lower"}
    return f"/v1/projects/{project}/campaigns/{campaign}/propose", {"json": body}


async def case_campaign_queue(h: Harness) -> tuple[str, dict[str, Any]]:
    project, campaign = await _campaign(h)
    body = {"hypotheses": [{"primary_variable": "lora_rank", "value": 8, "rationale": "smaller"}]}
    return f"/v1/projects/{project}/campaigns/{campaign}/queue", {"json": body}


async def case_campaign_report(h: Harness) -> tuple[str, dict[str, Any]]:
    project, campaign = await _campaign(h)
    return f"/v1/projects/{project}/campaigns/{campaign}/reports", {"json": {"formats": ["md", "json"]}}


async def case_campaign_schedule(h: Harness) -> tuple[str, dict[str, Any]]:
    project, campaign = await _campaign(h)
    return f"/v1/projects/{project}/campaigns/{campaign}/schedule", {"json": {"cron": "0 9 * * 1"}}


async def case_model_export(h: Harness) -> tuple[str, dict[str, Any]]:
    project = await _project(h)
    version = {"model_version_id": "mv1", "model_id": "m", "source_uri": f"file://{h.tmp}/no-model-here"}
    version["files"] = [{"path": "a.bin", "sha256": digest("a"), "size_bytes": 1}]
    await h.admin_call("POST", f"/v1/projects/{project}/model-versions", json=version)
    return f"/v1/projects/{project}/model-versions/mv1/export", {"json": {"to": str(h.tmp / f"out{next(_counter)}")}}


async def case_model_import(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/model-versions/import", {
        "json": {"from_dir": str(h.tmp / "no-bundle-here")}
    }


async def case_evaluation_start(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    return f"/v1/projects/{project}/evaluations", {"json": {"run_id": run}}


async def case_evaluation_compare(h: Harness) -> tuple[str, dict[str, Any]]:
    project, baseline, candidate = await _results(h)
    body = {"baseline_result_id": baseline, "candidate_result_id": candidate}
    return f"/v1/projects/{project}/evaluations/compare", {"json": body}


async def case_runcard_create(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    return f"/v1/projects/{project}/runs/{run}/runcards", {"json": {"known_limitations": ["no evidence yet"]}}


async def case_run_model_version(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    body = {"model_version_id": f"mv-{next(_counter)}", "model_id": "m"}
    return f"/v1/projects/{project}/runs/{run}/model-version", {"json": body}


async def case_promote(h: Harness) -> tuple[str, dict[str, Any]]:
    project, run = await _run(h)
    return f"/v1/projects/{project}/runs/{run}/promote", {"json": {"alias": "champion"}}


async def _tagged(h: Harness, kind: str) -> str:
    """The path of a run, a model version or a campaign that carries tag team=nlp."""
    if kind == "run":
        project, entity = await _run(h)
        path = f"/v1/projects/{project}/runs/{entity}"
    elif kind == "model_version":
        project = await _versioned_project(h)
        path = f"/v1/projects/{project}/model-versions/mv"
    else:
        project, entity = await _campaign(h)
        path = f"/v1/projects/{project}/campaigns/{entity}"
    await h.admin_call("PUT", f"{path}/tags", json={"tags": {"team": "nlp"}})
    return path


def _labelling(kind: str, method: str, suffix: str) -> Case:
    """A tags or note write on an entity of `kind` (ledger.annotate)."""
    request: dict[str, Any] = {
        ("PUT", "tags"): {"json": {"tags": {"stage": "eval"}}},
        ("DELETE", "tags"): {"params": {"key": "team"}},
        ("PUT", "note"): {"json": {"text": "lr too high"}},
    }[(method, suffix)]

    async def case(h: Harness) -> tuple[str, dict[str, Any]]:
        return f"{await _tagged(h, kind)}/{suffix}", request

    return case


def _device_spec(h: Harness) -> dict[str, Any]:
    key = h.tmp / "id_ed25519"
    key.write_text("not a real key; the device is never reached\n")
    # Port 1 on loopback refuses at once: preflight records "not ready", bootstrap answers 503.
    return {"device_id": f"dev{next(_counter)}", "host": "127.0.0.1", "port": 1, "user": "u", "key_path": str(key)}


async def _device(h: Harness) -> str:
    spec = _device_spec(h)
    await h.admin_call("POST", "/v1/devices", json=spec)
    return str(spec["device_id"])


async def case_device_add(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/devices", {"json": _device_spec(h)}


def _sink_spec() -> dict[str, Any]:
    return {"name": f"sink{next(_counter)}", "url": "http://127.0.0.1:9/hook", "secret_env": "SINK_SECRET"}


async def case_sink_add(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/sinks", {"json": _sink_spec()}


async def case_sink_remove(h: Harness) -> tuple[str, dict[str, Any]]:
    spec = _sink_spec()
    await h.admin_call("POST", "/v1/sinks", json=spec)
    return f"/v1/sinks/{spec['name']}", {}


async def case_device_remove(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/devices/{await _device(h)}", {}


async def case_device_preflight(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/devices/{await _device(h)}/preflight", {}


async def case_device_bootstrap(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/devices/{await _device(h)}/bootstrap", {"json": {}}


def _group_spec(members: list[str]) -> dict[str, Any]:
    return {"group_id": f"grp{next(_counter)}", "members": members}


async def _group(h: Harness) -> str:
    spec = _group_spec([await _device(h), await _device(h)])
    await h.admin_call("POST", "/v1/device-groups", json=spec)
    return str(spec["group_id"])


async def case_device_group_add(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/device-groups", {"json": _group_spec([await _device(h), await _device(h)])}


async def case_device_group_remove(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/device-groups/{await _group(h)}", {}


async def case_device_group_preflight(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/device-groups/{await _group(h)}/preflight", {}  # its members refuse: "not ready" is recorded


def _cluster_spec(h: Harness) -> dict[str, Any]:
    return {"cluster_id": f"cl{next(_counter)}", "partition": "debug", "time_limit_min": 5, "shared_dir": str(h.tmp)}


async def case_cluster_add(h: Harness) -> tuple[str, dict[str, Any]]:
    return "/v1/clusters", {"json": _cluster_spec(h)}


async def case_cluster_remove(h: Harness) -> tuple[str, dict[str, Any]]:
    spec = _cluster_spec(h)
    await h.admin_call("POST", "/v1/clusters", json=spec)
    return f"/v1/clusters/{spec['cluster_id']}", {}


async def case_budget_change(h: Harness) -> tuple[str, dict[str, Any]]:
    return f"/v1/projects/{await _project(h)}/budget/limit", {"json": {"gpu_hours": 10, "runs": 5, "reason": "Q4"}}


CASES: dict[tuple[str, str], Case] = {
    **{
        (method, f"/v1/projects/{{project}}/{path}/{suffix}"): _labelling(kind, method, suffix)
        for kind, path in (
            ("run", "runs/{run_id}"),
            ("model_version", "model-versions/{version}"),
            ("campaign", "campaigns/{campaign_id}"),
        )
        for method, suffix in (("PUT", "tags"), ("DELETE", "tags"), ("PUT", "note"))
    },
    ("POST", "/v1/projects/{project}/budget/{kind}"): case_budget_change,
    ("POST", "/v1/training/start"): case_training_start,
    ("POST", "/v1/projects/{project}/runs/{run_id}/pause"): case_pause,
    ("POST", "/v1/projects/{project}/runs/{run_id}/resume"): case_resume,
    ("POST", "/v1/projects/{project}/runs/{run_id}/stop"): case_stop,
    ("POST", "/v1/tracked-runs"): case_tracked_open,
    ("POST", "/v1/projects/{project}/imports/mlflow"): case_mlflow_import,
    ("POST", "/v1/projects/{project}/tracked-runs/{run_id}/metrics"): _tracked(
        "metrics", json={"points": [{"metric": "train.loss", "step": 1, "value": 0.5}]}
    ),
    ("POST", "/v1/projects/{project}/tracked-runs/{run_id}/values"): _tracked("values", json={"params": {"lr": 0.1}}),
    ("PUT", "/v1/projects/{project}/tracked-runs/{run_id}/artifacts"): _tracked(
        "artifacts", params={"name": "checkpoint-1/config.json"}, content=b"{}"
    ),
    ("POST", "/v1/projects/{project}/tracked-runs/{run_id}/heartbeat"): _tracked("heartbeat", json={}),
    ("POST", "/v1/projects/{project}/tracked-runs/{run_id}/end"): _tracked("end", json={"status": "completed"}),
    ("POST", "/v1/training/plan"): case_training_plan,
    ("POST", "/v1/projects"): case_projects,
    ("POST", "/v1/projects/{project}/experiments"): case_experiments,
    ("POST", "/v1/projects/{project}/model-versions"): case_model_versions,
    ("POST", "/v1/projects/{project}/dataset-versions"): case_dataset_versions,
    ("POST", "/v1/projects/{project}/dataset-versions/from-blob"): case_dataset_from_blob,
    ("POST", "/v1/projects/{project}/environments"): case_environments,
    ("POST", "/v1/runs"): case_runs,
    ("POST", "/v1/projects/{project}/runs/{run_id}/transitions"): case_transitions,
    ("POST", "/v1/projects/{project}/metrics"): case_metrics,
    ("POST", "/v1/projects/{project}/artifacts"): case_artifacts,
    ("POST", "/v1/projects/{project}/eval-suites"): case_eval_suites,
    ("POST", "/v1/projects/{project}/eval-results"): case_eval_results,
    ("POST", "/v1/projects/{project}/comparisons"): case_comparisons,
    ("POST", "/v1/projects/{project}/decisions"): case_decisions,
    ("POST", "/v1/projects/{project}/aliases"): case_aliases,
    ("POST", "/v1/projects/{project}/budget-entries"): case_budget_entries,
    ("POST", "/v1/projects/{project}/reports"): case_reports,
    ("POST", "/v1/projects/{project}/annotations"): case_annotations,
    ("POST", "/v1/ledger/backup"): case_backup,
    ("PUT", "/v1/blobs"): case_blobs,
    ("PUT", "/v1/consumers/{name}/cursor"): case_cursor,
    ("POST", "/v1/auth/tokens"): case_issue_token,
    ("POST", "/v1/auth/tokens/{token_id}/revoke"): case_revoke_token,
    ("POST", "/v1/authority/grants"): case_grant,
    ("POST", "/v1/authority/grants/{grant_id}/revoke"): case_revoke_grant,
    ("POST", "/v1/devices"): case_device_add,
    ("DELETE", "/v1/devices/{device_id}"): case_device_remove,
    ("POST", "/v1/sinks"): case_sink_add,
    ("DELETE", "/v1/sinks/{name}"): case_sink_remove,
    ("POST", "/v1/devices/{device_id}/preflight"): case_device_preflight,
    ("POST", "/v1/devices/{device_id}/bootstrap"): case_device_bootstrap,
    ("POST", "/v1/device-groups"): case_device_group_add,
    ("DELETE", "/v1/device-groups/{group_id}"): case_device_group_remove,
    ("POST", "/v1/device-groups/{group_id}/preflight"): case_device_group_preflight,
    ("POST", "/v1/clusters"): case_cluster_add,
    ("DELETE", "/v1/clusters/{cluster_id}"): case_cluster_remove,
    ("POST", "/v1/projects/{project}/evaluations"): case_evaluation_start,
    ("POST", "/v1/projects/{project}/evaluations/compare"): case_evaluation_compare,
    ("POST", "/v1/projects/{project}/runs/{run_id}/runcards"): case_runcard_create,
    ("POST", "/v1/projects/{project}/runs/{run_id}/model-version"): case_run_model_version,
    ("POST", "/v1/projects/{project}/runs/{run_id}/promote"): case_promote,
    ("POST", "/v1/projects/{project}/model-versions/{version}/export"): case_model_export,
    ("POST", "/v1/projects/{project}/model-versions/import"): case_model_import,
    ("POST", "/v1/projects/{project}/campaigns"): case_campaign_create,
    ("POST", "/v1/projects/{project}/campaigns/{campaign_id}/validate"): case_campaign_validate,
    ("POST", "/v1/projects/{project}/campaigns/{campaign_id}/{action}"): case_campaign_control,
    ("POST", "/v1/projects/{project}/campaigns/{campaign_id}/conclude"): case_campaign_conclude,
    ("POST", "/v1/projects/{project}/campaigns/{campaign_id}/propose"): case_campaign_propose,
    ("POST", "/v1/projects/{project}/campaigns/{campaign_id}/queue"): case_campaign_queue,
    ("POST", "/v1/projects/{project}/campaigns/{campaign_id}/reports"): case_campaign_report,
    ("POST", "/v1/projects/{project}/campaigns/{campaign_id}/schedule"): case_campaign_schedule,
    ("PUT", "/v1/projects/{project}/channel"): case_channel_set,
    ("POST", "/v1/consumers/{name}/failures"): case_notice_failure,
    ("POST", "/v1/consumers/{name}/lease"): case_lease_take,
    ("DELETE", "/v1/consumers/{name}/lease"): case_lease_release,
    ("POST", "/v1/jobs/hf"): case_hf_job,
    ("POST", "/v1/compute/plans"): case_compute_plan,
    ("POST", "/v1/jobs/providers/{provider}"): case_provider_job,
    ("POST", "/v1/projects/{project}/jobs/{job_id}/cancel"): case_job_cancel,
}
