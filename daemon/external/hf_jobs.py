"""Hugging Face Jobs through huggingface_hub's own jobs API, and the Hub reads a job's submission needs.

Every call here is blocking (huggingface_hub is synchronous); the service runs them in threads. Each failure
becomes an `UpstreamError` that says whether asking again may help (429, 5xx, a dropped connection) and never
carries the token. Relied on: PROTOCOLS.md ("Hugging Face Jobs (huggingface_hub 2.4)", "Hugging Face Hub"):
`run_job(image, command, env, secrets, flavor, timeout, labels, namespace)`, `inspect_job`, `fetch_job_logs`,
`fetch_job_metrics`, `cancel_job`, `list_jobs(labels=)`, `list_jobs_hardware`, `whoami`, `dataset_info`,
`model_info`, `repo_info`, `hf_hub_download`, `snapshot_download`; the client honours an explicit endpoint.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bashgym.client.external import HubDataset
from bashgym.daemon.lanes import on_first_use
from bashgym.trainers.contracts.external_job import (
    DATASET_EVAL_FILE_ENV,
    DATASET_FILE_ENV,
    DATASET_REPO_ENV,
    DATASET_REVISION_ENV,
    EVIDENCE_FILES,
    JOB_ID_ENV,
    PUSH_REPO_ENV,
    REQUEST_ENV,
)

if TYPE_CHECKING:
    import huggingface_hub
else:
    huggingface_hub = on_first_use("huggingface_hub")

# The upstream's stages, in our words. DELETED: the job is gone, and whatever it did is not known to have ended well.
STAGES = {
    "SCHEDULING": "submitted",
    "RUNNING": "running",
    "COMPLETED": "completed",
    "ERROR": "failed",
    "CANCELED": "cancelled",
    "DELETED": "failed",
}
TRANSIENT = frozenset({408, 425, 429, 500, 502, 503, 504})
JOB_LABEL = "bashgym-job"


class UpstreamError(Exception):
    """The upstream refused, failed or could not be reached; `transient` says whether asking again may help."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    @property
    def transient(self) -> bool:
        return self.status is None or self.status in TRANSIENT


@dataclass(frozen=True)
class HubIdentity:
    """Who a token belongs to, and what it may do: a classic token (role read or write) what its user may; a
    fine-grained one only its grants: `scoped` (entity, permissions) pairs, the entity a namespace or a repo id,
    and `global_permissions`, the grants of no entity."""

    name: str
    orgs: tuple[str, ...]
    role: str  # the token's role: read, write, or fineGrained
    scoped: tuple[tuple[str, tuple[str, ...]], ...] = ()
    global_permissions: tuple[str, ...] = ()

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.name, *self.orgs)


@dataclass(frozen=True)
class Flavor:
    name: str
    gpus: int
    usd_per_hour: float


@dataclass(frozen=True)
class JobView:
    """What one look at a job shows: its stage (ours and the upstream's), message, and running time."""

    upstream_id: str
    state: str
    stage: str
    message: str
    running_s: float | None


@contextmanager
def _asking(what: str) -> Iterator[None]:
    """Turn the client's failures into UpstreamError naming what was asked."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        yield
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        detail = _server_message(exc)
        raise UpstreamError(f"The Hub answered {status} to {what}: {detail}", status) from exc
    except (OSError, ValueError) as exc:  # connection failures, a malformed answer
        raise UpstreamError(f"The Hub could not be asked {what}: {type(exc).__name__}: {exc}") from exc


class HubJobs:
    """One token's view of the Hub and its jobs; `endpoint` empty means huggingface_hub's default."""

    def __init__(self, endpoint: str, token: str | None) -> None:
        self.endpoint = endpoint or None
        # token=False: no token at all, not even one huggingface_hub finds in the environment or its cache.
        self._api = huggingface_hub.HfApi(endpoint=self.endpoint, token=token if token is not None else False)
        self.is_anonymous = token is None

    def anonymous(self) -> HubJobs:
        """The same Hub asked without any token: what anyone may read (public repos)."""
        return HubJobs(self.endpoint or "", None)

    def identity(self) -> HubIdentity:
        with _asking("who the token belongs to (whoami)"):
            who = self._api.whoami()
        access = (who.get("auth") or {}).get("accessToken") or {}
        orgs = tuple(str(org.get("name")) for org in who.get("orgs") or [] if org.get("name"))
        grants = access.get("fineGrained") or {}
        scoped = tuple(
            (str((grant.get("entity") or {}).get("name", "")), tuple(str(p) for p in grant.get("permissions") or []))
            for grant in grants.get("scoped") or []
        )
        global_permissions = tuple(str(p) for p in grants.get("global") or [])
        return HubIdentity(str(who.get("name", "")), orgs, str(access.get("role", "")), scoped, global_permissions)

    def flavors(self) -> dict[str, Flavor]:
        with _asking("for the jobs hardware list"):
            listed = self._api.list_jobs_hardware()
        found = {}
        for item in listed:
            gpus = int(item.accelerator.quantity) if item.accelerator is not None else 0
            per_unit = float(item.unit_cost_usd)
            hourly = per_unit * {"second": 3600, "minute": 60, "hour": 1}.get(str(item.unit_label), 60)
            found[str(item.name)] = Flavor(str(item.name), gpus, round(hourly, 6))
        return found

    def dataset_commit(self, dataset: HubDataset) -> str:
        """The commit the dataset's revision points at, after checking every file the job reads is there."""
        with _asking(f"about dataset {dataset.repo}@{dataset.revision}"):
            info = self._api.dataset_info(dataset.repo, revision=dataset.revision)
        present = {sibling.rfilename for sibling in info.siblings or []}
        for name in filter(None, (dataset.file, dataset.eval_file)):
            if name not in present:
                raise UpstreamError(
                    f"Dataset {dataset.repo}@{dataset.revision} has no file {name!r}; it has "
                    f"{', '.join(sorted(present)[:10]) or 'no files'}.",
                    404,
                )
        return str(info.sha)

    def download_dataset(self, dataset: HubDataset, commit: str, dest: Path) -> dict[str, Path]:
        paths = {"dataset_path": dataset.file, "eval_dataset_path": dataset.eval_file}
        found = {}
        for field, name in paths.items():
            if name is None:
                continue
            with _asking(f"for {dataset.repo}/{name}"):
                found[field] = Path(
                    self._api.hf_hub_download(
                        dataset.repo, name, repo_type="dataset", revision=commit, local_dir=dest / field
                    )
                )
        return found

    def model_commit(self, repo: str, revision: str | None = None) -> str:
        """The commit `revision` of a model repo points at (its head when None)."""
        with _asking(f"about base model {repo}{f'@{revision}' if revision else ''}"):
            return str(self._api.model_info(repo, revision=revision).sha)

    def repo_files(self, repo: str) -> tuple[bool, set[str]] | None:
        """(private, files) of a model repo, or None where it does not exist (or this token cannot see it)."""
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            with _asking(f"about repo {repo}"):
                info = self._api.repo_info(repo)
        except UpstreamError as exc:
            if isinstance(exc.__cause__, RepositoryNotFoundError) or exc.status == 404:
                return None
            raise
        return bool(info.private), {sibling.rfilename for sibling in getattr(info, "siblings", None) or []}

    def submit(self, spec: dict[str, Any], namespace: str) -> dict[str, Any]:
        with _asking("to run the job"):
            info = self._api.run_job(**spec, namespace=namespace)
        return receipt(info)

    def find(self, job_id: str, namespace: str) -> dict[str, Any] | None:
        """The upstream job labelled with this BashGym job id, if the submission reached the Hub."""
        with _asking(f"for jobs labelled {JOB_LABEL}={job_id}"):
            listed = list(self._api.list_jobs(labels={JOB_LABEL: job_id}, namespace=namespace))
        matching = [info for info in listed if (info.labels or {}).get(JOB_LABEL) == job_id]
        return receipt(matching[0]) if matching else None

    def inspect(self, upstream_id: str, namespace: str) -> JobView:
        with _asking(f"about job {upstream_id}"):
            info = self._api.inspect_job(job_id=upstream_id, namespace=namespace)
        stage = str(getattr(info.status.stage, "value", info.status.stage))
        durations = info.durations
        running = durations.running_secs if durations is not None else None
        return JobView(upstream_id, STAGES.get(stage, "unknown"), stage, str(info.status.message or ""), running)

    def logs(self, upstream_id: str, namespace: str) -> list[str]:
        """Every log line so far (the caller keeps how many it has seen)."""
        with _asking(f"for the logs of job {upstream_id}"):
            return [str(line) for line in self._api.fetch_job_logs(job_id=upstream_id, namespace=namespace)]

    def cancel(self, upstream_id: str, namespace: str) -> None:
        with _asking(f"to cancel job {upstream_id}"):
            self._api.cancel_job(job_id=upstream_id, namespace=namespace)

    def download_run(self, repo: str, commit: str, dest: Path, model_files: list[str]) -> Path:
        """The pushed commit's evidence and model files into `dest`, exactly that commit."""
        with _asking(f"for {repo}@{commit}"):
            self._api.snapshot_download(
                repo, revision=commit, local_dir=dest, allow_patterns=[*EVIDENCE_FILES, *model_files]
            )
        return dest

    def fetch_model(self, repo: str) -> Path:
        """A model repo's files into the Hub cache (the one the evaluator reads, offline), as this token may."""
        with _asking(f"for model {repo}"):
            return Path(self._api.snapshot_download(repo))

    def read_file(self, repo: str, commit: str, name: str, dest: Path) -> Path:
        with _asking(f"for {repo}@{commit}/{name}"):
            return Path(self._api.hf_hub_download(repo, name, revision=commit, local_dir=dest))


def job_spec(
    *,
    job_id: str,
    request: dict[str, Any],
    request_json: str,
    dataset: HubDataset,
    dataset_commit: str,
    output_repo: str,
    image: str,
    install: str,
    flavor: str,
    timeout_s: int,
    job_token: str,
    workspace: str,
) -> dict[str, Any]:
    """The arguments of `run_job`: our trainer as the command in an operator's image, the request in the
    environment, the job token (never the daemon's) only as a secret, never in the command or the environment."""
    script = f"set -e; {install}; exec python -u -m bashgym.trainers.external_job --workdir bashgym-job"
    return {
        "image": image,
        "command": ["bash", "-c", script],
        "env": {
            REQUEST_ENV: request_json,
            JOB_ID_ENV: job_id,
            PUSH_REPO_ENV: output_repo,
            DATASET_REPO_ENV: dataset.repo,
            DATASET_FILE_ENV: dataset.file,
            DATASET_REVISION_ENV: dataset_commit,
            **({DATASET_EVAL_FILE_ENV: dataset.eval_file} if dataset.eval_file else {}),
        },
        "secrets": {"HF_TOKEN": job_token},
        "flavor": flavor,
        "timeout": timeout_s,
        "labels": {JOB_LABEL: job_id, "bashgym-workspace": workspace, "bashgym-method": str(request["method"])},
    }


def receipt(info: Any) -> dict[str, Any]:
    """What the upstream answered about a job, without secrets or the environment (the request is on record)."""
    stage = getattr(info.status, "stage", "")
    return {
        "id": str(info.id),
        "url": str(getattr(info, "url", "") or ""),
        "stage": str(getattr(stage, "value", stage)),
        "flavor": str(getattr(info.flavor, "value", info.flavor) or ""),
        "image": str(info.docker_image or ""),
        "created_at": info.created_at.isoformat() if info.created_at else None,
        "owner": str(getattr(info.owner, "name", "") or ""),
        "labels": dict(info.labels or {}),
        "command": [shlex.quote(part) for part in info.command or []],
    }


def _server_message(exc: Any) -> str:
    response = exc.response
    if response is None:
        return str(exc)[:300]
    try:
        body = response.json()
    except ValueError:
        return str(response.text)[:300]
    if isinstance(body, dict):
        return str(body.get("error") or body.get("message") or body)[:300]
    return str(body)[:300]
