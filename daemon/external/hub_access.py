"""What a Hugging Face Job may run, hold and read: code the caller chooses never receives the operator's secrets.

- The image comes from the operator's digest-pinned allow-list (`hf_job_images`), never from the caller: the image
  controls the whole command, so it would read every secret the job holds.
- The job holds the job token (`hf_job_token_env`), never the daemon's own: a fine-grained token whose grants lie
  within the namespaces jobs push to and read from, with write on the job's output namespace. A classic token
  reaches every repo its user does and is refused.
- The daemon's token reads a job's dataset and models only in the namespaces the operator allows the job's project
  to read (`hf_read_namespaces`); a repo elsewhere is read without a token, so only a public one is found.
- A GRPO/RLVR dataset with command checks does not train in a job: its author's shell code would run where the job
  token is readable.
"""

from __future__ import annotations

from pathlib import Path

from bashgym.client.errors import Forbidden, RuleRejected
from bashgym.daemon.external.hf_jobs import HubIdentity, HubJobs, UpstreamError
from bashgym.daemon.launch.authorise import has_command_checks
from bashgym.daemon.settings import Settings

VERIFIED_METHODS = frozenset({"grpo", "rlvr"})  # the methods whose rewards run each row's verifier
_FINE_GRAINED = "fine-grained Hub token (huggingface.co/settings/tokens) that writes only where jobs push"


def job_image(settings: Settings, asked: str | None) -> str:
    """The image a job runs in: the one asked for if the operator allows it, else the operator's first."""
    allowed = settings.hf_job_images
    add = "The operator adds an image with BASHGYM_HF_JOB_IMAGES (NAME@sha256:<digest>, comma-separated)."
    if not allowed:
        raise RuleRejected(
            "No container image is allowed for Hugging Face Jobs on this daemon, so none is submitted.",
            hint=add + " The image runs our trainer with the job token, so allow only images you trust.",
        )
    if asked is None or asked in allowed:
        return asked or allowed[0]
    raise Forbidden(
        f"Image {asked!r} is not one the operator allows for Hugging Face Jobs (allowed: {', '.join(allowed)}); the "
        "image runs with the job's Hub token, so a caller cannot choose it. Nothing was submitted.",
        hint=f"Leave `image` out (the default is {allowed[0]}) or name an allowed one. {add}",
    )


def job_token_value_problem(settings: Settings, job_token: str, daemon_token: str) -> str | None:
    """Why no job can get the job token as it is set, or None: it is unset, or it is the daemon's own."""
    env = settings.hf_job_token_env
    if not job_token:
        return f"no job token: ${env} is not set in the daemon's environment, and a job never gets the daemon's own"
    if job_token == daemon_token:
        return f"the job token (${env}) is the daemon's own token (${settings.hf_jobs_token_env}), which no job gets"
    return None


def check_job_token_value(settings: Settings, job_token: str, daemon_token: str) -> None:
    """A job token is configured, and it is not the daemon's own."""
    problem = job_token_value_problem(settings, job_token, daemon_token)
    if problem is not None:
        raise RuleRejected(
            f"{problem[:1].upper()}{problem[1:]}. Nothing was submitted.",
            hint=f"The operator sets ${settings.hf_job_token_env} to a separate {_FINE_GRAINED}, then restarts "
            "the daemon.",
        )


def job_token_problem(settings: Settings, who: HubIdentity) -> str | None:
    """Why the job token can do more than any job needs, or None: a classic token, a grant of the whole account, a
    grant outside the namespaces jobs push to and read from, or a write outside those they push to."""
    named = f"the job token (${settings.hf_job_token_env}, {who.name})"
    if who.role != "fineGrained":
        reach = "write" if who.role == "write" else "read"
        return f"{named} is a classic {who.role} token: it can {reach} every repo its user can, and so could the job"
    writable = set(settings.hf_namespaces)
    readable = writable | settings.hub_read_namespaces_anywhere()
    beyond = sorted(
        f"{', '.join(granted)} on {entity}"
        for entity, granted in who.scoped
        if _namespace(entity) not in readable or (_writes(granted) and _namespace(entity) not in writable)
    )
    beyond += [f"{grant} on the whole account" for grant in who.global_permissions if _writes((grant,))]
    if not beyond:
        return None
    return (
        f"{named} can do more than a job needs ({'; '.join(beyond)}); a job token may write only in "
        f"{_listed(sorted(writable))} and read only in {_listed(sorted(readable))}"
    )


def check_job_token(settings: Settings, who: HubIdentity, output_repo: str) -> None:
    """The job token can do no more than jobs need, and can push where this job pushes."""
    hint = f"The operator sets ${settings.hf_job_token_env} to a {_FINE_GRAINED}, and reads only what jobs train on."
    problem = job_token_problem(settings, who)
    if problem is not None:
        raise RuleRejected(f"{problem[:1].upper()}{problem[1:]}. Nothing was submitted.", hint=hint)
    namespace = output_repo.split("/")[0]
    if not any(entity in (namespace, output_repo) and "repo.write" in granted for entity, granted in who.scoped):
        raise RuleRejected(
            f"The job token (${settings.hf_job_token_env}, {who.name}) cannot write to {namespace}, where this job "
            f"pushes {output_repo}. Nothing was submitted.",
            hint=f"{hint} Grant it repo.write on {namespace}.",
        )


def reader_for(settings: Settings, hub: HubJobs, workspace: str, project: str, repo: str) -> HubJobs:
    """Who reads `repo` for a job of this project: the daemon's token in a namespace the project may read, no
    token anywhere else."""
    return hub if _namespace(repo) in settings.hub_read_namespaces(workspace, project) else hub.anonymous()


def fetch_for_project(settings: Settings, token: str, workspace: str, project: str, repo: str) -> None:
    """Put Hub model `repo` in the Hub cache for a process of this project that holds no token (an evaluator): read
    with the daemon's `token` where the project may read its namespace, without one elsewhere (public repos).
    Blocking. Raises Forbidden (`unreadable`) for a repo neither reaches."""
    reader = reader_for(settings, HubJobs(settings.hf_endpoint, token or None), workspace, project, repo)
    try:
        reader.fetch_model(repo)
    except UpstreamError as exc:
        if reader.is_anonymous and exc.status in {401, 403, 404}:
            raise unreadable(settings, "Model", repo, workspace, project, outcome="Nothing was evaluated.") from exc
        raise RuleRejected(f"Model {repo} could not be fetched from the Hub: {exc.message}") from exc


def unreadable(
    settings: Settings, what: str, repo: str, workspace: str, project: str, *, outcome: str = "Nothing was submitted."
) -> Forbidden:
    """The refusal of a repo outside the project's read namespaces that is not public either."""
    namespace = _namespace(repo)
    allowed = settings.hub_read_namespaces(workspace, project)
    return Forbidden(
        f"{what} {repo} is in namespace {namespace!r}, which the daemon's Hub token does not read for project "
        f"{workspace}/{project} (allowed: {_listed(allowed)}); read without a token, it does not exist or is not "
        f"public. {outcome}",
        hint=f"Name a public repo or one under an allowed namespace, or ask the operator to allow it: "
        f"BASHGYM_HF_READ_NAMESPACES={workspace}/{project}:{namespace} (comma-separated with the others).",
    )


def check_no_command_checks(
    method: str, files: dict[str, Path], where: str, *, runs_in: str = "the Hugging Face Job"
) -> None:
    """A GRPO/RLVR dataset whose rows carry command checks does not train in a job (parsed as the trainer does):
    `runs_in` holds a Hub token its checks could read."""
    if method not in VERIFIED_METHODS:
        return
    for path in files.values():
        if has_command_checks(path):
            raise Forbidden(
                f"{where}/{path.name} has command checks (rows whose verifier.kind is command): their author's shell "
                f"code would run inside {runs_in}, where the job's Hub token is readable, so such a dataset does not "
                "train there. Nothing was submitted.",
                hint="Train it on the local lane or an SSH device whose sandbox isolates its checks (namespaces), "
                f"or use exact_match or terminal_task verifiers for {runs_in}.",
            )


def _namespace(entity: str) -> str:
    return entity.split("/")[0]


def _writes(granted: tuple[str, ...] | list[str]) -> bool:
    """Whether a grant does more than read (repo.write, job.write, discussion.write, ...)."""
    return any(not permission.endswith(".read") for permission in granted)


def _listed(names: list[str]) -> str:
    return ", ".join(names) or "none"
