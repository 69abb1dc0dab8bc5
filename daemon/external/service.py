"""External jobs: submit a training request to someone else's compute, follow it, import what it made.

Each job is an ordinary run (so it is evaluated, compared, carded and gated like a local one) plus an external
job row that keeps its upstream identity. The order of writes is the operator contract's:

1. Every check that can refuse runs first (token, write access, flavor, the dataset the job reads, the budget
   against the job's cost ceiling); a refusal records nothing.
2. The run and the job are recorded `submitting`, with the ceiling reserved in the budget.
3. The upstream is called. Its id proves the submission (`submitted`). A transient failure leaves the job
   `unknown`: it is then looked up by its label (Hub) or metadata (providers), never submitted again.
4. A follower polls the upstream: states, log lines and metrics become observations; only log or metric evidence
   proves compute started; the run's status follows. On completion the Hub job's pushed commit is imported (every
   file checked against its digest) and registered as the run's model version; a provider's model id is recorded.

A daemon that stops leaves the jobs running upstream; the next start follows each open job again from the ledger.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from pathlib import Path
from typing import Any

from bashgym.client.errors import BashGymError, Conflict, Forbidden, InvalidInput, NotFound, RuleRejected
from bashgym.client.external import (
    ExternalJobSpec,
    ExternalObservation,
    HfJobSubmission,
    ProviderJobSubmission,
)
from bashgym.client.specs import (
    UNASSIGNED,
    Actor,
    BudgetEntrySpec,
    RunRegistration,
    context_in_workspace,
)
from bashgym.client.validation import canonical_json, sha256_text
from bashgym.daemon.blobs import file_digest
from bashgym.daemon.external.follow import SYSTEM, Followers, where
from bashgym.daemon.external.hf_jobs import HubJobs, UpstreamError, job_spec
from bashgym.daemon.external.hub_access import (
    check_job_token,
    check_job_token_value,
    check_no_command_checks,
    job_image,
    job_token_problem,
    job_token_value_problem,
    reader_for,
    unreadable,
)
from bashgym.daemon.external.providers import METADATA_KEY, METHOD_TYPES, Provider, provider_rows
from bashgym.daemon.failpoints import reach
from bashgym.daemon.launch.trackers import refuse_report_to
from bashgym.daemon.settings import Settings
from bashgym.daemon.version import bashgym_version
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import new_id
from bashgym.trainers.contracts.datasets import JUDGED_TASK_CHECK, format_report, validate_request_data
from bashgym.trainers.contracts.external_job import (
    owner_marker,
)
from bashgym.trainers.contracts.request import TrainingRequest

HUB_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$"
# Where the job's request says its data is: the job downloads the dataset there (trainers/external_job.py).
JOB_DATA_PATH = "/tmp/bashgym/data/train.jsonl"


class BudgetExceeded(RuleRejected):
    code = "budget_exceeded"


class ExternalJobs:
    """Submissions, followers and cancellation of external jobs; one per daemon (`async with`)."""

    def __init__(self, settings: Settings, ledger: Ledger, environ: dict[str, str]) -> None:
        self.settings = settings
        self.ledger = ledger
        self._hf_token = environ.get(settings.hf_jobs_token_env) or ""
        self._job_token = environ.get(settings.hf_job_token_env) or ""
        self._keys = {name: environ.get(p.api_key_env) or "" for name, p in settings.providers.items()}
        self.followers = Followers(settings, ledger, self._hf_token, self._keys, environ)

    async def __aenter__(self) -> ExternalJobs:
        await self.followers.__aenter__()
        for job in await self.ledger.open_external_jobs():
            self.followers.follow(job)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.followers.__aexit__(*exc)

    # -- what is configured ----------------------------------------------------------------------------------------

    async def surfaces(self) -> dict[str, Any]:
        """What `bashgym doctor` shows: each surface, whether its key is set, the identity it verifies as. Never
        a secret."""
        hub: dict[str, Any] = {
            "token_env": self.settings.hf_jobs_token_env,
            "token_set": bool(self._hf_token),
            "namespaces": list(self.settings.hf_namespaces),
            "read_namespaces": list(self.settings.hf_read_namespaces),
            "job_images": list(self.settings.hf_job_images),
            "job_token_env": self.settings.hf_job_token_env,
            "job_token_set": bool(self._job_token),
        }
        if self._hf_token:
            try:
                who = await asyncio.to_thread(self.followers.hub().identity)
                hub.update(verified_as=who.name, role=who.role, orgs=list(who.orgs))
            except UpstreamError as exc:
                hub["problem"] = exc.message
            hub.update(await self._job_setup())
        providers = {
            name: {"base_url": p.base_url, "api_key_env": p.api_key_env, "key_set": bool(self._keys.get(name))}
            for name, p in self.settings.providers.items()
        }
        engines = {
            "skypilot": {"bin": self.settings.skypilot_bin, "api_url": self.settings.skypilot_api_url},
            "outputs": {store: str(path) for store, path in self.settings.engine_outputs.items()},
        }
        return {"hf_jobs": hub, "providers": providers, "engines": engines}

    async def flavors(self) -> list[dict[str, Any]]:
        """The Hub's job hardware with its GPUs and hourly price, as the daemon's token sees it."""
        if not self._hf_token:
            raise RuleRejected(
                f"No Hugging Face token: ${self.settings.hf_jobs_token_env} is not set in the daemon's environment.",
                hint="Set it and restart the daemon.",
            )
        found = await _asked(self.followers.hub().flavors, "The Hub's jobs hardware list could not be read")
        return [{"flavor": f.name, "gpus": f.gpus, "usd_per_hour": f.usd_per_hour} for f in found.values()]

    async def _job_setup(self) -> dict[str, Any]:
        """What stops every job submission (no image allowed, no job token, one that can do too much), as
        `job_problems`, and who the job token verifies as."""
        found: dict[str, Any] = {}
        problems = []
        if not self.settings.hf_job_images:
            problems.append("no job image is allowed (set BASHGYM_HF_JOB_IMAGES to NAME@sha256:<digest> images)")
        problem = job_token_value_problem(self.settings, self._job_token, self._hf_token)
        if problem is None:
            try:
                who = await asyncio.to_thread(HubJobs(self.settings.hf_endpoint, self._job_token).identity)
                found.update(job_verified_as=who.name, job_role=who.role)
                problem = job_token_problem(self.settings, who)
            except UpstreamError as exc:
                problem = f"the job token could not be verified: {exc.message}"
        if problem is not None:
            problems.append(f"{problem} (set ${self.settings.hf_job_token_env} to a fine-grained token)")
        if problems:
            found["job_problems"] = problems
        return found

    def plan_secrets(self) -> dict[str, str]:
        """The values a launched plan's engine injects (never written into the plan): the job token, under the name
        the job's trainer reads, as a Hugging Face Job gets it; never the daemon's own, which the task's code (a
        dataset's, a model's) could read. None where no job token is set, and the launch says so."""
        if job_token_value_problem(self.settings, self._job_token, self._hf_token) is not None:
            return {}
        return {"HF_TOKEN": self._job_token}

    # -- Hugging Face Jobs -----------------------------------------------------------------------------------------

    async def submit_hf(
        self, actor: Actor, ws: str, request: TrainingRequest, body: HfJobSubmission, *, may_exceed_budget: bool
    ) -> dict[str, Any]:
        token = self._hf_token
        if not token:
            raise RuleRejected(
                f"No Hugging Face token: ${self.settings.hf_jobs_token_env} is not set in the daemon's environment; "
                "nothing was submitted.",
                hint="Set it (a token with write access to the output namespace) and restart the daemon.",
            )
        image = job_image(self.settings, body.image)
        check_job_token_value(self.settings, self._job_token, token)
        namespace = body.output_repo.split("/")[0]
        if namespace not in self.settings.hf_namespaces:
            allowed = ", ".join(self.settings.hf_namespaces) or "none are configured"
            raise Forbidden(
                f"Output repo {body.output_repo} is in namespace {namespace!r}, where jobs may not push "
                f"(allowed: {allowed}); nothing was submitted.",
                hint="Name a repo under an allowed namespace, or ask the operator to add it (BASHGYM_HF_NAMESPACES).",
            )
        _check_hub_model(request)
        refuse_report_to(request, "a Hugging Face Job")
        context, _ = context_in_workspace(request.tracking_context, ws)
        project = context.project_id if context else UNASSIGNED
        hub = self.followers.hub()
        facts = await self._hub_checks(hub, request, body, ws, project)
        _check_named_data(context, facts["sha256"], f"{body.dataset.repo}/{body.dataset.file}")
        flavor = facts["flavor"]
        timeout_s, cost_usd = _timeout_within_ceiling(body, flavor.usd_per_hour)
        ceiling_hours = round(timeout_s / 3600 * flavor.gpus, 4)
        if not may_exceed_budget:
            await check_budget(self.ledger, ws, project, ceiling_hours)
        sent = request.model_dump(mode="json", exclude={"tracking_context", "correlation_id"})
        sent.update(dataset_path=JOB_DATA_PATH, eval_dataset_path=None, compute_target="local")
        sent.update(hf_repo_owner=f"{ws}/{project}", auto_push_hf=False)
        request_json = canonical_json(sent)
        job_id = new_id("ext")
        lineage = {
            "dataset": {**body.dataset.model_dump(), "commit": facts["dataset_commit"], "sha256": facts["sha256"]},
            "base_model": {"repo": request.base_model, "commit": facts["model_commit"]},
        }
        spec = ExternalJobSpec(
            job_id=job_id,
            project_id=project,
            run_id=new_id("run"),
            surface="hf-jobs",
            provider=namespace,
            flavor=flavor.name,
            timeout_s=timeout_s,
            cost_ceiling_usd=cost_usd,
            ceiling_gpu_hours=ceiling_hours,
            request=sent,
            request_digest=sha256_text(request_json),
            lineage=lineage,
            destination=f"hf://{body.output_repo}",
        )
        job = await self._record(actor, ws, request, spec, facts["sha256"])
        arguments = job_spec(
            job_id=job_id,
            request=sent,
            request_json=request_json,
            dataset=body.dataset,
            dataset_commit=facts["dataset_commit"],
            output_repo=body.output_repo,
            image=image,
            install=self.settings.hf_jobs_install or f"pip install --quiet 'bashgym[train]=={bashgym_version()}'",
            flavor=flavor.name,
            timeout_s=timeout_s,
            job_token=self._job_token,
            workspace=ws,
        )
        try:
            receipt = await asyncio.to_thread(hub.submit, arguments, namespace)
        except UpstreamError as exc:
            return await self._submission_failed(job, exc)
        reach(self.settings.failpoint, "external.submitted")  # the Hub took it; the ledger does not know yet
        return await self._submitted(ws, job, receipt)

    async def _hub_checks(
        self, hub: HubJobs, request: TrainingRequest, body: HfJobSubmission, ws: str, project: str
    ) -> dict[str, Any]:
        """Everything the Hub can refuse, asked before anything is recorded."""
        namespace, owner = body.output_repo.split("/")[0], f"{ws}/{project}"
        try:
            who = await asyncio.to_thread(hub.identity)
        except UpstreamError as exc:
            raise _refused("The Hub refused the daemon's token", exc) from exc
        if who.role == "read":
            raise RuleRejected(
                f"The daemon's Hub token ({who.name}) is read-only; the job must push its model to "
                f"{body.output_repo}. Nothing was submitted.",
                hint="Give the daemon a token with write access to that namespace.",
            )
        if namespace not in who.namespaces:
            raise RuleRejected(
                f"The daemon's Hub token ({who.name}) cannot write to namespace {namespace!r}; it belongs to "
                f"{', '.join(who.namespaces)}. Nothing was submitted.",
                hint="Use a token of a member of that organisation, or push under the token's own namespace.",
            )
        job_token = await _asked(
            HubJobs(self.settings.hf_endpoint, self._job_token).identity, "The Hub refused the job token"
        )
        check_job_token(self.settings, job_token, body.output_repo)
        flavors = await _asked(hub.flavors, "The Hub's jobs hardware list could not be read")
        if body.flavor not in flavors:
            raise InvalidInput(
                f"Unknown flavor {body.flavor!r}; the Hub offers {', '.join(sorted(flavors))}. Nothing was submitted.",
                hint="Pick one of those (bashgym jobs hf flavors lists them with their prices).",
            )
        # Every repo is found readable before anything is downloaded: the models first, then the dataset.
        model_commit = await self._model_commit(hub, ws, project, "Base model", request.base_model)
        await self._check_pinned(hub, ws, project, request, model_commit)
        if request.teacher_model:
            await self._model_commit(hub, ws, project, "Teacher model", request.teacher_model)
        dataset = body.dataset
        reader = reader_for(self.settings, hub, ws, project, dataset.repo)
        refusal = unreadable(self.settings, "Dataset", dataset.repo, ws, project)
        dataset_commit = await _read(
            reader, lambda: reader.dataset_commit(dataset), f"The job could not read dataset {dataset.repo}", refusal
        )
        with tempfile.TemporaryDirectory(prefix="bashgym-hub-data-") as scratch:
            files = await _read(
                reader,
                lambda: reader.download_dataset(dataset, dataset_commit, Path(scratch)),
                f"Dataset {dataset.repo} could not be downloaded",
                refusal,
            )
            for path in files.values():
                report = await asyncio.to_thread(validate_request_data, request, path)
                if not report.ok:
                    raise InvalidInput(
                        f"{dataset.repo}/{path.name} does not meet the {request.method} dataset contract: "
                        f"{format_report(report)}",
                        hint="Fix the rows and push a new revision; nothing was submitted.",
                    )
            await asyncio.to_thread(check_no_command_checks, request.method, files, dataset.repo)
            sha256, _ = await asyncio.to_thread(file_digest, files["dataset_path"])
        existing = await _asked(lambda: hub.repo_files(body.output_repo), f"Repo {body.output_repo} could not be read")
        if existing is not None:
            private, present = existing
            if not private:
                raise RuleRejected(
                    f"Output repo {body.output_repo} is public; a job pushes only into a private repo.",
                    hint="Name a new repo (the job creates it private) or make this one private.",
                )
            if owner_marker(owner) not in present:
                raise RuleRejected(
                    f"Output repo {body.output_repo} exists and was not created for project {owner}; a job pushes "
                    "only into a repo made for its project. Nothing was submitted.",
                    hint="Name a new repo; the job creates it for this project.",
                )
        return {
            "flavor": flavors[body.flavor],
            "dataset_commit": dataset_commit,
            "sha256": sha256,
            "model_commit": model_commit,
        }

    async def _model_commit(
        self, hub: HubJobs, ws: str, project: str, what: str, repo: str, revision: str | None = None
    ) -> str:
        """The commit a model repo the job downloads points at (or its `revision`), read as the project's read
        namespaces allow."""
        reader = reader_for(self.settings, hub, ws, project, repo)
        refusal = unreadable(self.settings, what, repo, ws, project)
        asked = f"The job could not read {what.lower()} {repo}"
        return str(await _read(reader, lambda: reader.model_commit(repo, revision), asked, refusal))

    async def _check_pinned(self, hub: HubJobs, ws: str, project: str, request: TrainingRequest, head: str) -> None:
        """An official run trains the revision its model version pins; the job downloads the repo's head, so the two
        must be the same commit."""
        context, _ = context_in_workspace(request.tracking_context, ws)
        if context is None or context.model_source_revision in {"", head}:
            return
        revision = context.model_source_revision
        pinned = await self._model_commit(hub, ws, project, "Base model", request.base_model, revision)
        if pinned != head:
            raise RuleRejected(
                f"Model version {context.model_version_id} pins {request.base_model}@{revision} "
                f"(commit {pinned}), but the repo's head is {head}, which the job would download. An official run "
                "trains the exact model it names. Nothing was submitted.",
                hint=f"Register the head as a new model version (bashgym model register --project {project} --model "
                f"ID --version V --hub-id {request.base_model} --revision {head}) and name it, or train the pinned "
                "version here (bashgym training start).",
            )

    # -- managed providers -----------------------------------------------------------------------------------------

    async def submit_provider(
        self,
        actor: Actor,
        ws: str,
        name: str,
        request: TrainingRequest,
        body: ProviderJobSubmission,
        *,
        may_exceed_budget: bool,
    ) -> dict[str, Any]:
        settings = self.settings.providers.get(name)
        if settings is None:
            known = ", ".join(sorted(self.settings.providers)) or "none are configured"
            raise NotFound(
                f"No provider {name!r} (configured: {known}).",
                hint="The operator adds providers in bashgym.toml ([providers.NAME] base_url, api_key_env).",
            )
        key = self._keys.get(name)
        if not key:
            raise RuleRejected(
                f"Provider {name}'s key is not set: ${settings.api_key_env} is empty in the daemon's environment; "
                "nothing was submitted.",
                hint=f"Set {settings.api_key_env} for the daemon and restart it.",
            )
        method_type = METHOD_TYPES.get(request.method)
        if method_type is None:
            raise InvalidInput(
                f"Managed providers fine-tune with sft or dpo; {request.method} is not offered there.",
                hint="Train it on local, ssh: or as a Hugging Face Job (bashgym jobs hf submit).",
            )
        refuse_report_to(request, f"provider {name}'s fine-tune")
        context, _ = context_in_workspace(request.tracking_context, ws)
        project = context.project_id if context else UNASSIGNED
        report = await asyncio.to_thread(validate_request_data, request, Path(request.dataset_path))
        if not report.ok:
            raise InvalidInput(
                f"{Path(request.dataset_path).name} does not meet the {request.method} dataset contract: "
                f"{format_report(report)}",
                hint="Fix the rows; nothing was submitted.",
            )
        dataset_sha256, _ = await asyncio.to_thread(file_digest, Path(request.dataset_path))
        _check_named_data(context, dataset_sha256, Path(request.dataset_path).name)
        try:
            rows = await asyncio.to_thread(provider_rows, request.method, Path(request.dataset_path))
        except ValueError as exc:
            raise InvalidInput(f"The dataset cannot be sent to {name}: {exc}.") from exc
        if not may_exceed_budget:
            await check_budget(self.ledger, ws, project, 0.0)
        provider = Provider(name, settings.base_url, key)
        sha256 = hashlib.sha256(rows).hexdigest()
        file_id = await _asked(lambda: provider.upload(f"bashgym-{sha256[:12]}.jsonl", rows), "The upload failed")
        job_id = new_id("ext")
        create = {
            "model": request.base_model,
            "training_file": file_id,
            "seed": request.seed,
            "method": {"type": method_type, method_type: {"hyperparameters": dict(body.hyperparameters)}},
            "metadata": {METADATA_KEY: job_id},
            **({"suffix": body.suffix} if body.suffix else {}),
        }
        spec = ExternalJobSpec(
            job_id=job_id,
            project_id=project,
            run_id=new_id("run"),
            surface="managed",
            provider=name,
            flavor="managed",
            cost_ceiling_usd=body.cost_ceiling_usd,
            request=create,
            request_digest=sha256_text(canonical_json(create)),
            lineage={
                "dataset": {"sha256": dataset_sha256, "sent_sha256": sha256, "file_id": file_id},
                "base_model": {"model": request.base_model},
            },
            destination=f"managed://{name}",
        )
        job = await self._record(actor, ws, request, spec, dataset_sha256)
        try:
            receipt = await asyncio.to_thread(provider.create, create)
        except UpstreamError as exc:
            return await self._submission_failed(job, exc)
        return await self._submitted(ws, job, receipt)

    # -- shared steps ----------------------------------------------------------------------------------------------

    async def _record(
        self, actor: Actor, ws: str, request: TrainingRequest, spec: ExternalJobSpec, dataset_sha256: str
    ) -> dict[str, Any]:
        """The run and its external job, `submitting`, with the ceiling reserved: written before the upstream is
        called, so a crash in between is reconciled by asking the upstream."""
        target = "hf-jobs" if spec.surface == "hf-jobs" else f"managed:{spec.provider}"
        registration = RunRegistration(
            run_id=spec.run_id,
            source_system=spec.surface,
            method=request.method,
            tracking_context=request.tracking_context,
            compute_target=target,
            config={
                **request.model_dump(mode="json", exclude={"tracking_context", "dataset_path", "eval_dataset_path"}),
                "compute_target": target,
                "dataset_sha256": dataset_sha256,
                JUDGED_TASK_CHECK: "launch",  # the data's contract refused every row asking a task it is judged by
                "external_job_id": spec.job_id,
                "flavor": spec.flavor,
            },
            recipe_digest=spec.request_digest,
            correlation_id=request.correlation_id or actor.correlation_id,
        )
        await self.ledger.register_run(actor, ws, registration)
        ceiling = f"ceiling {spec.ceiling_gpu_hours or 0:g} GPU-hours"
        if spec.cost_ceiling_usd is not None:
            ceiling += f", ${spec.cost_ceiling_usd:.2f}"
        await self.ledger.add_budget_entry(
            actor,
            ws,
            spec.project_id,
            BudgetEntrySpec(
                entry_id=f"{spec.run_id}.reserve",
                kind="reserve",
                runs=1,
                gpu_hours=spec.ceiling_gpu_hours or 0.0,
                run_id=spec.run_id,
                reason=f"reserved at submission to {spec.surface} ({ceiling}); settles from the job's running time",
            ),
        )
        return (await self.ledger.begin_external_job(actor, ws, spec)).record

    async def _submitted(self, ws: str, job: dict[str, Any], receipt: dict[str, Any]) -> dict[str, Any]:
        written = await self.ledger.record_external_submission(SYSTEM, ws, job["job_id"], receipt["id"], receipt)
        job = written.record
        await self.followers.sync_run(job, f"submitted to {where(job)} as {receipt['id']}")
        self.followers.follow(job)
        return job

    async def _submission_failed(self, job: dict[str, Any], exc: UpstreamError) -> dict[str, Any]:
        """A refusal is the job's end; a failure that may have reached the upstream leaves it `unknown`, and the
        follower looks it up instead of submitting again."""
        state = "unknown" if exc.transient else "failed"
        reason = f"the submission {'may not have reached' if exc.transient else 'was refused by'} {where(job)}: "
        job = await self.followers.observe(
            job, ExternalObservation(kind="state", state=state, reason=reason + exc.message)
        )
        if state == "unknown":
            self.followers.follow(job)
        return job

    async def cancel(self, actor: Actor, ws: str, project: str, job_id: str) -> dict[str, Any]:
        job = await self.ledger.get_external_job(ws, job_id)
        if job["project_id"] != project:
            raise NotFound(f"No external job {job_id!r} in project {project!r}.")
        if not job["upstream_job_id"]:
            raise Conflict(
                f"External job {job_id} has no upstream id yet ({job['state']}); nothing can be cancelled upstream.",
                hint="The daemon is asking the upstream about it; try again in a moment (bashgym jobs show).",
            )
        upstream = self.followers.upstream(job)  # an engine no longer configured says what to set; nothing recorded
        await self.ledger.record_external_cancel(actor, ws, job_id)
        try:
            await upstream.cancel(job)
        except UpstreamError as exc:
            raise RuleRejected(
                f"{where(job)} did not cancel job {job['upstream_job_id']}: {exc.message}",
                hint="The cancellation request is on record; retry, or cancel it in the provider's console.",
            ) from exc
        return await self.ledger.get_external_job(ws, job_id)


async def check_budget(ledger: Ledger, ws: str, project: str, ceiling_hours: float) -> None:
    """The job's ceiling must fit what the project has left; refused before anything is recorded."""
    try:
        budget = await ledger.budget_summary(ws, project)
    except NotFound:
        return
    remaining = budget["remaining"]
    if remaining is None:
        return
    runs_limited, hours_limited = budget["limit"]["runs"] != 0, budget["limit"]["gpu_hours"] != 0
    if (runs_limited and remaining["runs"] < 1) or (
        hours_limited and remaining["gpu_hours"] < max(ceiling_hours, 1e-9)
    ):
        raise BudgetExceeded(
            f"Project {project!r} has {remaining['runs']} runs and {remaining['gpu_hours']:.2f} GPU-hours left; this "
            f"job's ceiling is 1 run and {ceiling_hours:.2f} GPU-hours. Nothing was submitted.",
            hint=f"Lower the timeout or pick a smaller flavor, or ask a holder of budget.amend to amend it "
            f"(bashgym budget amend --project {project}).",
            details={"remaining": remaining, "ceiling_gpu_hours": ceiling_hours},
        )


def _timeout_within_ceiling(body: HfJobSubmission, usd_per_hour: float) -> tuple[int, float]:
    """The job's timeout, shortened so the job cannot cost more than its ceiling (a job is billed by its time), and
    the ceiling in USD."""
    timeout_s = body.timeout_s
    if body.cost_ceiling_usd is not None and usd_per_hour > 0:
        affordable = int(body.cost_ceiling_usd / usd_per_hour * 3600)
        if affordable < 60:
            raise RuleRejected(
                f"A cost ceiling of ${body.cost_ceiling_usd:.2f} buys under a minute of {body.flavor} "
                f"(${usd_per_hour:.2f}/hour); nothing was submitted.",
                hint="Raise the ceiling or pick a cheaper flavor.",
            )
        timeout_s = min(timeout_s, affordable)
    return timeout_s, round(timeout_s / 3600 * usd_per_hour, 2)


def _check_named_data(context: Any, sha256: str, where: str) -> None:
    """An official run trains on the exact data its tracking context names. The answer never shows the file's own
    digest: the caller may not be able to read that file (a private Hub repo), and a digest is a right to bytes."""
    if context is not None and context.dataset_content_digest != sha256:
        raise RuleRejected(
            f"{where} is not the data the tracking context names: dataset version {context.dataset_version_id!r} has "
            f"digest {context.dataset_content_digest}, and this file's sha256 differs. An official run must train on "
            "the exact data it names. Nothing was submitted.",
            hint="Compute the sha256 of the file you mean to train on (sha256sum FILE, at the revision you submit), "
            "register it as a dataset version, and name that version in the tracking context.",
        )


def _check_hub_model(request: TrainingRequest) -> None:
    import re

    for name in ("base_model", "teacher_model"):
        value = getattr(request, name)
        if value and not re.match(HUB_ID, value):
            raise InvalidInput(
                f"{name} {value!r} is not a Hub model id; a Hugging Face Job downloads its models from the Hub.",
                hint="Name the model as owner/name (push a local model to a private repo first).",
            )
    if request.grpo_reward_source == "reward_model":
        raise InvalidInput(
            "A Hugging Face Job cannot use a reward model version from this ledger.",
            hint="Train GRPO with verifier rewards there, or on the local lane.",
        )


async def _read(reader: HubJobs, call: Any, what: str, refusal: Forbidden) -> Any:
    """`call` on a repo: a refusal of a tokenless read (the Hub's answer to a private repo) is `refusal`."""
    try:
        return await asyncio.to_thread(call)
    except UpstreamError as exc:
        from_hub = exc.__cause__ is not None  # not our own check (a missing file in a repo that answered)
        if reader.is_anonymous and from_hub and exc.status in {401, 403, 404}:
            raise refusal from exc
        raise _refused(what, exc) from exc


async def _asked(call: Any, what: str) -> Any:
    try:
        return await asyncio.to_thread(call)
    except UpstreamError as exc:
        raise _refused(what, exc) from exc


def _refused(what: str, exc: UpstreamError) -> BashGymError:
    if exc.status in {401, 403}:
        return RuleRejected(f"{what}: {exc.message}. Nothing was submitted.", hint="Check the token's access.")
    if exc.status == 404:
        return RuleRejected(
            f"{what}: it does not exist or this token cannot see it ({exc.message}). Nothing was submitted."
        )
    return RuleRejected(f"{what}: {exc.message}. Nothing was submitted.", hint="Retry in a moment.")
