"""The check stage: every check a launch makes of a request, one list that `training plan` and a launch share.

Plan walks it collecting every refusal (`verdict`); a launch walks it raising the first (`required`). The lane is
admitted first (check_lane), then the project's profile, the data contract, the model's identity, a reward
model's version, the data's digest against its dataset version, a dataset's command checks against the sandbox,
and what the trainer itself would refuse on the lane's machines. The budget is a launch's alone (check_budget).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bashgym.client.errors import BashGymError, InvalidInput, NotFound, RuleRejected
from bashgym.client.redaction import redact_values
from bashgym.client.specs import UNASSIGNED, context_in_workspace
from bashgym.client.validation import check_identifier
from bashgym.daemon.blobs import BlobStore, file_digest
from bashgym.daemon.lanes.admission import check_lane, trainer_python_facts
from bashgym.daemon.lanes.nemo import LANE_CAPABILITIES
from bashgym.daemon.lanes.nemo_data import job_hyperparameters
from bashgym.daemon.lanes.slurm_jobs import slurm_plan
from bashgym.daemon.lanes.ssh import Device
from bashgym.daemon.launch.authorise import check_unisolated_checks, has_command_checks
from bashgym.daemon.launch.confine import Reach, model_files
from bashgym.daemon.launch.trackers import check_report_to
from bashgym.daemon.model_identity import check_model_identity
from bashgym.daemon.settings import Settings
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.datasets import format_report, leaked_pairs, validate_request_data
from bashgym.trainers.contracts.fields import Capabilities, model_problems, refusals
from bashgym.trainers.contracts.request import TrainingRequest
from packaging.version import Version


class BudgetExceeded(RuleRejected):
    code = "budget_exceeded"


class LaunchChecks:
    """The checks of launches on this daemon: its settings, ledger and environment, and how many local runs are
    busy now (the local lane's preflight says so)."""

    def __init__(self, settings: Settings, ledger: Ledger, environ: dict[str, str], busy: Callable[[], int]) -> None:
        self.settings = settings
        self.ledger = ledger
        self._environ = environ
        self._busy = busy

    async def required(
        self, workspace: str, request: TrainingRequest
    ) -> tuple[TrainingRequest, Device | None, dict[str, Any]]:
        """A launch's walk: the lane admits the request, then every check runs and the first refusal raises.
        Answers the request as the trainer gets it, the SSH device it trains on, and what the checks found."""
        device = await check_lane(self.ledger, self.settings, self._environ, workspace, request)
        trained, found = await self._launch_checks(workspace, request, device, lane_ready=True)
        return trained, device, found

    async def verdict(self, workspace: str, request: TrainingRequest) -> dict[str, Any]:
        """`training plan`'s answer: the checks `start` makes, in its order, with every refusal listed instead of
        the first, and the lane's preflight (a lane that refuses leaves its machine unknown, so the checks that
        need it wait for it)."""
        reasons: list[str] = []
        hints: list[str] = []

        def refused(exc: BashGymError) -> None:
            found = exc.details.get("reasons")
            reasons.extend(found if isinstance(found, list) else [exc.message])
            hints.extend([exc.hint] if exc.hint and exc.hint not in hints else [])

        device: Device | None = None
        try:
            device = await check_lane(self.ledger, self.settings, self._environ, workspace, request)
            lane = await self._lane_facts(workspace, request, device)
        except BashGymError as exc:
            refused(exc)
            lane = {"lane": request.lane, "ready": False, "reasons": [exc.message], "hint": exc.hint}
        await self._launch_checks(workspace, request, device, lane_ready=lane["ready"], refused=refused)
        # A reason may quote the request back (a model path): credential-shaped parts are redacted, as in errors.
        verdict = {"lane_preflight": lane, "ready": not reasons, "reasons": redact_values(reasons), "hints": hints}
        if request.lane == "nemo":  # stated, not a refusal: such a run can be stopped, never paused
            verdict["lane_capabilities"] = LANE_CAPABILITIES
        return verdict

    async def _launch_checks(
        self,
        workspace: str,
        request: TrainingRequest,
        device: Device | None,
        *,
        lane_ready: bool,
        refused: Callable[[BashGymError], None] | None = None,
    ) -> tuple[TrainingRequest, dict[str, Any]]:
        """Every check a launch makes of a request its lane takes, in order: one list for `start` (the first refusal
        raises) and `training plan` (each refusal goes to `refused`, and the rest still run), so the two never
        disagree. The checks that need the lane's machine run only when it answered (`lane_ready`). Answers the
        request as the trainer gets it (a reward model's version made its directory) and what the checks found:
        `model_check` (how base_model was held to its model version), `dataset_sha256`."""
        found: dict[str, Any] = {"trained": request}

        async def check(name: str, run: Callable[[], Awaitable[object]]) -> None:
            try:
                found[name] = await run()
            except BashGymError as exc:
                if refused is None:
                    raise
                refused(exc)

        await check("profile", lambda: self._check_profile(workspace, request))
        await check("report_to", lambda: self._check_report_to(request))
        await check("dataset", lambda: self._check_dataset(request))
        await check("model_check", lambda: check_model_identity(self.ledger, workspace, request))
        await check("trained", lambda: self._with_reward_model(workspace, request))
        readable = "dataset" in found  # else the dataset's refusal says why, and nothing more is read of it
        if readable:
            await check("dataset_sha256", lambda: self._check_named_data(workspace, request))
        trained: TrainingRequest = found["trained"]
        if lane_ready:
            if readable:
                await check("command_checks", lambda: self._check_command_checks(workspace, trained, device))
            await check("trainer", lambda: self._check_trainer_would_take(workspace, trained, device))
        return trained, found

    async def _check_report_to(self, request: TrainingRequest) -> None:
        check_report_to(self.settings, self._environ, request)

    async def _check_named_data(self, workspace: str, request: TrainingRequest) -> str:
        """The dataset file's sha256, which must be the digest of the dataset version the tracking context names:
        an official run trains on the exact data it names."""
        dataset_sha256, _ = await asyncio.to_thread(file_digest, Path(request.dataset_path))
        context, _ = context_in_workspace(request.tracking_context, workspace)
        if context is not None and context.dataset_content_digest != dataset_sha256:
            raise RuleRejected(
                f"dataset_path has sha256 {dataset_sha256[:12]}, but the tracking context names dataset version "
                f"{context.dataset_version_id!r} with digest {context.dataset_content_digest[:12]}; an official run "
                "must train on the exact data it names.",
                hint="Register this file as a new dataset version (bashgym dataset register) and name it in the "
                "tracking context, or point dataset_path at the registered file.",
            )
        return dataset_sha256

    async def _check_trainer_would_take(self, workspace: str, request: TrainingRequest, device: Device | None) -> None:
        """What the trainer would refuse on the lane's machines, found before anything is queued."""
        machine = await self._capabilities(workspace, request, device)
        problems = refusals(request, machine)
        if request.lane == "local":  # model paths name this host's files; a device's are checked where it trains
            problems += await asyncio.to_thread(model_problems, request)
        if problems:
            raise RuleRejected(
                "The trainer would refuse this run, so nothing was launched: " + " ".join(problems),
                hint="Fix the request; bashgym training plan checks it without launching.",
                details={"reasons": problems},
            )

    async def _capabilities(self, workspace: str, request: TrainingRequest, device: Device | None) -> Capabilities:
        """CUDA, bitsandbytes, peft and report_to's trackers on the machines the run would train on, where a setting
        needs them known (trackers: on the local lane alone, the only one report_to runs on)."""
        adapters = request.method == "embedding_retriever" and request.use_lora
        if not (request.load_in_4bit or adapters or request.report_to) or request.lane == "nemo":
            return Capabilities()
        if request.lane == "local":
            facts = await trainer_python_facts(self.settings, self._environ)
            return Capabilities(
                cuda=bool(facts.get("cuda")),
                bitsandbytes=bool(facts.get("bitsandbytes")),
                peft=facts.get("peft"),
                trackers=tuple(facts.get("trackers") or ()),
            )
        known = list((await self._device_facts(workspace, request, device)).values())
        peft = [f.get("peft") for f in known]
        return Capabilities(
            cuda=_all_of([f.get("cuda") for f in known]),
            bitsandbytes=_all_of([f.get("bitsandbytes") for f in known]),
            # the oldest a device has (a device never preflighted since peft was probed: unknown)
            peft=None if not peft or None in peft else min(peft, key=lambda v: Version(v or "0")),
        )

    async def _lane_facts(self, workspace: str, request: TrainingRequest, device: Device | None) -> dict[str, Any]:
        """A lane that takes the run, with what its last preflight found (`training plan`'s lane_preflight)."""
        if device is not None:
            record = await self.ledger.get_device(workspace, device.device_id)
            return {
                "lane": "ssh",
                "ready": True,
                "reasons": [],
                "checked_at": record["preflight_at"],
                **record["preflight"],
            }
        if request.lane == "nemo":
            return {"lane": "nemo", "ready": True, "reasons": [], "facts": self._nemo_facts(request)}
        if request.lane == "ssh-group":
            group = await self.ledger.get_device_group(workspace, request.device_group or "")
            return {
                "lane": "ssh-group",
                "ready": True,
                "reasons": [],
                "checked_at": group["preflight_at"],
                **group["preflight"],
            }
        if request.lane == "slurm":
            cluster = await self.ledger.get_cluster(workspace, request.slurm_cluster or "")
            facts = slurm_plan(cluster, run_id="<run_id>", nodes=request.num_machines)
            return {"lane": "slurm", "ready": True, "reasons": [], "facts": facts}
        facts = {"slots": self.settings.local_slots, "busy": self._busy(), "gpus": self.settings.local_gpus}
        return {"lane": "local", "ready": True, "reasons": [], "facts": facts}

    def _nemo_facts(self, request: TrainingRequest) -> dict[str, Any]:
        """Where a nemo launch uploads and trains, and the job's hyperparameters (`training plan` shows them)."""
        settings = self.settings
        named = request.nemo_dataset or f"{settings.nemo_namespace}/bashgym-<sha256[:12] of the uploaded training file>"
        return {
            "base_url": settings.nemo_base_url,
            "datastore_url": settings.nemo_datastore_url or settings.nemo_base_url,
            "entity_store_url": settings.nemo_entity_store_url or settings.nemo_base_url,
            "dataset": named,
            "hyperparameters": job_hyperparameters(request),
        }

    async def check_budget(self, workspace: str, project: str) -> None:
        try:
            budget = await self.ledger.budget_summary(workspace, project)
        except NotFound:
            return  # a project this launch creates has no budget yet
        remaining = budget["remaining"]
        if remaining is None:
            return
        # A unit is limited only once a limit names it: a runs-only budget leaves GPU-hours open.
        is_runs_limited, is_hours_limited = budget["limit"]["runs"] != 0, budget["limit"]["gpu_hours"] != 0
        if (is_runs_limited and remaining["runs"] < 1) or (is_hours_limited and remaining["gpu_hours"] <= 0):
            raise BudgetExceeded(
                f"Project {project!r} has {remaining['runs']} runs and {remaining['gpu_hours']:.2f} GPU-hours left; "
                "this launch needs 1 run and some GPU time.",
                hint=f"Ask a holder of budget.amend to amend it (bashgym budget amend --project {project}).",
                details={"remaining": remaining},
            )

    async def _check_command_checks(self, workspace: str, request: TrainingRequest, device: Device | None) -> None:
        """A dataset's command checks train only where the sandbox isolates them (launch.authorise)."""
        if request.method not in {"grpo", "rlvr"} or self.settings.allow_unisolated_checks:
            return
        if not await asyncio.to_thread(has_command_checks, Path(request.dataset_path)):
            return
        check_unisolated_checks(self.settings, await self._sandbox_levels(workspace, request, device))

    async def _sandbox_levels(
        self, workspace: str, request: TrainingRequest, device: Device | None
    ) -> dict[str, str | None]:
        """Each host the run trains on, with the sandbox level it grants: this one's probed, a device's from its
        last preflight."""
        if request.lane == "local":
            from bashgym.trainers.environments.sandbox import (
                probe_isolation,  # only a launch with command checks needs it
            )

            return {"this host": (await asyncio.to_thread(probe_isolation)).level}
        return {
            name: facts.get("sandbox") for name, facts in (await self._device_facts(workspace, request, device)).items()
        }

    async def _device_facts(
        self, workspace: str, request: TrainingRequest, device: Device | None
    ) -> dict[str, dict[str, Any]]:
        """The last preflight's facts of each device the run trains on (an SSH device, or a group's members)."""
        names = [device.device_id] if device is not None else []
        if request.lane == "slurm":
            # Its compute nodes were never preflighted: their sandbox level is unknown.
            return {f"cluster {request.slurm_cluster}": {}}
        if request.lane == "ssh-group":
            names = list((await self.ledger.get_device_group(workspace, request.device_group or ""))["members"])
        found: dict[str, dict[str, Any]] = {}
        for name in names:
            preflight = (await self.ledger.get_device(workspace, name))["preflight"] or {}
            found[f"device {name}"] = preflight.get("facts") or {}
        return found

    async def _check_dataset(self, request: TrainingRequest) -> None:
        for path in filter(None, (request.dataset_path, request.eval_dataset_path)):
            if not Path(path).is_absolute():
                # Relative to the daemon's working directory, which the caller neither sees nor chooses.
                raise InvalidInput(
                    f"dataset path {path!r} is relative; the daemon reads only absolute paths on its host.",
                    hint="Name the file absolutely; bashgym training start resolves paths for you.",
                )
            try:
                report = await asyncio.to_thread(validate_request_data, request, Path(path))
            except FileNotFoundError as exc:
                raise RuleRejected(str(exc), hint="dataset_path must name a file the daemon can read.") from exc
            if not report.ok:
                raise RuleRejected(
                    f"The dataset breaks the {request.method} contract; nothing was launched.\n{format_report(report)}",
                    hint=f"Fix it; bashgym training validate --method {request.method} --dataset {Path(path).name} "
                    "[--config CONFIG] checks it.",
                    details={"summary": report.summary},
                )
        if request.method == "reward_model" and request.eval_dataset_path:
            leaks = await asyncio.to_thread(leaked_pairs, Path(request.dataset_path), Path(request.eval_dataset_path))
            if not leaks.ok:
                raise RuleRejected(
                    f"The held-out pairs leak from the training pairs; nothing was launched.\n{format_report(leaks)}",
                    hint="Held-out pairs measure preference only when the model never trained on them; drop them "
                    "from one of the files.",
                    details={"summary": leaks.summary},
                )

    async def _check_profile(self, workspace: str, request: TrainingRequest) -> None:
        """An `embedding_retrieval` project trains retrievers only, and a retriever trains only in one: a retriever
        is a profile of its own, never a causal-LM run under another name."""
        context, _ = context_in_workspace(request.tracking_context, workspace)
        project = context.project_id if context else UNASSIGNED
        try:
            profile = (await self.ledger.get_project(workspace, project)).get("profile", "default")
        except NotFound:
            profile = "default"  # created by this launch's tracking context, with the default profile
        retriever = request.method == "embedding_retriever"
        if retriever and profile != "embedding_retrieval":
            raise RuleRejected(
                f"Project {project!r} has profile {profile!r}; embedding retrievers train only in a project whose "
                "profile is `embedding_retrieval`.",
                hint="Create one (bashgym project create --profile embedding_retrieval) and name it in the "
                "tracking context.",
            )
        if not retriever and profile == "embedding_retrieval":
            raise RuleRejected(
                f"Project {project!r} has profile `embedding_retrieval` and trains retrievers only; method "
                f"`{request.method}` belongs in a project with the default profile.",
                hint="Send method embedding_retriever here, or name another project in the tracking context.",
            )

    async def _with_reward_model(self, workspace: str, request: TrainingRequest) -> TrainingRequest:
        """GRPO rewarded by a reward model: grpo_reward_model names a model version of kind reward_model in the
        run's own project, never a path, and the trainer gets that version's directory on this host."""
        if request.grpo_reward_source != "reward_model":
            return request
        version_id = str(request.grpo_reward_model)
        context, _ = context_in_workspace(request.tracking_context, workspace)
        if context is None:
            raise RuleRejected(
                "A reward model is a model version of a project, and this run has no project (it would be kept "
                "under `unassigned`).",
                hint="Send a complete tracking_context naming the project whose reward model scores the run.",
            )
        try:
            check_identifier(version_id, field="grpo_reward_model")
            version = await self.ledger.get_model_version(workspace, context.project_id, version_id)
        except (InvalidInput, NotFound) as exc:
            raise RuleRejected(
                f"grpo_reward_model {version_id!r} is not a model version of project {context.project_id!r}.",
                hint="Name the model version id of a trained reward model there (bashgym promote registers a run's "
                "model as mv-<run id>; bashgym ledger context lists the project's models).",
            ) from exc
        if version.get("kind") != "reward_model":
            raise RuleRejected(
                f"Model version {version_id} is a {version.get('kind', 'causal_lm')}, not a reward model; GRPO "
                "needs a scalar score per completion.",
                hint="Train one with method reward_model, register its model, and name that version.",
            )
        reach = Reach(self.settings, self.ledger, BlobStore(self.settings.artifacts_dir), workspace)
        directory = await model_files(reach, context.project_id, version)
        if directory is None:
            raise RuleRejected(
                f"Reward model {version_id} lives at {version['source_uri']}, not in files on the daemon's host.",
                hint="Register its files with bashgym model register --dir DIR --kind reward_model.",
            )
        return request.model_copy(update={"grpo_reward_model": str(directory)})


def _all_of(known: list[bool | None]) -> bool | None:
    """True when every machine has it, False when one lacks it, None when that is not known for all."""
    if False in known:
        return False
    return True if known and None not in known else None
