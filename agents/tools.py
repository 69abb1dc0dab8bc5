"""The tools of `bashgym mcp`: each is one daemon request (a waiting tool: one request, then polls of it), typed so
its JSON Schema says what to send, annotated so a client knows what it changes, and described so an agent knows
what it needs and what it never does. `TOOLS` lists them with the capability each needs; the server offers only
the ones the token's principal holds, and the daemon still decides every call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

from bashgym.agents import answers, compact
from bashgym.agents.daemon import Daemon, refusal
from bashgym.client.errors import ApiError, BashGymError
from bashgym.client.ids import resolve_id
from bashgym.client.models import BLOB_URI, DatasetFromBlob, ModelVersionSpec
from bashgym.client.specs import run_project
from bashgym.trainers.contracts.datasets import (
    ContractReport,
    format_report,
    validate_dataset,
    validate_request_data,
)
from bashgym.trainers.contracts.fields import request_from_recipe
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, ValidationError

Project = Annotated[str, Field(min_length=1, max_length=200)]  # the name says what it is: a listing spares it
RunId = Annotated[str, Field(min_length=1, max_length=200, description="run id, or a unique prefix of it")]
CampaignId = Annotated[str, Field(min_length=1, max_length=200)]
ResultId = Annotated[str, Field(min_length=1, max_length=200, description="result id (res-...), or a unique prefix")]
Reason = Annotated[str, Field(max_length=2000, description="why, recorded with the change")]
Confirm = Annotated[
    bool,
    Field(description="true once the person has said yes (a client that can ask them is asked)"),
]
DatasetVersion = Annotated[
    str | None,
    Field(max_length=200, description="a registered dataset version, instead of dataset_path"),
]
DatasetProject = Annotated[
    str | None, Field(max_length=200, description="the project holding dataset_version (default: the run's)")
]
OfficialProject = Annotated[
    str | None,
    Field(
        max_length=200,
        description="an official run in this project: with model_version and dataset_version (no base_model or "
        "tracking_context in the request)",
    ),
]
ModelVersion = Annotated[str | None, Field(max_length=200, description="the model version of `project` to train from")]
Experiment = Annotated[str | None, Field(max_length=200, description="experiment of `project` (default: its own)")]
TrainingRequest = Annotated[
    dict[str, Any],
    Field(
        description="method and its fields (learning_rate, max_steps, ...), compute_target; without project and "
        "versions: base_model, dataset_path (a local file is uploaded), tracking_context"
    ),
]
Detail = Annotated[bool, Field(description="the whole object instead of the compact answer")]
# Where an agent finds the whole ids of each kind.
LISTINGS = {"run": "list_runs", "eval_result": "list_evaluations", "campaign": "list_campaigns",
            "model_version": "get_experiment_context"}  # fmt: skip
RUN_ENDS = frozenset({"completed", "failed", "cancelled", "paused", "unknown"})
POLL_S = 1.0


@dataclass(frozen=True)
class Tool:
    name: str
    capability: str | None  # what the principal must hold for the tool to be offered; None: any principal
    run: Callable[..., Awaitable[Any]]  # answers a dict, or a model of agents/answers.py
    description: str
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


class Confirmation(BaseModel):
    confirm: bool = Field(description="true to go ahead")


async def confirmed(ctx: Context | None, confirm: bool, action: str) -> None:
    """A destructive action goes ahead on the person's yes. A client that can ask them (MCP elicitation) is asked,
    whatever `confirm` says: an agent cannot answer for the person. Only a client that cannot ask passes
    `confirm: true`, which the tool's description tells the agent to set only on the person's word."""
    capabilities = ctx.client_capabilities if ctx is not None else None
    if ctx is not None and capabilities is not None and capabilities.elicitation is not None:
        answer = await ctx.elicit(f"{action} Go ahead?", schema=Confirmation)
        if answer.action == "accept" and getattr(answer.data, "confirm", False):
            return
        raise ToolError(f"Not confirmed: {action} Nothing was done.")
    if not confirm:
        raise ToolError(
            f"{action} This cannot be undone: call the tool again with confirm: true once the person has said yes. "
            "Nothing was done."
        )


def build(daemon: Daemon) -> list[Tool]:
    """Every tool, bound to one daemon connection."""

    def p(project: str) -> str:
        return quote(project, safe="")

    async def get(path: str, **params: Any) -> Any:
        return await daemon.call("GET", path, params=params)

    async def post(path: str, body: Any = None, *, key: str | None = None, **params: Any) -> Any:
        return await daemon.call(
            "POST", path, body=body if body is not None else {}, params=params, idempotency_key=key
        )

    async def whole(project: str, value: str, kind: str) -> str:
        """The whole id a unique prefix stands for (client/ids.py, as in the CLI), or a tool error that says why."""
        try:
            return await resolve_id(
                daemon.client, value, kind=kind, workspace=daemon.workspace, project=project, strict=kind != "campaign"
            )
        except BashGymError as exc:
            raise ToolError(f"{exc.message} Next: {exc.hint} {LISTINGS[kind]} names them.") from exc

    async def run_path(project: str, run_id: str, tail: str = "") -> str:
        return f"/v1/projects/{p(project)}/runs/{p(await whole(project, run_id, 'run'))}{tail}"

    # -- the four the platform contract names ------------------------------------------------------------------

    async def list_experiment_projects() -> answers.Projects:
        return answers.Projects.model_validate({"projects": await get("/v1/projects")})

    async def get_experiment_context(project: Project, detail: Detail = False) -> answers.Context:
        record = await get(f"/v1/projects/{p(project)}/context")
        return answers.Context.model_validate(record if detail else compact.context(record))

    async def get_experiment_run(project: Project, run_id: RunId, detail: Detail = False) -> answers.Run:
        record = await get(await run_path(project, run_id, ""))
        return answers.Run.model_validate(record if detail else compact.run(record))

    async def start_training(
        request: TrainingRequest,
        idempotency_key: Annotated[
            str | None,
            Field(
                max_length=200,
                description="a retried call with the same key launches once",
            ),
        ] = None,
        wait: Annotated[bool, Field(description="wait for the run to end, reporting progress")] = False,
        dataset_version: DatasetVersion = None,
        dataset_project: DatasetProject = None,
        project: OfficialProject = None,
        model_version: ModelVersion = None,
        experiment: Experiment = None,
        ctx: Context | None = None,
    ) -> answers.Started:
        body = await _uploaded(daemon, request, project)
        data = {
            "dataset_version": dataset_version,
            "dataset_project": dataset_project,
            **official(project, model_version, experiment),
        }
        started = dict(await post("/v1/training/start", body, key=idempotency_key, **data))
        if started.get("replayed"):  # a retried launch: what its run is now, not what it was when first answered
            run = await get(f"/v1/projects/{p(started['project_id'])}/runs/{p(started['run_id'])}")
            started["status"] = run["status"]
        if started.get("project_id") == "unassigned" or started.get("context_status") == "unassigned":
            started["note"] = (
                "No complete tracking context: the run is recorded under project `unassigned`, not an official run "
                "(the gate never ships it). Name project, model_version and dataset_version to make it official."
            )
        if wait:
            started["run"] = compact.run(await _follow_run(daemon, started["project_id"], started["run_id"], ctx))
            started["status"] = started["run"]["status"]
        return answers.Started.model_validate(started)

    # -- training ---------------------------------------------------------------------------------------------

    async def plan_training(
        request: TrainingRequest,
        dataset_version: DatasetVersion = None,
        dataset_project: DatasetProject = None,
        project: OfficialProject = None,
        model_version: ModelVersion = None,
        experiment: Experiment = None,
        detail: Detail = False,
    ) -> answers.Plan:
        data = {"dataset_version": dataset_version, "dataset_project": dataset_project}
        data |= official(project, model_version, experiment)
        body = await _uploaded(daemon, request, project)
        planned = await post("/v1/training/plan", body, **data)
        return answers.Plan.model_validate(planned if detail else compact.plan(planned))

    async def validate_training_data(
        method: Annotated[str, Field(description="sft, dpo, grpo, rlvr, distillation or session_distillation")],
        path: Annotated[str, Field(max_length=4096, description="a JSONL file on this machine")],
    ) -> ContractReport:
        try:
            report = await asyncio.to_thread(validate_dataset, method, Path(path).expanduser())
        except (OSError, ValueError) as exc:
            raise ToolError(f"{exc} Next: name a readable JSONL file on this machine.") from exc
        return report

    async def list_runs(
        project: Project,
        status: Annotated[str | None, Field(description="queued, running, completed, failed, ...")] = None,
        method: Annotated[str | None, Field(description="sft, dpo, grpo, ...")] = None,
        experiment: Annotated[str | None, Field(description="experiment id")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
        tag: Annotated[list[str] | None, Field(max_length=20, description="key=value or key")] = None,
    ) -> answers.Runs:
        runs = await get(
            f"/v1/projects/{p(project)}/runs", status=status, method=method, experiment=experiment, limit=limit, tag=tag
        )
        return answers.Runs.model_validate({"runs": compact.rows(runs)})

    async def get_run_log(
        project: Project, run_id: RunId, tail: Annotated[int, Field(ge=1, le=5000)] = 200
    ) -> answers.Log:
        return answers.Log.model_validate(await get(await run_path(project, run_id, "/log"), tail=tail))

    async def pause_run(project: Project, run_id: RunId) -> answers.RunControl:
        return answers.RunControl.model_validate(await post(await run_path(project, run_id, "/pause")))

    async def resume_run(project: Project, run_id: RunId) -> answers.RunControl:
        return answers.RunControl.model_validate(await post(await run_path(project, run_id, "/resume")))

    async def stop_run(
        project: Project, run_id: RunId, confirm: Confirm = False, ctx: Context | None = None
    ) -> answers.RunControl:
        await confirmed(ctx, confirm, f"Stop run {run_id}: it ends cancelled and cannot be resumed.")
        return answers.RunControl.model_validate(await post(await run_path(project, run_id, "/stop")))

    async def get_metric_trend(
        project: Project,
        metric: Annotated[str, Field(min_length=1, max_length=200, description="e.g. train.loss")],
        run_id: Annotated[str | None, Field(description="one run's points; without it each run's latest")] = None,
    ) -> answers.Trend:
        return answers.Trend.model_validate(
            await get(
                f"/v1/projects/{p(project)}/trend", metric=metric, run=run_id and await whole(project, run_id, "run")
            )
        )

    async def list_events(
        project: Project,
        after_cursor: Annotated[int, Field(ge=0, description="events after this cursor (0: from the start)")] = 0,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> answers.Events:
        return answers.Events.model_validate(
            await get(f"/v1/projects/{p(project)}/events", after_cursor=after_cursor, limit=limit)
        )

    # -- evidence ---------------------------------------------------------------------------------------------

    async def run_evaluation(
        project: Project,
        suite_id: Annotated[str, Field(max_length=200)] = "bash-tasks-v1",
        run_id: Annotated[str | None, Field(description="evaluate this completed run's model")] = None,
        model_version_id: Annotated[str | None, Field(description="or a registered model version")] = None,
        gold: Annotated[bool, Field(description="or the suite's gold solutions (checks the suite)")] = False,
        samples: Annotated[int, Field(ge=1, le=64)] = 1,
        limit_tasks: Annotated[int | None, Field(ge=2, description="N tasks round-robin across families")] = None,
        dataset_path: Annotated[
            str | None,
            Field(
                max_length=4000,
                description="held-out rows instead of the suite (a local file is uploaded): a policy's rows, a "
                "reward model's pairs or a retriever's queries",
            ),
        ] = None,
        corpus_path: Annotated[
            str | None,
            Field(max_length=4000, description="a retriever's documents, with dataset_path"),
        ] = None,
        detail: Detail = False,
        ctx: Context | None = None,
    ) -> answers.EvaluationResult:
        body = {
            "suite_id": suite_id,
            "run_id": run_id and await whole(project, run_id, "run"),
            "model_version_id": model_version_id and await whole(project, model_version_id, "model_version"),
            "gold": gold,
            "samples": samples,
            "limit_tasks": limit_tasks,
            "dataset_path": await _uploaded_file(daemon, project, dataset_path),
            "corpus_path": await _uploaded_file(daemon, project, corpus_path),
        }
        job = dict(await post(f"/v1/projects/{p(project)}/evaluations", body))
        while job["status"] in {"queued", "running"}:
            await asyncio.sleep(POLL_S / 2)
            job = dict(await get(f"/v1/projects/{p(project)}/evaluations/{p(job['evaluation_id'])}"))
            if ctx is not None and job.get("total"):
                await ctx.report_progress(job["done"], job["total"], f"{job['done']}/{job['total']} tasks")
        if job["status"] != "completed":
            raise ToolError(f"Evaluation {job['evaluation_id']} ended {job['status']}: {job.get('error') or ''}")
        listing = await get(f"/v1/projects/{p(project)}/evaluations", suite=job["suite_id"])
        result = next(r for r in listing["results"] if r["result_id"] == job["result_id"])
        return answers.EvaluationResult.model_validate(result if detail else compact.result(result))

    async def create_project(
        project_id: Annotated[str, Field(min_length=1, max_length=128, description="the new project's id")],
        name: Annotated[str, Field(min_length=1, max_length=200, description="its display name")],
        description: Annotated[str, Field(max_length=2000)] = "",
        profile: Annotated[
            Literal["default", "embedding_retrieval"], Field(description="embedding_retrieval trains retrievers only")
        ] = "default",
    ) -> answers.Written:
        body = {"project_id": project_id, "name": name, "description": description, "profile": profile}
        return answers.Written.model_validate(await post("/v1/projects", body))

    async def create_experiment(
        project: Project,
        experiment_id: Annotated[str, Field(min_length=1, max_length=128, description="the new experiment's id")],
        name: Annotated[str, Field(min_length=1, max_length=200)],
        objective: Annotated[str, Field(min_length=1, max_length=2000, description="what it tries to find out")],
        task_type: Annotated[str, Field(min_length=1, max_length=200, description="e.g. terminal_agent_sft")],
    ) -> answers.Written:
        """An official run's tracking context states its experiment's objective and task type: both are asked."""
        body = {"experiment_id": experiment_id, "name": name, "objective": objective, "task_type": task_type}
        return answers.Written.model_validate(await post(f"/v1/projects/{p(project)}/experiments", body))

    async def register_dataset_version(
        project: Project,
        dataset_id: Annotated[str, Field(min_length=1, max_length=128)],
        dataset_version_id: Annotated[str, Field(min_length=1, max_length=128)],
        path: Annotated[str, Field(max_length=4096, description="a JSONL file on this machine (uploaded)")],
    ) -> answers.Written:
        file = Path(path).expanduser()
        if not await asyncio.to_thread(file.is_file):
            raise ToolError(f"{path} is not a file on this machine. Next: name the dataset's JSONL file.")
        try:
            stored = await daemon.client.blob_upload(file, project=project, workspace=daemon.workspace)
        except ApiError as exc:
            raise ToolError(refusal(exc)) from exc
        spec = DatasetFromBlob(
            dataset_id=dataset_id, dataset_version_id=dataset_version_id, sha256=stored["sha256"], filename=file.name
        )
        return answers.Written.model_validate(
            await post(f"/v1/projects/{p(project)}/dataset-versions/from-blob", spec.model_dump())
        )

    async def register_model_version(
        project: Project,
        model_id: Annotated[str, Field(min_length=1, max_length=128)],
        model_version_id: Annotated[str, Field(min_length=1, max_length=128)],
        directory: Annotated[
            str | None, Field(max_length=4096, description="a saved model directory on this machine (uploaded)")
        ] = None,
        hub_id: Annotated[
            str | None, Field(max_length=200, description="a Hub model id (recorded, not fetched)")
        ] = None,
        revision: Annotated[str, Field(max_length=200, description="the Hub commit sha or tag; with hub_id")] = "",
        kind: Literal["causal_lm", "reward_model", "embedding_retriever"] = "causal_lm",
    ) -> answers.Written:
        if (directory is None) == (hub_id is None):
            raise ToolError("Name exactly one of directory and hub_id. Next: a directory of saved weights here, or a "
                            "Hub id with its revision.")  # fmt: skip
        if hub_id is not None:
            if not revision:
                raise ToolError(
                    "hub_id needs revision: an id alone does not pin the weights. Next: add the commit sha."
                )
            spec = ModelVersionSpec(
                model_version_id=model_version_id,
                model_id=model_id,
                source_uri=f"hf://{hub_id}",
                source_revision=revision,
                kind=kind,
            )
        else:
            try:
                spec = await daemon.client.model_dir_spec(
                    Path(str(directory)).expanduser(),
                    project=project,
                    workspace=daemon.workspace,
                    model_id=model_id,
                    version_id=model_version_id,
                )
            except ApiError as exc:
                raise ToolError(refusal(exc)) from exc
            except BashGymError as exc:
                raise ToolError(f"{exc.message} Next: {exc.hint}") from exc
            spec = spec.model_copy(update={"kind": kind})
        return answers.Written.model_validate(
            await post(f"/v1/projects/{p(project)}/model-versions", spec.model_dump(mode="json"))
        )

    async def register_run_model(
        project: Project,
        run_id: Annotated[str, Field(max_length=200, description="a completed run of the project")],
        model_version_id: Annotated[str, Field(max_length=128, description="the new model version id")],
        model_id: Annotated[str, Field(max_length=128, description="the model id the version belongs to")],
    ) -> answers.Written:
        body = {"model_version_id": model_version_id, "model_id": model_id}
        return answers.Written.model_validate(await post(await run_path(project, run_id, "/model-version"), body))

    async def list_evaluations(
        project: Project,
        suite_id: Annotated[str | None, Field(description="only this suite")] = None,
        detail: Detail = False,
    ) -> answers.Evaluations:
        listing = await get(f"/v1/projects/{p(project)}/evaluations", suite=suite_id)
        return answers.Evaluations.model_validate(listing if detail else compact.evaluations(listing))

    async def compare_results(
        project: Project,
        baseline_result_id: ResultId,
        candidate_result_id: ResultId,
        resamples: Annotated[int, Field(ge=100, le=100_000)] = 2000,
    ) -> answers.Comparison:
        body = {
            "baseline_result_id": await whole(project, baseline_result_id, "eval_result"),
            "candidate_result_id": await whole(project, candidate_result_id, "eval_result"),
            "resamples": resamples,
        }
        return answers.Comparison.model_validate(await post(f"/v1/projects/{p(project)}/evaluations/compare", body))

    async def create_runcard(
        project: Project,
        run_id: RunId,
        known_limitations: Annotated[list[Annotated[str, Field(max_length=2000)]], Field(max_length=50)],
        claim_tier: Literal["local_smoke", "narrow", "broad"] | None = None,
        decision: Literal["pending", "hold", "promote", "reject"] = "pending",
    ) -> answers.Written:
        body: dict[str, Any] = {"known_limitations": known_limitations, "decision": decision}
        if claim_tier:
            body["claim_tier"] = claim_tier
        return answers.Written.model_validate(await post(await run_path(project, run_id, "/runcards"), body))

    async def show_runcards(project: Project, run_id: RunId) -> answers.RunCards:
        return answers.RunCards.model_validate(await get(await run_path(project, run_id, "/runcards")))

    async def promotion_gate(project: Project, run_id: RunId) -> answers.Gate:
        return answers.Gate.model_validate(await get(await run_path(project, run_id, "/gate"), asked_by="mcp"))

    async def promote_decide(
        project: Project,
        run_id: RunId,
        alias: Annotated[str, Field(max_length=200)] = "champion",
        model_version_id: Annotated[str | None, Field(description="default: the run's own model")] = None,
        override_reason: Annotated[
            str | None, Field(max_length=2000, description="promote despite blockers (needs promotion.override)")
        ] = None,
        confirm: Confirm = False,
        ctx: Context | None = None,
    ) -> answers.Promotion:
        await confirmed(ctx, confirm, f"Point alias {alias} at run {run_id}'s model (recorded as a decision).")
        version = model_version_id and await whole(project, model_version_id, "model_version")
        body = {"alias": alias, "model_version_id": version, "override_reason": override_reason}
        return answers.Promotion.model_validate(await post(await run_path(project, run_id, "/promote"), body))

    # -- campaigns and research -------------------------------------------------------------------------------

    def campaigns(project: str, campaign_id: str = "") -> str:
        return f"/v1/projects/{p(project)}/campaigns" + (f"/{p(campaign_id)}" if campaign_id else "")

    async def list_campaigns(project: Project) -> answers.Campaigns:
        return answers.Campaigns.model_validate(await get(campaigns(project)))

    async def get_campaign(project: Project, campaign_id: CampaignId) -> answers.Campaign:
        campaign = dict(await get(campaigns(project, campaign_id)))
        campaign["iterations"] = (await get(campaigns(project, campaign_id) + "/iterations"))["iterations"]
        return answers.Campaign.model_validate(campaign)

    async def create_campaign(
        project: Project,
        spec: Annotated[dict[str, Any], Field(description="the campaign spec, as `bashgym campaign create` reads it")],
    ) -> answers.Written:
        return answers.Written.model_validate(await post(campaigns(project), spec))

    async def campaign_action(
        project: Project,
        campaign_id: CampaignId,
        action: Literal["validate", "start", "pause", "resume"],
        expected_version: Annotated[int | None, Field(ge=1, description="refuse unless at this version")] = None,
        reason: Reason = "",
    ) -> answers.CampaignMove:
        return await move_campaign(project, campaign_id, action, reason, expected_version)

    async def move_campaign(
        project: str, campaign_id: str, action: str, reason: str, expected_version: int | None = None
    ) -> answers.CampaignMove:
        """One guarded transition: at the version the caller saw, or the campaign's current one."""
        version = expected_version or (await get(campaigns(project, campaign_id)))["version"]
        body = {"expected_version": version, "reason": reason}
        return answers.CampaignMove.model_validate(await post(campaigns(project, campaign_id) + f"/{action}", body))

    async def cancel_campaign(
        project: Project,
        campaign_id: CampaignId,
        reason: Reason = "",
        confirm: Confirm = False,
        ctx: Context | None = None,
    ) -> answers.CampaignMove:
        await confirmed(ctx, confirm, f"Cancel campaign {campaign_id}: a terminal state.")
        return await move_campaign(project, campaign_id, "cancel", reason)

    async def conclude_campaign(
        project: Project,
        campaign_id: CampaignId,
        reason: Reason = "",
        confirm: Confirm = False,
        ctx: Context | None = None,
    ) -> answers.CampaignMove:
        await confirmed(ctx, confirm, f"Conclude campaign {campaign_id} as completed: a terminal state.")
        return await move_campaign(project, campaign_id, "conclude", reason)

    async def propose_candidate(
        project: Project,
        campaign_id: CampaignId,
        primary_variable: Annotated[str, Field(min_length=1, max_length=100, description="the one field changed")],
        value: Annotated[Any, Field(description="its new value")],
        rationale: Annotated[str, Field(min_length=1, max_length=2000)],
    ) -> answers.Written:
        body = {"primary_variable": primary_variable, "value": value, "rationale": rationale}
        return answers.Written.model_validate(await post(campaigns(project, campaign_id) + "/propose", body))

    async def create_campaign_report(project: Project, campaign_id: CampaignId) -> answers.Report:
        return answers.Report.model_validate(await post(campaigns(project, campaign_id) + "/reports", {}))

    async def campaign_doctor(project: Project, campaign_id: CampaignId) -> answers.Checks:
        return answers.Checks.model_validate(await get(campaigns(project, campaign_id) + "/doctor"))

    async def research_state(project: Project, campaign_id: CampaignId) -> answers.ResearchState:
        return answers.ResearchState.model_validate(await get(campaigns(project, campaign_id) + "/state"))

    async def research_wait(
        project: Project,
        campaign_id: CampaignId,
        after_cursor: Annotated[int, Field(ge=0, description="the cursor research_state or the last wait gave")] = 0,
        timeout_s: Annotated[float, Field(ge=0, le=600, description="the most to wait, in seconds")] = 60,
        ctx: Context | None = None,
    ) -> answers.Wait:
        started = time.monotonic()
        while True:  # in slices, so progress is reported and a cancelled call stops waiting promptly
            left = timeout_s - (time.monotonic() - started)
            answer = dict(
                await get(
                    campaigns(project, campaign_id) + "/wait",
                    after_cursor=after_cursor,
                    timeout=max(0.0, min(left, 10.0)),
                )
            )
            if answer.get("outcome") != "timeout" or left <= 10.0:
                return answers.Wait.model_validate(answer)
            if ctx is not None:
                await ctx.report_progress(time.monotonic() - started, timeout_s, "waiting for the campaign to change")

    # -- budget, devices, the workspace -----------------------------------------------------------------------

    async def budget_show(
        project: Project, scope: Annotated[str, Field(description="project, or campaign-<id>")] = "project"
    ) -> answers.Budget:
        return answers.Budget.model_validate(await get(f"/v1/projects/{p(project)}/budget", scope=scope))

    async def amend_budget(
        project: Project,
        reason: Annotated[str, Field(min_length=1, max_length=2000)],
        runs: int = 0,
        gpu_hours: float = 0.0,
        scope: Annotated[str, Field(description="project, or campaign-<id>")] = "project",
        confirm: Confirm = False,
        ctx: Context | None = None,
    ) -> answers.Budget:
        await confirmed(
            ctx, confirm, f"Amend the {scope} budget of {project} by {runs} runs and {gpu_hours} GPU-hours."
        )
        body = {"runs": runs, "gpu_hours": gpu_hours, "reason": reason, "scope": scope}
        return answers.Budget.model_validate(await post(f"/v1/projects/{p(project)}/budget/amend", body))

    async def list_devices() -> answers.Devices:
        listing, clusters = await get("/v1/devices"), await get("/v1/clusters")
        devices = listing.get("devices", []) if isinstance(listing, dict) else listing
        return answers.Devices(devices=devices, clusters=clusters.get("clusters", []))

    async def preflight_device(device_id: Annotated[str, Field(min_length=1, max_length=200)]) -> answers.Preflight:
        return answers.Preflight.model_validate(await post(f"/v1/devices/{p(device_id)}/preflight"))

    async def doctor() -> answers.Doctor:
        return answers.Doctor.model_validate(await get("/v1/doctor"))

    async def whoami() -> answers.Principal:
        return answers.Principal.model_validate(await get("/v1/auth/whoami"))

    read = {"read_only": True, "idempotent": True}
    return [
        Tool("list_experiment_projects", "ledger.read", list_experiment_projects,
             "The projects this token may read, with names. Start here: every other tool names a project.", **read),
        Tool("get_experiment_context", "ledger.read", get_experiment_context,
             "A project at a glance: signals, inventory, lineage and aliases, recent runs, evaluations, "
             "decisions.", **read),
        Tool("get_experiment_run", "ledger.read", get_experiment_run,
             "One run: status, context, key metrics, evaluations, latest attempt; detail: true for all of it.",
             **read),
        Tool("start_training", "training.launch", start_training,
             "Launch a training run; answers its ids, or with wait: true follows it to its end (cancelling stops "
             "the waiting, not the run). Official: name project, model_version and dataset_version; else it is "
             "recorded under `unassigned`, which never ships. An idempotency_key makes a retry a replay (replayed: "
             "true, status now). plan_training first."),
        Tool("plan_training", "training.launch", plan_training,
             "Check a launch (as start_training takes it): ready, reasons, lane; launches nothing.", idempotent=True),
        Tool("validate_training_data", None, validate_training_data,
             "Check a local JSONL file against a method's data contract, naming each bad line; sends nothing.",
             **read),
        Tool("list_runs", "ledger.read", list_runs, "A project's runs, newest first, filtered by status, method, "
             "experiment or tag.", **read),
        Tool("get_run_log", "ledger.read", get_run_log, "The last lines of a run's training.log (redacted).", **read),
        Tool("pause_run", "training.control", pause_run, "Pause a running run (training.control); resume_run "
             "continues it from its last checkpoint.", idempotent=True),
        Tool("resume_run", "training.control", resume_run, "Resume a paused run (training.control).",
             idempotent=True),
        Tool("stop_run", "training.stop", stop_run, "Stop a run: it ends cancelled. Asks to confirm "
             "(confirm: true).", destructive=True, idempotent=True),
        Tool("get_metric_trend", "ledger.read", get_metric_trend, "A metric's points and summary (count, first, "
             "latest, min, max, delta, slope) for one run, or each run's latest value.", **read),
        Tool("list_events", "ledger.read", list_events, "A page of a project's ledger events after a cursor; "
             "next_cursor continues it.", **read),
        Tool("run_evaluation", "eval.run", run_evaluation, "Evaluate a completed run, a model version or the gold "
             "solutions on a suite, with progress; answers the result's metrics.",
             idempotent=False),
        Tool("create_project", "ledger.write", create_project, "Create a project (ledger.write); a token scoped to "
             "projects may create only those.", idempotent=True),
        Tool("create_experiment", "ledger.write", create_experiment, "Create an experiment of a project "
             "(ledger.write); a launch names it with `experiment`.", idempotent=True),
        Tool("register_dataset_version", "ledger.write", register_dataset_version, "Upload a local JSONL file and "
             "record it as a dataset version (start_training's dataset_version).", idempotent=True),
        Tool("register_model_version", "ledger.write", register_model_version, "Record a model version from a "
             "local saved directory (uploaded) or a Hub id at a revision (start_training's model_version).",
             idempotent=True),
        Tool("register_run_model", "ledger.write", register_run_model, "Keep a completed run's model as a model "
             "version of its project (a reward model's is what GRPO's grpo_reward_model names).", idempotent=True),
        Tool("list_evaluations", "ledger.read", list_evaluations, "A project's evaluation suites, results and "
             "comparisons.", **read),
        Tool("compare_results", "eval.run", compare_results, "The paired bootstrap 95% CI of the candidate's "
             "pass@1 delta against a baseline result on the exact same suite.", idempotent=True),
        Tool("create_runcard", "runcard.write", create_runcard, "Record an immutable RunCard of a run's evidence "
             "(runcard.write), with its known limitations and claim tier.", idempotent=True),
        Tool("show_runcards", "ledger.read", show_runcards, "A run's RunCards, newest first, and what happened "
             "since (the last gate verdict, decisions, aliases moved).", **read),
        Tool("promotion_gate", "ledger.read", promotion_gate, "Does the run ship? Blockers with codes and next "
             "actions; the verdict is recorded once per state of the evidence. Never promotes.", idempotent=True),
        Tool("promote_decide", "promotion.decide", promote_decide, "Point an alias (champion) at the run's model "
             "when the gate ships; blockers need promotion.override and a reason. Asks to confirm (confirm: true).",
             destructive=True),
        Tool("list_campaigns", "ledger.read", list_campaigns, "A project's campaigns and their states.", **read),
        Tool("get_campaign", "ledger.read", get_campaign, "A campaign's state, version, pinned spec and each "
             "iteration's decision.", **read),
        Tool("create_campaign", "campaign.create", create_campaign, "Create a draft campaign from a spec; "
             "campaign_action validate, then start. `kind: cascade` with 2-8 `stages` (recipe and dataset version) "
             "trains each from the previous stage's model, stopping at a blocked gate.", idempotent=True),
        Tool("campaign_action", "campaign.control", campaign_action, "Validate, start, pause or resume a campaign "
             "(campaign.control), guarded by its version."),
        Tool("cancel_campaign", "campaign.control", cancel_campaign, "Cancel a campaign: terminal. Asks to confirm "
             "(confirm: true).", destructive=True),
        Tool("conclude_campaign", "campaign.conclude", conclude_campaign, "Conclude a campaign as completed: "
             "terminal. Asks to confirm (confirm: true).",
             destructive=True),
        Tool("propose_candidate", "campaign.control", propose_candidate, "Add one candidate to a search campaign: "
             "exactly one changed variable and its rationale (campaign.control); a cascade's stages are its spec's."),
        Tool("create_campaign_report", "campaign.control", create_campaign_report, "Render the campaign report "
             "(Markdown, PNG charts, JSON) and record it; read its files as resources."),
        Tool("campaign_doctor", "ledger.read", campaign_doctor, "Why a campaign cannot move: each check with its "
             "reason.", **read),
        Tool("research_state", "ledger.read", research_state, "Where a campaign stands: phase, incumbent, latest "
             "decision and comparison, budget, next action.", **read),
        Tool("research_wait", "ledger.read", research_wait, "Wait (at most timeout_s) for the campaign to change "
             "after a cursor: terminal, action_required, changed or timeout, with progress while it waits.",
             **read),
        Tool("budget_show", "ledger.read", budget_show, "Limits, amendments, reservations, settled use and what "
             "remains.", **read),
        Tool("amend_budget", "budget.amend", amend_budget, "Amend a budget up or down, "
             "with a reason. Asks to confirm (confirm: true).", destructive=True),
        Tool("list_devices", "ledger.read", list_devices, "Registered SSH devices with their last preflight "
             "verdict, and Slurm clusters (target slurm:<cluster_id>).", **read),
        Tool("preflight_device", "device.manage", preflight_device, "Check python, bashgym, torch, GPUs, disk "
             "and RAM on a device (device.manage).", idempotent=True),
        Tool("doctor", None, doctor, "Is everything ready: daemon, ledger, authority, lanes, Discord, scheduler.",
             **read),
        Tool("whoami", None, whoami, "Who this token acts as, and its capabilities.", **read),
    ]  # fmt: skip


def official(project: str | None, model_version: str | None = None, experiment: str | None = None) -> dict[str, Any]:
    """The query of a launch that names its project and registered versions (the daemon composes the context)."""
    return {"project": project, "model_version": model_version, "experiment": experiment} if project else {}


async def _uploaded(daemon: Daemon, request: dict[str, Any], named: str | None = None) -> dict[str, Any]:
    """The request with its local data files uploaded for the project the run will be recorded under (`named`, or
    its tracking context's): the daemon reads no path of this machine's (a path it may read itself, or a hub id,
    is sent as it is)."""
    body = dict(request)
    workspace = daemon.workspace or "default"
    context = body.get("tracking_context")
    project = named or run_project(context if isinstance(context, dict) else None, workspace)
    for field in ("dataset_path", "eval_dataset_path"):
        value = body.get(field)
        if isinstance(value, str) and not value.startswith(BLOB_URI) and Path(value).expanduser().is_file():
            # Nothing leaves this machine for a request the daemon would refuse: its fields, then the data.
            refused = await asyncio.to_thread(_upload_refusal, {**body, field: str(Path(value).expanduser())}, field)
            if refused:
                raise ToolError(f"{refused} Nothing was uploaded or launched.")
            try:
                stored = await daemon.client.blob_upload(
                    Path(value).expanduser(), project=project, workspace=daemon.workspace
                )
            except ApiError as exc:
                raise ToolError(refusal(exc)) from exc
            body[field] = f"{BLOB_URI}{stored['sha256']}"
    return body


async def _uploaded_file(daemon: Daemon, project: str, value: str | None) -> str | None:
    """A file of this machine's, uploaded for `project` and named by its blob; anything else is sent as it is
    (a path the daemon may read itself, which it confines)."""
    if value is None or value.startswith(BLOB_URI) or not Path(value).expanduser().is_file():
        return value
    try:
        stored = await daemon.client.blob_upload(Path(value).expanduser(), project=project, workspace=daemon.workspace)
    except ApiError as exc:
        raise ToolError(refusal(exc)) from exc
    return f"{BLOB_URI}{stored['sha256']}"


async def _follow_run(daemon: Daemon, project: str, run_id: str, ctx: Context | None) -> dict[str, Any]:
    """Poll the run until it stops moving, reporting its step against its planned steps."""
    path = f"/v1/projects/{quote(project, safe='')}/runs/{quote(run_id, safe='')}"
    while True:
        run = dict(await daemon.call("GET", path))
        if run["status"] in RUN_ENDS:
            return run
        if ctx is not None:
            summary = run.get("metric_summary") or {}
            step = max((int(s.get("last_step") or 0) for s in summary.values()), default=0)
            total = (run.get("config") or {}).get("max_steps")
            planned = float(total) if isinstance(total, int) and total > 0 else None
            await ctx.report_progress(
                step, planned, f"{run['status']}: step {step}" + (f" of {total}" if planned else "")
            )
        await asyncio.sleep(POLL_S)


def _upload_refusal(request: dict[str, Any], field: str) -> str | None:
    """Why the local file `request[field]` must not be uploaded: the request's own fields first (every problem),
    then the data's contract for its method, each line named; None when it may go."""
    try:
        parsed = request_from_recipe(request)
    except ValidationError as exc:
        problems = [
            f"`{'.'.join(str(p) for p in e['loc'])}`: {str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        ]
        return f"{len(problems)} problems in the request: {'; '.join(problems)}."
    except ValueError as exc:
        return str(exc)
    report = validate_request_data(parsed, Path(str(request[field])))
    if report.ok:
        return None
    return f"The data breaks the {parsed.method} contract:\n{format_report(report)}"
