"""Evaluations as child processes: a model (or the gold solutions) on the shipped terminal-task suite,
every attempt sandboxed; the result, its per-task scores and the canaries land in the ledger."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from bashgym.client.errors import Conflict, NotFound, RuleRejected
from bashgym.client.likeness import described, evaluate_alike, likeness, settings_of
from bashgym.client.specs import Actor, ComparisonSpec, EvalResultSpec, EvalSuiteSpec
from bashgym.client.validation import sha256_text
from bashgym.daemon.background import until_stored
from bashgym.daemon.blobs import BlobStore, file_digest
from bashgym.daemon.evidence.promotion import PARTIAL_SUITE_KIND
from bashgym.daemon.evidence.sources import (
    COMPLETE,
    check_not_imported,
    differing_files,
    hub_models_loaded,
    kept_files,
    run_files,
)
from bashgym.daemon.external.hub_access import fetch_for_project
from bashgym.daemon.host_paths import check_device_reach
from bashgym.daemon.lanes.admission import trainer_python
from bashgym.daemon.lanes.remote import read_from
from bashgym.daemon.lanes.ssh import Device, RemoteRun
from bashgym.daemon.launch.confine import Reach, held_blob, kept_model_dir, model_files
from bashgym.daemon.settings import Settings, child_environment
from bashgym.ledger.store import Ledger
from bashgym.ledger.tx import new_id
from bashgym.trainers.contracts.evaluation import GOLD, EvalRequest, score_settings
from bashgym.trainers.contracts.evidence import paired_bootstrap
from bashgym.trainers.contracts.placement import DeviceChoice, ran_alike, ran_on
from bashgym.trainers.environments.retrieval import shipped_retrieval_split
from bashgym.trainers.environments.terminal_tasks import TERMINAL_CONTRACT, SuiteDefinition, default_suite
from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger("bashgym.evaluations")
# The evaluation each kind of model gets on held-out data (a causal LM: its method's held-out rows).
EVAL_KINDS: dict[str, Literal["reward_pairs", "retrieval"]] = {
    "reward_model": "reward_pairs",
    "embedding_retriever": "retrieval",
}
# Summary parts recorded in a workflow result's details: slices, calibration inputs, leakage and contamination.
WORKFLOW_DETAILS = (
    "by_source", "length_slices", "leakage", "contaminated", "hard_slice", "heldout_templates", "library", "split",
)  # fmt: skip


def terminal_suite_spec(suite: SuiteDefinition) -> EvalSuiteSpec:
    """How a terminal-task suite is registered: its scoring contract, pinned by the digest of its definition."""
    return EvalSuiteSpec.model_validate(suite.registration())


def partial_suite_spec(summary: dict[str, Any]) -> EvalSuiteSpec:
    """A `--limit-tasks` subset or a `--split` of a terminal-task suite: its own id and kind, pinned by the whole
    suite's digest, the split and the subset's size."""
    partial = summary["partial"]
    split = f":{partial['split']}" if partial.get("split") else ""  # none: the digest a limit alone always had
    digest = sha256_text(f"{summary['suite_digest']}:{partial['tasks']}:{partial['of_tasks']}{split}")
    return EvalSuiteSpec.model_validate(
        {
            "suite_id": summary["suite_id"],
            "kind": PARTIAL_SUITE_KIND,
            "scoring_contract": TERMINAL_CONTRACT,
            "code_digest": digest,
        }
    )


class EvalRunBody(BaseModel):
    """What `bashgym eval run` asks for: one subject (a run, a model version, or the gold solutions)."""

    model_config = ConfigDict(extra="forbid")
    suite_id: str = "bash-tasks-v1"
    run_id: str | None = None
    model_version_id: str | None = None
    gold: bool = False
    samples: int = Field(1, ge=1, le=64)
    split: Literal["all", "holdout"] = "all"
    limit_tasks: int | None = Field(None, ge=1)
    max_new_tokens: int = Field(48, ge=1, le=1024)
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    seed: int = 0
    min_holdout_pass_at_1: float = Field(0.0, ge=0.0, le=1.0)
    # Held-out rows of the method's own data (absolute path on the daemon's host) instead of the task suite: a
    # policy's held-out rows, a reward model's held-out pairs, or a retriever's queries (default: the shipped split).
    dataset_path: str | None = None
    # Or held-out rows registered as a dataset version of the project (the daemon holds their content).
    dataset_version_id: str | None = None
    # A retriever's documents (default: the shipped corpus of command documentation).
    corpus_path: str | None = None
    compute_target: str = "local"  # or ssh:<device_id>: the evaluator runs on that device
    # Where on that host the model runs: auto takes a CUDA GPU with room for it (bfloat16), else the CPU (float32).
    device: DeviceChoice = "auto"


HELDOUT_CONTRACTS = {
    "generation": {
        "primary_metric": "exact_match",
        "metrics": {
            "exact_match": {"direction": "maximize"},
            "normalized_match": {"direction": "maximize"},
            "heldout_loss": {"direction": "minimize"},
        },
    },
    "session": {
        "primary_metric": "target_likelihood",
        "metrics": {
            "target_likelihood": {"direction": "maximize"},
            "masked_kl": {"direction": "minimize"},
            "masked_ce": {"direction": "minimize"},
            "masked_tokens": {"direction": "maximize"},
        },
    },
    "reward": {
        "primary_metric": "pair_accuracy",
        "metrics": {
            "pair_accuracy": {"direction": "maximize"},
            "mean_margin": {"direction": "maximize"},
            "ece": {"direction": "minimize"},
            "longer_rejected_accuracy": {"direction": "maximize"},
            "longer_chosen_accuracy": {"direction": "maximize"},
            "leaked_pairs": {"direction": "minimize", "max_regression": 0.0},
        },
    },
    "retrieval": {
        "primary_metric": "ndcg@10",
        "metrics": {
            "ndcg@10": {"direction": "maximize"},
            "mrr@10": {"direction": "maximize"},
            "recall@1": {"direction": "maximize"},
            "recall@5": {"direction": "maximize"},
            "recall@10": {"direction": "maximize"},
            "hard.ndcg@10": {"direction": "maximize"},
            "encode_ms_per_1k_docs": {"direction": "minimize"},
            "index_bytes_per_1k_docs": {"direction": "minimize"},
            "contamination": {"direction": "minimize", "max_regression": 0.0},
        },
    },
    "preference": {
        "primary_metric": "preference_accuracy",
        "metrics": {
            "preference_accuracy": {"direction": "maximize"},
            "reward_margin": {"direction": "maximize"},
            "heldout_loss": {"direction": "minimize"},
        },
    },
}


class CompareBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    baseline_result_id: str
    candidate_result_id: str
    resamples: int = Field(2000, ge=100, le=100_000)
    seed: int = 0


class EvaluationService:
    """Owns the evaluator child processes; their results are recorded when they finish."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        blobs: BlobStore,
        *,
        threads: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.threads = threads  # each local evaluator's torch threads (settings.local_thread_limit)
        self.environ = environ or {}  # the daemon's own: an evaluator gets child_environment's share of it
        self.ledger = ledger
        self.blobs = blobs
        self.jobs: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(1)

    async def __aenter__(self) -> EvaluationService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def start(self, actor: Actor, ws: str, project: str, body: EvalRunBody) -> dict[str, Any]:
        suite = default_suite()
        if body.dataset_version_id is not None:
            body = await self._with_registered_rows(ws, project, body)
        subject = await self._subject_kind(ws, project, body)
        if subject == "embedding_retriever":
            body = await self._retrieval_body(body)
        elif subject == "reward_model" and body.dataset_path is None:
            raise RuleRejected(
                "A reward model is evaluated on held-out pairs, not on the terminal-task suite.",
                hint="bashgym eval run --run RUN --dataset-path PAIRS (prompt/chosen/rejected rows never trained on).",
            )
        elif body.corpus_path is not None:
            raise RuleRejected("corpus_path is read for a retriever only; drop it.")
        if body.dataset_path is not None:
            if body.gold:
                raise RuleRejected("Held-out data has no gold solutions; evaluate a run or a model version.")
            if not body.dataset_path.startswith("/") or not await asyncio.to_thread(Path(body.dataset_path).is_file):
                raise RuleRejected(
                    f"dataset_path {body.dataset_path!r} is not a file.",
                    hint="Name a file in a data root, or upload it (bashgym eval run --dataset-path FILE does).",
                )
        elif body.suite_id != suite.suite_id:
            raise RuleRejected(
                f"Suite {body.suite_id!r} is not a terminal-task suite this daemon runs; it runs {suite.suite_id!r}.",
                hint="Record results of other suites with POST /v1/projects/{project}/eval-results.",
            )
        subjects = [body.run_id is not None, body.model_version_id is not None, body.gold]
        if sum(subjects) != 1:
            raise RuleRejected("Name exactly one of run_id, model_version_id or gold.", hint="bashgym eval run --run R")
        if body.dataset_path is None:
            await self._ensure_suite(actor, ws, project, suite)
        model, attempt_id = await self._model_of(ws, project, body)
        eval_id = new_id("eval")
        eval_dir = self.settings.home / "evaluations" / eval_id
        request = EvalRequest(
            model=model,
            kind=EVAL_KINDS.get(subject, "heldout") if body.dataset_path else "terminal_tasks",
            dataset_path=body.dataset_path,
            corpus_path=body.corpus_path,
            train_dataset_path=await self._trained_on(ws, project, body) if subject in EVAL_KINDS else None,
            reference_model=(
                await self._reference_of(ws, project, body) if body.dataset_path and subject == "causal_lm" else None
            ),
            samples=body.samples,
            split=body.split,
            limit_tasks=body.limit_tasks,
            max_new_tokens=body.max_new_tokens,
            temperature=body.temperature,
            seed=body.seed,
            min_holdout_pass_at_1=body.min_holdout_pass_at_1,
            device=body.device,
        )
        device = await self._device_of(ws, body.compute_target)
        await asyncio.to_thread(_write, eval_dir / "eval_request.json", request.model_dump_json(indent=2))
        job = {
            "evaluation_id": eval_id,
            "workspace_id": ws,
            "project_id": project,
            "suite_id": None if body.dataset_path else suite.suite_id,
            "run_id": body.run_id,
            "model_version_id": body.model_version_id,
            "gold": body.gold,
            "compute_target": body.compute_target,
            "device": body.device,
            "placement": None,  # where the evaluator put the model (cpu, cuda), once it has loaded it
            "status": "queued",
            "done": 0,
            "total": None,
            "result_id": None,
            "error": "",
        }
        self.jobs[eval_id] = job
        task = asyncio.create_task(self._run(actor, ws, project, eval_dir, job, attempt_id, device))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return dict(job)

    def jobs_of(self, ws: str, project: str) -> list[dict[str, Any]]:
        return [dict(j) for j in self.jobs.values() if j["workspace_id"] == ws and j["project_id"] == project]

    def status(self, ws: str, project: str, eval_id: str) -> dict[str, Any]:
        job = self.jobs.get(eval_id)
        if job is None or (job["workspace_id"], job["project_id"]) != (ws, project):
            raise NotFound(
                f"No evaluation {eval_id!r} in project {project!r} since the daemon started.",
                hint=f"Finished evaluations are results: bashgym ledger evaluations --project {project}",
            )
        return dict(job)

    async def _ensure_suite(self, actor: Actor, ws: str, project: str, suite: SuiteDefinition) -> None:
        await self.ledger.register_eval_suite(actor, ws, project, terminal_suite_spec(suite))

    def _reach(self, ws: str) -> Reach:
        return Reach(self.settings, self.ledger, self.blobs, ws)

    async def _with_registered_rows(self, ws: str, project: str, body: EvalRunBody) -> EvalRunBody:
        """dataset_version_id's stored content as the held-out rows: a version of this project, whose bytes the
        daemon holds (one registered by reference has none here)."""
        if body.dataset_path is not None:
            raise RuleRejected("Give dataset_path or dataset_version_id, not both.")
        version = await self.ledger.get_dataset_version(ws, project, str(body.dataset_version_id))
        rows = await held_blob(self._reach(ws), project, str(version["content_digest"]))
        return body.model_copy(update={"dataset_path": str(rows), "dataset_version_id": None})

    async def _subject_kind(self, ws: str, project: str, body: EvalRunBody) -> str:
        """What the evaluated model is (a model version's kind): a run's comes from its method."""
        if body.run_id is not None:
            method = (await self.ledger.get_run(ws, project, body.run_id)).get("method")
            return str(method) if method in EVAL_KINDS else "causal_lm"
        if body.model_version_id is not None:
            return str((await self.ledger.get_model_version(ws, project, body.model_version_id)).get("kind"))
        return "causal_lm"

    async def _retrieval_body(self, body: EvalRunBody) -> EvalRunBody:
        """A retriever's queries and corpus: the request's, or the frozen split and corpus that ship with BashGym
        (built once per daemon home, byte for byte the same everywhere)."""
        if body.gold:
            raise RuleRejected("A retriever has no gold solutions; evaluate a run or a model version.")
        if (body.dataset_path is None) != (body.corpus_path is None):
            raise RuleRejected(
                "A retriever's own queries need their corpus, and the reverse: give dataset_path and corpus_path "
                "together, or neither for the shipped split.",
                hint="bashgym eval run --run RUN (shipped split), or --dataset-path QUERIES --corpus-path DOCS.",
            )
        if body.dataset_path is not None:
            return body
        shipped = await asyncio.to_thread(shipped_retrieval_split, self.settings.home / "retrieval")
        return body.model_copy(update={"dataset_path": str(shipped.eval), "corpus_path": str(shipped.corpus)})

    async def _trained_on(self, ws: str, project: str, body: EvalRunBody) -> str | None:
        """The data a run trained on, for the leakage and contamination checks (none known for a version)."""
        if body.run_id is None:
            return None
        config = (await self.ledger.get_run(ws, project, body.run_id)).get("config") or {}
        path = config.get("dataset_path")
        return str(path) if path and await asyncio.to_thread(Path(str(path)).is_file) else None

    async def _reference_of(self, ws: str, project: str, body: EvalRunBody) -> str | None:
        """The frozen base a full-weights run moved from, for its held-out preference margin (an adapter's base is
        itself with the adapter disabled)."""
        if body.run_id is None:
            return None
        config = (await self.ledger.get_run(ws, project, body.run_id)).get("config") or {}
        return None if config.get("use_lora", True) else config.get("base_model")

    async def _model_of(self, ws: str, project: str, body: EvalRunBody) -> tuple[str, str | None]:
        if body.gold:
            return GOLD, None
        if body.run_id is not None:
            run = await self.ledger.get_run(ws, project, body.run_id)
            check_not_imported(run)
            if run["status"] != "completed":
                raise Conflict(f"Run {body.run_id} is {run['status']}; only a completed run's model can be evaluated.")
            kept = await kept_model_dir(self._reach(ws), project, run)
            if await asyncio.to_thread(kept.is_dir):
                await check_kept_files(run, kept)
                return str(kept), run["attempts"][-1]["attempt_id"]
            raise RuleRejected(
                f"Run {body.run_id} kept no model files in {kept.parent}.",
                hint="Evaluate a registered model version instead (--model-version).",
            )
        version = await self.ledger.get_model_version(ws, project, str(body.model_version_id))
        directory = await model_files(self._reach(ws), project, version)
        if directory is None or not await asyncio.to_thread(directory.is_dir):
            raise RuleRejected(
                f"Model version {body.model_version_id} lives at {version['source_uri']}, not a directory here.",
                hint="Evaluate it where its files are, or register its files with bashgym model register --dir.",
            )
        return str(directory), None

    async def _device_of(self, ws: str, target: str) -> Device | None:
        if target == "local":
            return None
        if not target.startswith("ssh:"):
            raise RuleRejected(f"Evaluations run on `local` or `ssh:<device_id>`, not `{target}`.")
        try:
            record = await self.ledger.get_device(ws, target.removeprefix("ssh:"))
        except NotFound as exc:
            raise RuleRejected(exc.message, hint=exc.hint) from exc
        if not record["ready"]:
            raise RuleRejected(
                f"Device {record['device_id']} is not ready.", hint=f"bashgym device preflight {record['device_id']}"
            )
        await check_device_reach(self.settings, record)
        return Device.from_record(record)

    async def _run(
        self,
        actor: Actor,
        ws: str,
        project: str,
        eval_dir: Path,
        job: dict[str, Any],
        attempt_id: str | None,
        device: Device | None = None,
    ) -> None:
        try:
            async with self._slots:
                job["status"] = "running"
                model_files = await asyncio.to_thread(_model_file_digests, eval_dir)
                if device is None:
                    fetched = await self._fetch_hub_models(ws, project, eval_dir)
                    code = await self._child(eval_dir, job, offline=fetched)
                else:
                    code = await self._remote(eval_dir, job, device)
                if code != 0:
                    job["status"], job["error"] = "failed", job["error"] or f"evaluator exited with code {code}"
                    return
                job["result_id"] = await until_stored(
                    lambda: self._record(actor, ws, project, eval_dir, job, attempt_id, model_files),
                    what=f"evaluation {job['evaluation_id']}",
                )
                job["status"] = "completed"
        except asyncio.CancelledError:
            job["status"], job["error"] = "failed", "the daemon stopped during the evaluation"
            raise
        except Exception as exc:  # recorded on the job: the caller polls it
            log.exception("Evaluation %s failed", job["evaluation_id"])
            job["status"], job["error"] = "failed", f"{type(exc).__name__}: {exc}"[:2000]

    async def _fetch_hub_models(self, ws: str, project: str, eval_dir: Path) -> bool:
        """The Hub models the evaluator loads by id (an adapter's base, a full-weights run's reference), fetched
        here as the project may read them: the evaluator holds no Hub token, so it then reads them offline, from
        the cache. Whether there were any."""
        request = EvalRequest.model_validate_json(await asyncio.to_thread((eval_dir / "eval_request.json").read_text))
        repos = await asyncio.to_thread(hub_models_loaded, request)
        token = self.environ.get(self.settings.hf_jobs_token_env, "")
        for repo in repos:
            await asyncio.to_thread(fetch_for_project, self.settings, token, ws, project, repo)
        return bool(repos)

    async def _child(self, eval_dir: Path, job: dict[str, Any], *, offline: bool = False) -> int:
        env = child_environment(self.settings, self.environ)
        if offline:  # every Hub model it loads is in the cache already: it asks the Hub nothing, with no token
            env["HF_HUB_OFFLINE"] = "1"
        proc = await asyncio.create_subprocess_exec(
            trainer_python(self.settings),
            "-u",
            "-m",
            "bashgym.trainers.evaluate",
            str(eval_dir),
            "--parent-pid",
            str(os.getpid()),
            *([] if self.threads is None else ["--threads", str(self.threads)]),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            async for raw in proc.stdout:
                _observe(job, raw)
            return await proc.wait()
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise

    async def _remote(self, eval_dir: Path, job: dict[str, Any], device: Device) -> int:
        """The evaluator on an SSH device: upload the request, model and data, follow it, fetch its summary."""
        request = json.loads(await asyncio.to_thread((eval_dir / "eval_request.json").read_text))
        files: dict[str, Path] = {}
        if request["model"] != GOLD:
            files["model"], request["model"] = Path(request["model"]), "model"
        # The rows, a retriever's corpus and the subject's training data (leakage, contamination) travel with it.
        for field, name in (("dataset_path", "dataset.jsonl"), ("corpus_path", "corpus.jsonl"),
                            ("train_dataset_path", "train.jsonl")):  # fmt: skip
            if request.get(field):
                files[name], request[field] = Path(request[field]), name
        remote = RemoteRun(device, job["evaluation_id"], eval_dir)
        await remote.open()
        try:
            await remote.upload(request, files, name="eval_request.json")
            await remote.launch(resume=False, module="bashgym.trainers.evaluate", args=device.core_share())
            offset = 0
            while True:
                code = await remote.exit_code()
                await remote.sync()
                data = await asyncio.to_thread(read_from, eval_dir / "protocol.jsonl", offset)
                end = data.rfind(b"\n") + 1
                offset += end
                for raw in data[:end].splitlines():
                    _observe(job, raw)
                if code is not None:
                    break
                await asyncio.sleep(self.settings.ssh_poll_s)
            if code == 0:
                await remote.fetch("summary.json")
                if request.get("kind", "terminal_tasks") == "terminal_tasks":
                    await remote.fetch("attempts.jsonl")
                await remote.remove()
            return code
        finally:
            await remote.close()

    async def _record(
        self,
        actor: Actor,
        ws: str,
        project: str,
        eval_dir: Path,
        job: dict[str, Any],
        attempt_id: str | None,
        model_files: dict[str, str] | None,
    ) -> str:
        """The evaluator's summary as a measured result: this daemon's evaluator made it, of the files named."""
        summary = json.loads(await asyncio.to_thread((eval_dir / "summary.json").read_text))
        if summary.get("kind") in HELDOUT_CONTRACTS:
            return await self._record_heldout(actor, ws, project, eval_dir, job, attempt_id, summary, model_files)
        attempts_sha, _ = await self.blobs.put_file(eval_dir / "attempts.jsonl")
        request = EvalRequest.model_validate_json(await asyncio.to_thread((eval_dir / "eval_request.json").read_text))
        if summary.get("partial"):  # a subset of the suite is a suite of its own, which no gate takes for the whole
            await self.ledger.register_eval_suite(actor, ws, project, partial_suite_spec(summary))
            job["suite_id"] = summary["suite_id"]
        overall, holdout = summary["overall"], summary["holdout"]
        metrics = {k: float(v) for k, v in overall.items() if k.startswith("pass@") or k.endswith("_rate")}
        metrics["mean_success"] = float(overall["mean_success"])
        if holdout:
            metrics |= {
                f"holdout.{k}": float(v) for k, v in holdout.items() if k.startswith("pass@") or k.endswith("_rate")
            }
        details = {
            "model": "gold" if job["gold"] else job["run_id"] or job["model_version_id"],
            "samples": summary["samples"],
            "isolation": summary["isolation"],
            "cpu_threads": summary.get("cpu_threads"),  # the model's torch threads (None: gold, or an older evaluator)
            "placement": summary.get("placement"),  # device, dtype and why (None: gold, or an older evaluator)
            "per_task": {tid: {"family": t["family"], "pass@1": t["pass@1"]} for tid, t in overall["per_task"].items()},
            "by_family": overall["by_family"],
            "holdout_gate": summary["holdout_gate"],
            "contamination": summary["contamination"],
            "canaries": summary.get("canaries"),
            "safety": summary.get("safety"),  # how attempts were watched and what they did (None: an older evaluator)
            "suite_digest": summary["suite_digest"],
            "partial": summary.get("partial"),
            "attempts_sha256": attempts_sha,
            "settings": score_settings(request),
            "model_files": model_files,  # the evaluated files' sha256 by path (None: the gold solutions)
        }
        spec = EvalResultSpec(
            suite_id=summary["suite_id"],
            run_id=job["run_id"],
            attempt_id=attempt_id,
            model_version_id=job["model_version_id"],
            metrics=metrics,
            sample_count=int(overall["attempts"]),
            details=details,
        )
        written = await self.ledger.record_eval_result(actor, ws, project, spec, provenance="measured")
        return str(written.record["result_id"])

    async def _record_heldout(
        self,
        actor: Actor,
        ws: str,
        project: str,
        eval_dir: Path,
        job: dict[str, Any],
        attempt_id: str | None,
        summary: dict[str, Any],
        model_files: dict[str, str] | None,
    ) -> str:
        request = EvalRequest.model_validate_json(await asyncio.to_thread((eval_dir / "eval_request.json").read_text))
        data_sha, size = await self.blobs.put_file(Path(str(request.dataset_path)))
        await self.ledger.hold_blob(actor, ws, project, data_sha, size)  # the suite's data is the project's
        digest = data_sha
        if request.corpus_path:  # a retrieval suite is its queries and its corpus: both pin it
            corpus_sha, corpus_size = await self.blobs.put_file(Path(request.corpus_path))
            await self.ledger.hold_blob(actor, ws, project, corpus_sha, corpus_size)
            digest = sha256_text(f"{data_sha}:{corpus_sha}")
        kind = summary["kind"]
        suite_id = f"retrieval-{digest[:16]}" if kind == "retrieval" else f"heldout-{kind}-{digest[:16]}"
        suite = EvalSuiteSpec.model_validate(
            {
                "suite_id": suite_id,
                "kind": "retrieval" if kind == "retrieval" else f"heldout_{kind}",
                "scoring_contract": HELDOUT_CONTRACTS[kind],
                "code_digest": digest,
            }
        )
        await self.ledger.register_eval_suite(actor, ws, project, suite)
        job["suite_id"] = suite_id
        # NaN or None: nothing scored (no rows of a slice, no training data to check against)
        metrics = {k: float(v) for k, v in summary["metrics"].items() if isinstance(v, int | float) and v == v}
        details = {
            "model": job["run_id"] or job["model_version_id"],
            "kind": summary["kind"],
            "dataset_sha256": data_sha,
            "reference_model": summary.get("reference_model"),
            "trained_on": request.train_dataset_path and await _digest_of(Path(request.train_dataset_path)),
            # What a reward model's and a retriever's gate reads beside the metrics.
            **{key: summary[key] for key in WORKFLOW_DETAILS if key in summary},
            "cpu_threads": summary.get("cpu_threads"),
            "placement": summary.get("placement"),
            "settings": score_settings(request),
            "model_files": model_files,
            "per_task": {
                tid: {"family": t["family"], "pass@1": t["pass@1"]}
                for tid, t in summary["per_task"].items()
                if "pass@1" in t
            },
        }
        spec = EvalResultSpec(
            suite_id=suite_id,
            run_id=job["run_id"],
            attempt_id=attempt_id,
            model_version_id=job["model_version_id"],
            metrics=metrics,
            sample_count=int(summary["rows"]),
            details=details,
        )
        written = await self.ledger.record_eval_result(actor, ws, project, spec, provenance="measured")
        return str(written.record["result_id"])

    async def compare(self, actor: Actor, ws: str, project: str, body: CompareBody) -> dict[str, Any]:
        """Paired bootstrap of the primary metric over the tasks both results share, clustered by family."""
        listing = await self.ledger.list_evaluations(ws, project)
        by_id = {r["result_id"]: r for r in listing["results"]}
        missing = [rid for rid in (body.baseline_result_id, body.candidate_result_id) if rid not in by_id]
        if missing:
            raise NotFound(f"No evaluation result {missing[0]!r} in project {project!r}.")
        baseline, candidate = by_id[body.baseline_result_id], by_id[body.candidate_result_id]
        if baseline["suite_id"] != candidate["suite_id"]:
            raise RuleRejected(
                f"Result {baseline['result_id']} is on suite {baseline['suite_id']!r} and {candidate['result_id']} on "
                f"{candidate['suite_id']!r}; results compare only on the exact same suite.",
                hint="Evaluate both models on one suite, then compare those results.",
            )
        base_tasks = (baseline.get("details") or {}).get("per_task") or {}
        cand_tasks = (candidate.get("details") or {}).get("per_task") or {}
        if not base_tasks or not cand_tasks:
            raise RuleRejected(
                "Both results need per-task scores to compare; one was recorded without them.",
                hint="Re-run the evaluation with bashgym eval run.",
            )
        shared = sorted(set(base_tasks) & set(cand_tasks))
        if not shared:
            raise RuleRejected("The two results share no task; they cannot be paired.")
        for result, tasks in ((baseline, base_tasks), (candidate, cand_tasks)):
            unscored = [t for t in shared if not _pairable(tasks[t])]
            if unscored:  # a result recorded by hand or elsewhere: said, not a 500
                raise RuleRejected(
                    f"Result {result['result_id']} has no numeric per-task `pass@1` with a `family` for "
                    f"{len(unscored)} of the {len(shared)} shared tasks (first: {unscored[0]!r}); "
                    "the paired bootstrap compares per-task pass@1.",
                    hint='Record per_task rows as {"family": ..., "pass@1": ...}, or evaluate with bashgym eval run.',
                )
        try:
            stats = paired_bootstrap(
                {t: base_tasks[t]["pass@1"] for t in shared},
                {t: cand_tasks[t]["pass@1"] for t in shared},
                {t: base_tasks[t]["family"] for t in shared},
                resamples=body.resamples,
                seed=body.seed,
            )
        except ValueError as exc:
            raise RuleRejected(
                f"These results cannot be compared: {exc}",
                hint="Evaluate both models on more of the suite (a larger --limit-tasks, or all of it).",
            ) from exc
        # Where each side's model ran: bfloat16 on a GPU does not sample bit for bit as float32 on a CPU, so a
        # comparison across placements says so (the notice shows it).
        base_ran, cand_ran = ran_on(baseline.get("details") or {}, candidate.get("details") or {})
        made = likeness(baseline, candidate)
        if made["unlike"]:  # a gain of the settings, not of the model
            raise RuleRejected(
                f"Results {baseline['result_id']} and {candidate['result_id']} were evaluated unlike "
                f"({described(made['unlike'])}: baseline, then candidate); a comparison of them would measure the "
                "settings, not the models.",
                hint="Evaluate the baseline's model as the candidate was, then compare those results: "
                + evaluate_alike(project, baseline, settings_of(candidate) or {}),
                details={"unlike": made["unlike"]},
            )
        suite = next((x for x in listing["suites"] if x["suite_id"] == baseline["suite_id"]), None)
        primary = suite["scoring_contract"]["primary_metric"] if suite else "pass@1"
        spec = ComparisonSpec(
            baseline_result_id=baseline["result_id"],
            candidate_result_id=candidate["result_id"],
            primary_metric=primary,
            delta=stats["delta"],
            ci_low=stats["ci_low"],
            ci_high=stats["ci_high"],
            details={
                **stats,
                "paired_tasks": len(shared),
                "method": "paired cluster bootstrap by task_family",
                "ran_on": {"baseline": base_ran, "candidate": cand_ran},
                "ran_alike": ran_alike(base_ran, cand_ran),
                **made,
            },
        )
        # Measured when both results are: the ledger records one standing on an asserted figure as asserted.
        return (await self.ledger.record_comparison(actor, ws, project, spec, provenance="measured")).record


async def check_kept_files(run: dict[str, Any], kept: Path) -> None:
    """A run's model is evaluated as its run recorded it, or not at all: every file of its kept directory is hashed
    again and compared with the run's artifacts, so replaced weights are never measured in the run's name."""
    recorded = kept_files(run_files(run), kept.name)
    if not recorded:
        raise RuleRejected(
            f"Run {run['run_id']} recorded no artifacts under {kept.name}/, so its files in {kept} cannot be checked; "
            "nothing was evaluated.",
            hint="Evaluate a registered model version instead (--model-version).",
        )
    differing = await asyncio.to_thread(differing_files, kept, recorded)
    if differing:
        raise RuleRejected(
            f"Run {run['run_id']}'s files in {kept} are not the ones it recorded: {', '.join(differing)}; nothing "
            "was evaluated or recorded.",
            hint="Put the run's own files back (their sha256 are its artifacts: bashgym training status "
            f"{run['run_id']} --project {run['project_id']} --json), "
            "or register what the directory holds as a model version (bashgym model register --dir) and evaluate "
            "that.",
            details={"files": differing},
        )


def _model_file_digests(eval_dir: Path) -> dict[str, str] | None:
    """The sha256 of each file of the model an evaluation loads, by path in its directory, read before the evaluator
    starts; None for the gold solutions, which load no model. Blocking."""
    model = EvalRequest.model_validate_json((eval_dir / "eval_request.json").read_text()).model
    if model == GOLD:
        return None
    root = Path(model)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != COMPLETE)
    return {str(p.relative_to(root)): file_digest(p)[0] for p in files}


async def _digest_of(path: Path) -> str:
    return (await asyncio.to_thread(file_digest, path))[0]


def _observe(job: dict[str, Any], raw: bytes) -> None:
    """Apply one protocol line of the evaluator to the job's progress."""
    try:
        line = json.loads(raw)
    except ValueError:
        return
    if line.get("event") == "started":
        job["total"], job["isolation"] = line.get("tasks"), line.get("isolation")
        job["placement"] = line.get("placement")
    elif line.get("event") == "progress":
        job["done"] = line.get("done", job["done"])
    elif line.get("event") == "failed":
        job["error"] = str(line.get("error", ""))[:2000]


def _scores(summary: dict[str, Any], *, prefix: str) -> dict[str, float]:
    """The rates and pass@k of a summary, as ledger metrics."""
    return {
        f"{prefix}{name}": float(value)
        for name, value in summary.items()
        if name.startswith("pass@") or name.endswith("_rate")
    }


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _pairable(row: Any) -> bool:
    """A per-task row the paired bootstrap can read: a numeric pass@1 and a family to cluster by."""
    if not isinstance(row, dict):
        return False
    value = row.get("pass@1")
    return isinstance(value, int | float) and not isinstance(value, bool) and isinstance(row.get("family"), str)
