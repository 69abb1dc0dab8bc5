"""The one settings object: built once in main() from BASHGYM_* variables and bashgym.toml, passed down."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from bashgym.client.errors import InvalidInput
from bashgym.client.validation import IDENTIFIER_RE
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_PORT = 8321
# An image reference pinned by digest: [registry[:port]/]path[:tag]@sha256:<64 hex>.
IMAGE_RE = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}$"
)
HUB_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
DAEMON_LOG = Path("logs", "daemon.log")  # under the home

# What a process the daemon starts (a trainer and the ranks it launches, an evaluator, the trainer-Python probe, a
# tool such as nvidia-smi) gets of the daemon's environment, by name: the system's basics, where Python, torch, CUDA
# and the Hugging Face libraries find their files, caches and offline switches, and how many threads they take.
# Nothing else: a credential the operator keeps there (a provider's key, the Discord token, a sink's secret, one
# with a name no list knows) stays in the daemon. docs/security.md, "Security model", says which secret reaches
# which process.
CHILD_ENV_NAMES = frozenset(
    {
        *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP"),
        *("LD_LIBRARY_PATH", "LIBRARY_PATH", "CC", "CXX", "VIRTUAL_ENV", "CONDA_PREFIX"),  # CUDA libraries, compilers
        *("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR"),
        *("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"),
        *("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"),
        # huggingface_hub, datasets and transformers; never HF_TOKEN, which only a run that pushes gets.
        *("HF_HOME", "HF_HUB_CACHE", "HF_ASSETS_CACHE", "HF_DATASETS_CACHE", "HF_XET_CACHE", "HUGGINGFACE_HUB_CACHE"),
        *("HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DISABLE_XET"),
        *("HF_HUB_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_SYMLINKS_WARNING", "HF_HUB_ENABLE_HF_TRANSFER"),
        *("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_VERBOSITY", "TOKENIZERS_PARALLELISM"),
        *("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "BNB_CUDA_VERSION", "BITSANDBYTES_NOWELCOME"),
        *("OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS", "VECLIB_MAXIMUM_THREADS"),
    }
)
CHILD_ENV_PREFIXES = (
    *("LC_", "PYTHON"),  # the locale; Python's own (PYTHONHASHSEED, PYTHONPATH, PYTHONUNBUFFERED, ...)
    *("CUDA_", "NCCL_", "GLOO_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_", "TRITON_", "ACCELERATE_", "DS_"),
    *("TRANSFORMERS_", "OMP_", "MKL_", "KMP_"),
)
# The variable the trainer reads the Hub token from (trainers/hub.py TOKEN_ENV), in the daemon's environment too.
HUB_TOKEN_ENV = "HF_TOKEN"
# The variable a trainer reads its system metrics' interval from (trainers/system.py INTERVAL_ENV).
SYSTEM_METRICS_ENV = "BASHGYM_SYSTEM_METRICS_S"
# MLflow's credentials, where the operator's tracking server needs them: secrets, handed only to a run that
# reports to MLflow (daemon/launch/trackers.py).
MLFLOW_SECRET_ENV = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


class ProviderSettings(BaseModel):
    """A managed fine-tuning provider: where its API is and which environment variable holds its key."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str = Field(pattern=r"^https?://\S+$")
    api_key_env: str = Field(pattern=r"^[A-Z_][A-Z0-9_]{0,127}$")


class Settings(BaseSettings):
    """Every setting, its default and its environment variable (BASHGYM_<NAME>)."""

    model_config = SettingsConfigDict(env_prefix="BASHGYM_", extra="forbid")

    home: Path = Field(
        default_factory=lambda: Path.home() / ".bashgym",
        description="State directory: ledger, runs, artifacts, reports, tokens.",
    )
    host: str = Field("127.0.0.1", description="Address the daemon listens on.")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    uds: Path | None = Field(None, description="Listen on this Unix socket instead of TCP.")
    api: str | None = Field(None, description="Daemon URL the CLI talks to (default: the running daemon's).")
    token: str | None = Field(None, description="API token the CLI sends (default: $BASHGYM_HOME/admin.token).")
    default_workspace: str = Field("default", description="Workspace used when a command names none.")
    project: str | None = Field(
        None,
        description="Project of CLI commands that take --project when they name none (`bashgym project use P` "
        "writes it to bashgym.toml).",
    )
    ledger_synchronous: Literal["NORMAL", "FULL"] = Field(
        "FULL", description="SQLite synchronous mode: FULL survives power loss, NORMAL only process crashes."
    )
    ledger_readers: int = Field(2, ge=1, le=8, description="Reader connections in the pool.")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Largest JSON request body accepted.")
    max_upload_bytes: int = Field(4 * 1024**3, ge=1024, description="Largest dataset or model file upload.")
    grace_s: float = Field(10.0, gt=0, description="Seconds a child gets between SIGTERM and SIGKILL.")
    system_metrics_s: float = Field(
        10.0,
        ge=0,
        description="Seconds between the system.* samples (CPU, memory, GPU) of a launched run's trainer; 0: none.",
    )
    stale_after_s: float = Field(3600.0, gt=0, description="An active run silent this long is reported stale.")
    no_progress_s: float = Field(
        1800.0, gt=0, description="A running trainer silent this long gets a no_progress anomaly event."
    )
    local_slots: int = Field(1, ge=1, le=64, description="Training runs the local lane runs at once.")
    trainer_threads: int = Field(
        0,
        ge=0,
        le=1024,
        description="torch CPU threads of each local trainer and evaluator; 0: the host's cores split over "
        "local_slots when several runs can share them, else the cores the load leaves free when the run starts "
        "(OMP_NUM_THREADS, if set, wins).",
    )
    trainer_python: str = Field("", description="Python that runs trainers (default: the daemon's own).")
    local_gpus: int = Field(0, ge=0, le=64, description="GPUs a local run occupies, for GPU-hour accounting.")
    ssh_poll_s: float = Field(1.0, gt=0, description="Seconds between polls of a run on an SSH device.")
    nemo_base_url: str = Field(
        "", description="NeMo Customizer base URL; empty leaves the cloud:nemo-customizer lane off."
    )
    nemo_api_key_env: str = Field("NGC_API_KEY", description="Name of the environment variable holding the NeMo key.")
    nemo_datastore_url: str = Field(
        "", description="NeMo Data Store base URL (its Hugging Face API under /v1/hf); empty: nemo_base_url."
    )
    nemo_entity_store_url: str = Field(
        "", description="NeMo Entity Store base URL, where uploaded datasets are registered; empty: nemo_base_url."
    )
    nemo_namespace: str = Field("default", description="NeMo Data Store namespace of datasets named by digest.")
    nemo_poll_s: float = Field(5.0, gt=0, description="Seconds between status polls of a NeMo Customizer job.")
    nemo_gpus: int = Field(1, ge=0, le=1024, description="GPUs a NeMo Customizer job occupies, for GPU-hours.")
    hf_jobs_token_env: str = Field(
        "HF_TOKEN",
        description="Name of the environment variable holding the daemon's Hub token: it submits and follows "
        "Hugging Face Jobs and reads what they train on (in hf_read_namespaces only); no job ever gets it.",
    )
    hf_job_token_env: str = Field(
        "HF_JOB_TOKEN",
        pattern=r"^[A-Z_][A-Z0-9_]{0,127}$",
        description="Name of the environment variable holding the token a Hugging Face Job gets as its HF_TOKEN "
        "secret: a fine-grained token, not the daemon's, granted nothing outside hf_namespaces and "
        "hf_read_namespaces, with write on hf_namespaces only; unset: no job is submitted.",
    )
    hf_endpoint: str = Field("", description="Hugging Face Hub endpoint for jobs (default: huggingface_hub's).")
    hf_job_images: list[str] = Field(
        default_factory=list,
        description="Container images (comma-separated, each pinned as NAME@sha256:<64 hex digits>) a Hugging Face "
        "Job may run in; a submission names one or gets the first. None: no job is submitted.",
    )
    hf_read_namespaces: list[str] = Field(
        default_factory=list,
        description="Hub namespaces the daemon's token reads a job's dataset and models from, comma-separated: "
        "NAMESPACE for every project, WORKSPACE/PROJECT:NAMESPACE for one project, WORKSPACE/*:NAMESPACE for one "
        "workspace's projects. A repo elsewhere is read without a token: public repos only.",
    )
    hf_jobs_install: str = Field(
        "",
        description="Shell command that installs BashGym inside a Hugging Face Job (default: pip install of "
        "bashgym[train] at this daemon's version).",
    )
    public_url: str = Field(
        "",
        description="Base URL people's browsers reach the daemon at, for web view links (default: the URL the "
        "request for the link came to).",
    )
    tracked_heartbeat_timeout_s: float = Field(
        300.0, gt=0, description="Seconds a tracked run (bashgym.track) may go unheard before it is marked `unknown`."
    )
    external_poll_s: float = Field(5.0, gt=0, description="Seconds between polls of an external job's upstream.")
    providers: dict[str, ProviderSettings] = Field(
        default_factory=dict,
        description="Managed fine-tuning providers (OpenAI-compatible API), by name: {base_url, api_key_env}.",
    )
    skypilot_bin: str = Field(
        "",
        description="Path of the `sky` executable of SkyPilot's own environment (its pins conflict with ours): "
        "plans are checked with `sky launch --dryrun` and launched, followed and cancelled as managed jobs "
        "through it (argument lists, never a shell). Empty: SkyPilot's library where it imports here.",
    )
    skypilot_api_url: str = Field(
        "",
        pattern=r"^(https?://\S+)?$",
        description="SkyPilot API server `sky` talks to (its SKYPILOT_API_SERVER_ENDPOINT); empty: the one its "
        "own config names.",
    )
    engine_outputs: dict[str, Path] = Field(
        default_factory=dict,
        description="Where the daemon's host reads each checkpoint store a launched SkyPilot/dstack plan writes "
        'its outputs to: JSON {"s3://bucket/prefix": "/mnt/bucket/prefix", "dstack-volume": "/mnt/vol"} '
        "(a bucket mount, a shared filesystem). A plan is launched only into a store named here.",
    )
    discord_token_env: str = Field(
        "BASHGYM_DISCORD_TOKEN", description="Name of the environment variable holding the bot token."
    )
    console_notices: bool = Field(
        False,
        description="Also print notices (the Discord posts) on the daemon's stdout when Discord is not configured "
        "(`bashgym daemon --console-notices`); they are in the API either way.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO",
        description="Level of the daemon's log, $BASHGYM_HOME/logs/daemon.log (read it with `bashgym logs`); "
        "below DEBUG, APScheduler's and httpx's routine lines are left out.",
    )
    log_console: bool = Field(
        False,
        description="Also write the daemon's log to stderr at log_level (`bashgym daemon --log-console`); "
        "otherwise stderr gets WARNING and above only.",
    )
    discord_guild_ids: list[str] = Field(
        default_factory=list, description="Discord guilds (ids, comma-separated) allowed to use this BashGym."
    )
    rate_limit_per_minute: int = Field(600, ge=1, description="Mutating requests a principal may make per minute.")
    rate_limit_burst: int = Field(120, ge=1, description="Mutating requests a principal may make at once.")
    secret_env_vars: list[str] = Field(
        default_factory=lambda: [
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "NGC_API_KEY",
            "NVIDIA_API_KEY",
            "BASHGYM_TOKEN",
        ],
        description="Environment variables whose values are secrets, redacted wherever they would appear.",
    )
    # The team's own trackers a launched run may report to as well (request `report_to`, daemon/launch/trackers.py).
    mlflow_tracking_uri: str = Field(
        "", description="MLflow tracking URI runs with report_to mlflow log to (MLFLOW_TRACKING_URI); none: refused."
    )
    wandb_project: str = Field("", description="W&B project runs with report_to wandb log to; none: refused.")
    wandb_entity: str = Field("", description="W&B entity (user or team) of wandb_project; none: the key's default.")
    wandb_api_key_env: str = Field(
        "WANDB_API_KEY", description="Environment variable holding the operator's W&B API key (a secret)."
    )
    trackio_dir: Path | None = Field(
        None, description="Directory Trackio keeps the runs with report_to trackio in (TRACKIO_DIR); none: refused."
    )
    trainer_env_vars: list[str] = Field(
        default_factory=list,
        description="Further variables of the daemon's environment (names, comma-separated) its local trainers, "
        "evaluators and probes get beyond the built-in list (docs/security.md, Security model); never a secret's.",
    )

    # Trust boundaries (docs/security.md, "Security model"): the host paths callers may name, and what they may reach.
    data_roots: list[Path] = Field(
        default_factory=list,
        description="Directories (comma-separated) whose files callers may name by path: datasets, base models, "
        "model directories, bundles to import. $BASHGYM_HOME/data always is, and $BASHGYM_HOME/exports/WORKSPACE "
        "for the requests of that workspace.",
    )
    export_roots: list[Path] = Field(
        default_factory=list,
        description="Directories (comma-separated) model bundles may be exported into (shared by every workspace: "
        "name only directories all of them may use); $BASHGYM_HOME/exports/WORKSPACE always is, for its own.",
    )
    backup_dir: Path | None = Field(None, description="Where ledger backups go (default $BASHGYM_HOME/backups).")
    ssh_keys_dir: Path | None = Field(
        None,
        description="The only directory device keys and known_hosts files are read from (default $BASHGYM_HOME/keys).",
    )
    slurm_shared_root: Path | None = Field(
        None,
        description="The only directory a `local` Slurm cluster's shared_dir may be in (where run directories are "
        "staged for the compute nodes); unset: clusters reached on the daemon's host are refused.",
    )
    slurm_conf: Path | None = Field(
        None,
        description="The slurm.conf the daemon's Slurm client commands read (their SLURM_CONF); unset: the "
        "commands' own default (/etc/slurm/slurm.conf or DNS SRV records).",
    )
    slurm_poll_s: float = Field(5.0, gt=0, description="Seconds between polls of a run's Slurm job.")
    allow_private_device_hosts: bool = Field(
        False, description="Let devices point at this machine or its link (loopback, link-local addresses)."
    )
    allow_unisolated_checks: bool = Field(
        False,
        description="Let datasets with command checks (verifier.kind command) train where the sandbox has no "
        "namespaces: their authors' shell code then runs as the trainer host's user.",
    )
    hf_namespaces: list[str] = Field(
        default_factory=list,
        description="Hugging Face namespaces (users or orgs, comma-separated) runs may push into; none: no push.",
    )
    project_quota_bytes: int = Field(
        100 * 1024**3, ge=0, description="Bytes of uploads (blobs) one project may hold in the content store."
    )
    workspace_quota_bytes: int = Field(
        1024**4, ge=0, description="Bytes of uploads all the projects of one workspace may hold together."
    )
    read_rate_per_minute: int = Field(6000, ge=1, description="Reads a principal may make per minute.")
    read_rate_burst: int = Field(600, ge=1, description="Reads a principal may make at once.")
    bad_token_per_minute: int = Field(
        60, ge=1, description="Requests with an unknown, revoked or malformed token one client address may make."
    )
    max_waits_per_principal: int = Field(
        8, ge=1, le=1000, description="Long-polls (wait_s > 0) one principal may hold open at once."
    )

    failpoint: str = Field(
        "",
        description="Tests only: comma-separated crash points where the daemon, CLI or a trainer SIGKILLs itself.",
    )

    @classmethod
    def settings_customise_sources(cls, settings_cls: Any, init_settings: Any, *_: Any, **__: Any) -> tuple[Any, ...]:
        # load_settings reads the environment and bashgym.toml itself, once: a second reading by pydantic-settings
        # would parse `BASHGYM_DATA_ROOTS=` (empty) as JSON and refuse the start.
        return (init_settings,)

    @field_validator(
        "backup_dir", "ssh_keys_dir", "uds", "trackio_dir", "slurm_shared_root", "slurm_conf", mode="before"
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator(
        "discord_guild_ids",
        "secret_env_vars",
        "trainer_env_vars",
        "data_roots",
        "export_roots",
        "hf_namespaces",
        "hf_job_images",
        "hf_read_namespaces",
        mode="before",
    )
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("hf_job_images")
    @classmethod
    def _pinned_images(cls, images: list[str]) -> list[str]:
        """A tag can be moved to other code after the operator looked at it; a digest names exactly one image."""
        for image in images:
            if not IMAGE_RE.match(image):
                raise ValueError(
                    f"{image!r} is not an image pinned by digest; name each as NAME@sha256:<64 hex digits> "
                    "(`docker buildx imagetools inspect NAME:TAG` shows the digest)"
                )
        return images

    @field_validator("hf_read_namespaces")
    @classmethod
    def _read_grants(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            read_grant(entry)
        return entries

    def hub_read_namespaces(self, workspace: str, project: str) -> list[str]:
        """The Hub namespaces the daemon's token reads for a job of `project` in `workspace`."""
        found = []
        for entry in self.hf_read_namespaces:
            ws, scope_project, namespace = read_grant(entry)
            if ws in ("*", workspace) and scope_project in ("*", project) and namespace not in found:
                found.append(namespace)
        return found

    def hub_read_namespaces_anywhere(self) -> set[str]:
        """Every namespace some project may read through the daemon's token."""
        return {read_grant(entry)[2] for entry in self.hf_read_namespaces}

    @field_validator("providers", "engine_outputs", mode="before")
    @classmethod
    def _providers_json(cls, value: object) -> object:
        """BASHGYM_PROVIDERS and BASHGYM_ENGINE_OUTPUTS are JSON objects; bashgym.toml uses tables."""
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON ({exc.msg})") from exc
        return value

    @property
    def ledger_path(self) -> Path:
        return self.home / "ledger.sqlite3"

    @property
    def admin_token_path(self) -> Path:
        return self.home / "admin.token"

    @property
    def lock_path(self) -> Path:
        return self.home / "daemon.lock"

    @property
    def log_path(self) -> Path:
        """The daemon's log file; its rotated predecessors sit beside it as daemon.log.1, .2, ..."""
        return self.home / DAEMON_LOG

    @property
    def endpoint_path(self) -> Path:
        """Where the running daemon writes its address, so the CLI finds it (port 0, a socket)."""
        return self.home / "daemon.json"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def artifacts_dir(self) -> Path:
        return self.home / "artifacts"


def read_grant(entry: str) -> tuple[str, str, str]:
    """(workspace, project, namespace) of one hf_read_namespaces entry, "*" for every workspace or project.

    NAMESPACE, WORKSPACE/PROJECT:NAMESPACE or WORKSPACE/*:NAMESPACE: a project is named with its workspace, as a
    project id alone names a project in every workspace."""
    scope, _, namespace = entry.rpartition(":")
    workspace, slash, project = scope.partition("/")
    if not HUB_NAMESPACE_RE.match(namespace) or (
        scope and not (slash and IDENTIFIER_RE.match(workspace) and (project == "*" or IDENTIFIER_RE.match(project)))
    ):
        raise ValueError(
            f"{entry!r} is not a read namespace; write NAMESPACE (every project), WORKSPACE/PROJECT:NAMESPACE "
            "(one project) or WORKSPACE/*:NAMESPACE (one workspace), e.g. acme or default/nightly:acme"
        )
    return (workspace, project, namespace) if scope else ("*", "*", namespace)


def secret_env_names(settings: Settings) -> list[str]:
    """The environment variables that hold secrets: those named as such, and the keys each integration reads."""
    names = [*settings.secret_env_vars, settings.discord_token_env, settings.nemo_api_key_env]
    names += [settings.hf_jobs_token_env, settings.hf_job_token_env, settings.wandb_api_key_env, *MLFLOW_SECRET_ENV]
    names += [provider.api_key_env for provider in settings.providers.values()]
    return list(dict.fromkeys(names))


def secret_values(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The values of the environment variables named as secrets, to hand to the redactor."""
    return [environ[name] for name in secret_env_names(settings) if environ.get(name)]


def child_environment(settings: Settings, environ: Mapping[str, str], *, hub_upload: bool = False) -> dict[str, str]:
    """The environment of a process the daemon starts: the part of the daemon's own `environ` a trainer, evaluator
    or tool reads (CHILD_ENV_NAMES and _PREFIXES, plus trainer_env_vars), never a secret's variable; the failpoint
    setting; and, for a run that uploads to the Hub, the daemon's Hub token, under the name the trainer reads."""
    secret = set(secret_env_names(settings))
    extra = set(settings.trainer_env_vars)
    child = {
        name: value
        for name, value in environ.items()
        if name not in secret and (name in CHILD_ENV_NAMES or name.startswith(CHILD_ENV_PREFIXES) or name in extra)
    }
    if settings.failpoint:
        child["BASHGYM_FAILPOINT"] = settings.failpoint
    if hub_upload and environ.get(HUB_TOKEN_ENV):
        child[HUB_TOKEN_ENV] = environ[HUB_TOKEN_ENV]
    return child


def load_settings(environ: dict[str, str], **overrides: Any) -> Settings:
    """Build Settings from an environment mapping and $BASHGYM_HOME/bashgym.toml; overrides win.

    Precedence: explicit overrides (command-line flags), then the environment, then bashgym.toml.
    """
    env_values = {
        key[len("BASHGYM_") :].lower(): value
        for key, value in environ.items()
        if key.startswith("BASHGYM_") and key[len("BASHGYM_") :].lower() in Settings.model_fields
    }
    home = Path(overrides.get("home") or env_values.get("home") or Path.home() / ".bashgym")
    file_values = _read_toml(home / "bashgym.toml")
    merged = {**file_values, **env_values, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        # model_validate skips BaseSettings' own source loading: the environment was read above, once.
        return Settings.model_validate({**merged, "home": home})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(unknown)"
        raise InvalidInput(
            f"Setting {field} is invalid: {first['msg']}.",
            hint=f"Fix BASHGYM_{field.upper()} or {field} in {home / 'bashgym.toml'}.",
        ) from exc


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not valid TOML: {exc}.", hint="Fix the file or remove it.") from exc


def local_thread_limit(settings: Settings, environ: dict[str, str], cpu_count: int) -> int | None:
    """The torch threads a local trainer or evaluator gets (its `--threads`), or None to let it take the cores the
    load leaves free when it starts (trainers/cores.py).

    torch starts a thread per core in every process: two runs side by side on 2 cores took 82 ms a step
    each instead of 17 with one thread apiece, as each waited on the other's threads. An explicit setting wins,
    then the daemon's own OMP_NUM_THREADS (the children inherit it as it is); otherwise `local_slots` runs share
    the cores.
    """
    if settings.trainer_threads:
        return settings.trainer_threads
    if environ.get("OMP_NUM_THREADS") or settings.local_slots == 1:
        return None
    return max(1, cpu_count // settings.local_slots)
