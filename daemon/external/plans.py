"""SkyPilot and dstack plans: a training request rendered as the engine's own task file (engines.py checks it with
the engine's own library where it is installed, and launches it only through the engine's own client).

A plan is only a plan (the operator contract): rendering runs nothing and has no job id. The task it renders runs
`python -m bashgym.trainers.external_job --request /bashgym/request.json --workdir /bashgym/out` on one machine,
with the dataset, the request (its paths rewritten to the mounts, its target `local`) and the constraints file
mounted under /bashgym, and the checkpoint store mounted at /bashgym/out. Secrets are named, never written: the
engine injects them at launch.

Relied on (read in the installed sources of skypilot 0.14.1 and dstack 0.22.5):
- SkyPilot task YAML: `name, resources{accelerators, cpus, memory, disk_size, use_spot, infra, max_hourly_cost},
  num_nodes, envs, secrets, file_mounts, setup, run` (sky/utils/schemas.py); `infra: cloud[/region]` replaces the
  deprecated `cloud`/`region`; a secret with a null value is a reference resolved at launch (`--secret NAME`);
  storage mounts `{source: <bucket URI>, mode: MOUNT_CACHED}`; `sky.Task.from_yaml_config` validates a task.
  `sky.api_info()` asks the API server without starting one; `sky.launch` and `sky.enabled_clouds` start a local
  one when none answers.
- dstack task (`type: task`): `name, python, env, files[{local_path, path}], commands, resources{gpu, cpu, memory,
  disk}, spot_policy, max_price, max_duration, backends, regions, volumes[{name, path}], nodes`; an `env` entry
  with no value is taken from the environment of whoever applies the plan; relative `local_path`s are read next to
  the configuration file; `parse_run_configuration` validates a run configuration
  (dstack/_internal/core/models/configurations.py); `dstack.api.Client.from_config()` reads
  `~/.dstack/config.yml`, and `client.runs.apply_configuration` submits a run.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from bashgym.client.errors import InvalidInput
from bashgym.daemon.version import bashgym_version
from bashgym.trainers.contracts.request import InvalidRequest, TrainingRequest
from pydantic import ValidationError

Engine = Literal["skypilot", "dstack"]
Document = dict[str, Any]  # the engine's own task definition, as its YAML holds it

REQUEST_REMOTE = "/bashgym/request.json"
CONSTRAINTS_REMOTE = "/bashgym/constraints.txt"
OUT_REMOTE = "/bashgym/out"
DATA_REMOTE = PurePosixPath("/bashgym/data")
REQUEST_FILE = "request.json"
PLAN_FILES: dict[str, str] = {"skypilot": "task.yaml", "dstack": "bashgym.dstack.yml"}
LIBRARIES: dict[str, str] = {"skypilot": "sky", "dstack": "dstack"}
# SkyPilot mounts these bucket schemes (sky/data/storage.py); Azure containers are https:// URLs there.
SKYPILOT_STORES = ("s3://", "gs://", "r2://", "cos://", "oci://", "nebius://", "cw://", "https://")
_ACCELERATORS = re.compile(r"^(?P<name>[A-Za-z0-9_-]+)(:(?P<count>[1-9][0-9]*))?$")
_AT_LEAST = re.compile(r"^[0-9]+(\.[0-9]+)?\+?$")  # SkyPilot's "8" (exactly) or "8+" (at least)
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")  # both engines' run names fit this
_DSTACK_VOLUME = re.compile(r"^[a-z][a-z0-9-]{1,40}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU_MEMORY = re.compile(r"^(?P<name>.+)-(?P<gb>[0-9]+)GB$", re.IGNORECASE)


def default_install_spec() -> str:
    """What the job installs: this daemon's own bashgym, with the training extra."""
    return f"bashgym[train]=={bashgym_version()}"


@dataclass(frozen=True)
class PlanOptions:
    """What a plan asks of the engine besides the training request; resources in SkyPilot's syntax.

    `cpus` and `memory` (GB) are "8" (exactly) or "8+" (at least); `accelerators` is NAME[:COUNT] ("H100:1",
    "A100-80GB:8") or None for a machine without one. `checkpoint_store` is a bucket URI for SkyPilot and a dstack
    volume name for dstack (dstack mounts volumes, not buckets). `plan_dir` is where the caller writes the plan
    and request.json (write_plan): given, every local path in the plan is absolute.
    """

    accelerators: str | None = "H100:1"
    cpus: str | None = None
    memory: str | None = None
    disk_size_gb: int | None = None
    use_spot: bool = False
    cloud: str | None = None
    region: str | None = None
    install_spec: str = field(default_factory=default_install_spec)
    constraints_path: Path | None = None
    checkpoint_store: str | None = None
    name: str | None = None
    max_price_per_hour: float | None = None
    timeout_minutes: int | None = None
    python_version: str = "3.12"
    secret_names: tuple[str, ...] = ("HF_TOKEN",)
    plan_dir: Path | None = None


@dataclass(frozen=True)
class RenderedPlan:
    """One rendered plan: the engine's document and the YAML its CLI reads, with what it mounts and how to run it.

    `validation` is `{"checked", "valid", "library", "reason"}`: `checked` is false where the engine's library is
    not importable here, and then `valid` is None. `request` is the request the job trains (write it next to the
    plan as request.json); `files` maps each local path the plan mounts to its path on the engine's machine.
    """

    engine: Engine
    name: str
    document: Document
    text: str
    digest: str
    request: dict[str, Any]
    request_digest: str
    files: dict[str, str]
    command: str
    plan_file: str
    secret_names: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    validation: dict[str, Any] = field(default_factory=dict)


def render_plan(engine: Engine, request: TrainingRequest, options: PlanOptions) -> RenderedPlan:
    """Render `request` as a SkyPilot or dstack task (daemon/external/engines.py validates and launches it).

    Raises:
        InvalidInput: what the engine cannot take as sent, saying what to send instead.
    """
    _check_options(engine, request, options)
    shipped = shipped_request(request)
    request_digest = _sha256(canonical_json(shipped))
    name = options.name or f"bashgym-{request.method.replace('_', '-')}-{request_digest[:8]}"
    files = _mounts(request, options)
    match engine:
        case "skypilot":
            document = _skypilot_document(request, options, name=name, files=files, request_digest=request_digest)
        case "dstack":
            document = _dstack_document(request, options, name=name, files=files, request_digest=request_digest)
    command = _command(engine, options, name=name)
    text = _yaml_text(engine, document, command=command, secret_names=options.secret_names)
    return RenderedPlan(
        engine=engine,
        name=name,
        document=document,
        text=text,
        digest=_sha256(text),
        request=shipped,
        request_digest=request_digest,
        files=files,
        command=command,
        plan_file=PLAN_FILES[engine],
        secret_names=options.secret_names,
        warnings=_warnings(engine, options),
        validation={"checked": False, "valid": None, "library": None, "reason": "not checked yet (engines.validate)"},
    )


def shipped_request(request: TrainingRequest) -> dict[str, Any]:
    """The request the job trains: its data paths at the mounts, its target `local` (it trains where it runs)."""
    data = request.model_dump(mode="json", exclude_unset=True)
    for stale in ("use_remote_ssh", "device_id"):  # set for ssh targets; a local request must not carry them
        data.pop(stale, None)
    data["compute_target"] = "local"
    data["dataset_path"] = _remote_data("train", request.dataset_path)
    if request.eval_dataset_path is not None:
        data["eval_dataset_path"] = _remote_data("eval", request.eval_dataset_path)
    try:
        return TrainingRequest.model_validate(data).model_dump(mode="json", exclude_unset=True)
    except (InvalidRequest, ValidationError) as exc:
        raise InvalidInput(f"The request cannot train inside a plan's job: {exc}") from exc


def canonical_json(value: Any) -> str:
    """The form both sides digest: the job (trainers/external_job.py) digests the request it reads the same way."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def write_plan(plan: RenderedPlan, directory: Path) -> Path:
    """Write the plan file and request.json into `directory` (blocking: call it in a thread); the plan's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / REQUEST_FILE).write_text(json.dumps(plan.request, indent=2, sort_keys=True) + "\n")
    path = directory / plan.plan_file
    path.write_text(plan.text)
    return path


def _check_options(engine: Engine, request: TrainingRequest, options: PlanOptions) -> None:
    """Refuse what the engine or the job cannot take, each with what to send instead."""
    _check_data(request)
    _check_topology(request, options)
    if request.lane == "nemo":
        raise InvalidInput(
            "A cloud:nemo-customizer request names a Customizer config as its model, which a plan's machine cannot "
            "train; send the request with a hub model id and compute_target `local`."
        )
    if request.grpo_reward_source == "reward_model":
        raise InvalidInput(
            "grpo_reward_source `reward_model` reads the reward model's files on the daemon's host, which a plan's "
            "machine cannot reach; reward with each row's verifier, or train on compute_target `local`."
        )
    _check_resources(options)
    _check_store(engine, options.checkpoint_store)
    if options.constraints_path is not None and not options.constraints_path.is_file():
        raise InvalidInput(
            f"constraints_path {options.constraints_path} is not a file; pass the project's constraints.txt, "
            "or none to install without pins."
        )
    if options.name is not None and not _NAME.match(options.name):
        raise InvalidInput(
            f"Plan name {options.name!r} is not a run name both engines take; use 2 to 40 lowercase letters, digits "
            "and hyphens, starting with a letter (e.g. bashgym-sft-nightly)."
        )
    bad = [n for n in options.secret_names if not _ENV_NAME.match(n)]
    if bad:
        raise InvalidInput(f"Secret names {bad} are not environment variable names; name each like HF_TOKEN.")


def _check_data(request: TrainingRequest) -> None:
    for what, path in (("dataset_path", request.dataset_path), ("eval_dataset_path", request.eval_dataset_path)):
        if path is not None and not Path(path).expanduser().is_file():
            raise InvalidInput(
                f"{what} {path} is not a file on this machine; a plan mounts the file itself, so name the JSONL "
                "file (a registered dataset version must be exported to a file first)."
            )
    held_out = request.eval_dataset_path
    if (
        held_out is not None
        and Path(held_out).expanduser().resolve() == Path(request.dataset_path).expanduser().resolve()
    ):
        raise InvalidInput(
            f"eval_dataset_path is the training file {request.dataset_path}; evaluate on rows held out of training."
        )
    model = request.base_model
    if model.startswith(("/", "~", "./", "../")) or Path(model).expanduser().is_dir():
        raise InvalidInput(
            f"base_model {model} is a path on this machine, which a plan's machine cannot read; push the model to "
            "the Hub and send its id (org/name)."
        )


def _check_topology(request: TrainingRequest, options: PlanOptions) -> None:
    if request.num_processes % request.num_machines:
        raise InvalidInput(
            f"num_processes {request.num_processes} does not split evenly over num_machines {request.num_machines}; "
            "make it a multiple (num_processes counts every process on every machine)."
        )
    if request.num_machines > 1:
        raise InvalidInput(
            f"num_machines {request.num_machines}: a plan's job trains on one machine (bashgym.trainers.external_job "
            "starts one trainer there); send num_machines 1 with up to one process per GPU of that machine, or train "
            "across machines with compute_target `ssh-group:<group_id>`."
        )
    gpus = gpu_count(options.accelerators)
    if gpus and request.num_processes > gpus:
        raise InvalidInput(
            f"num_processes {request.num_processes} exceeds the {gpus} GPU(s) of accelerators "
            f"{options.accelerators!r}; ask for {_gpu_name(options.accelerators)}:{request.num_processes}, or send "
            f"num_processes {gpus}."
        )
    if not gpus and request.load_in_4bit:
        raise InvalidInput("load_in_4bit needs a CUDA GPU; set accelerators (e.g. 'H100:1') or load_in_4bit false.")


def _check_resources(options: PlanOptions) -> None:
    if options.accelerators is not None and not _ACCELERATORS.match(options.accelerators):
        raise InvalidInput(f"accelerators {options.accelerators!r} is not NAME[:COUNT]; write e.g. 'H100:1'.")
    for what, value in (("cpus", options.cpus), ("memory", options.memory)):
        if value is not None and not _AT_LEAST.match(value):
            raise InvalidInput(f"{what} {value!r} is not a number or 'N+' (at least N); write e.g. '8' or '8+'.")
    if options.disk_size_gb is not None and options.disk_size_gb < 1:
        raise InvalidInput(f"disk_size_gb {options.disk_size_gb} is not a size; write the disk in GB, e.g. 200.")
    if options.max_price_per_hour is not None and not options.max_price_per_hour > 0:
        raise InvalidInput(f"max_price_per_hour {options.max_price_per_hour} is not a price; write USD, e.g. 4.5.")
    if options.timeout_minutes is not None and options.timeout_minutes < 1:
        raise InvalidInput(f"timeout_minutes {options.timeout_minutes} is not a duration; write minutes, e.g. 120.")
    if options.region is not None and options.cloud is None:
        raise InvalidInput(f"region {options.region!r} needs its cloud; set cloud too (e.g. cloud 'aws').")


def _check_store(engine: Engine, store: str | None) -> None:
    if store is None:
        return
    if engine == "skypilot" and not store.startswith(SKYPILOT_STORES):
        raise InvalidInput(
            f"checkpoint_store {store!r} is not a bucket SkyPilot mounts; write its URI (s3://, gs://, r2://, cos://, "
            "oci://, nebius://, cw://, or https://<account>.blob.core.windows.net/<container> for Azure)."
        )
    if engine == "dstack" and not _DSTACK_VOLUME.match(store):
        raise InvalidInput(
            f"checkpoint_store {store!r}: dstack mounts volumes, not buckets; create a volume (dstack apply -f a "
            "`type: volume` file) and pass its name, or render a SkyPilot plan to mount a bucket."
        )


def _remote_data(role: str, local: str) -> str:
    return str(DATA_REMOTE / role / Path(local).name)


def _mounts(request: TrainingRequest, options: PlanOptions) -> dict[str, str]:
    """Local path -> path on the engine's machine, for every file the plan ships."""
    files = {str(Path(request.dataset_path).expanduser().resolve()): _remote_data("train", request.dataset_path)}
    if request.eval_dataset_path is not None:
        files[str(Path(request.eval_dataset_path).expanduser().resolve())] = _remote_data(
            "eval", request.eval_dataset_path
        )
    # Without plan_dir the request's path is relative: dstack reads it next to the plan file, SkyPilot from the
    # folder `sky launch` runs in (the command says so).
    local_request = str(options.plan_dir.resolve() / REQUEST_FILE) if options.plan_dir else REQUEST_FILE
    files[local_request] = REQUEST_REMOTE
    if options.constraints_path is not None:
        files[str(options.constraints_path.expanduser().resolve())] = CONSTRAINTS_REMOTE
    return files


def _pip_install(spec: str, options: PlanOptions, *, pip: str) -> str:
    pins = f"-c {CONSTRAINTS_REMOTE} " if options.constraints_path is not None else ""
    return f"{pip} install {pins}{shlex.quote(spec)}"


def _train_command(python: str) -> str:
    return f"{python} -m bashgym.trainers.external_job --request {REQUEST_REMOTE} --workdir {OUT_REMOTE}"


def _skypilot_document(
    request: TrainingRequest, options: PlanOptions, *, name: str, files: dict[str, str], request_digest: str
) -> Document:
    resources: Document = {}
    if options.accelerators is not None:
        resources["accelerators"] = options.accelerators
    for key, value in (("cpus", options.cpus), ("memory", options.memory), ("disk_size", options.disk_size_gb)):
        if value is not None:
            resources[key] = value
    if options.use_spot:
        resources["use_spot"] = True
    if options.cloud is not None:
        resources["infra"] = f"{options.cloud}/{options.region}" if options.region else options.cloud
    if options.max_price_per_hour is not None:
        resources["max_hourly_cost"] = options.max_price_per_hour
    file_mounts: Document = {remote: local for local, remote in files.items()}
    if options.checkpoint_store is not None:
        # MOUNT_CACHED, not MOUNT: the trainer appends to metrics.jsonl and training.log, and a plain bucket mount
        # takes no appends; the cached mount writes locally and uploads behind.
        file_mounts[OUT_REMOTE] = {"source": options.checkpoint_store, "mode": "MOUNT_CACHED"}
    # The engine's default image may carry an older Python than bashgym needs (3.11+): the job gets its own venv.
    venv = "~/bashgym-venv"
    setup = [
        "set -e",
        "python3 -m pip install --quiet uv",
        f"python3 -m uv venv --seed --python {shlex.quote(options.python_version)} {venv}",
        _pip_install(options.install_spec, options, pip=f"{venv}/bin/pip"),
    ]
    if options.checkpoint_store is None:  # /bashgym is the engine's; the job's user may not own it
        owned = f'sudo mkdir -p {OUT_REMOTE} && sudo chown "$(id -u)" {OUT_REMOTE}'
        setup.append(f"mkdir -p {OUT_REMOTE} 2>/dev/null || {{ {owned}; }}")
    run = _train_command(f"{venv}/bin/python")
    if options.timeout_minutes is not None:  # SkyPilot has no run-time limit of its own; timeout signals the group
        run = f"timeout --kill-after=300 {options.timeout_minutes * 60} {run}"
    document: Document = {"name": name, "resources": resources, "num_nodes": request.num_machines}
    document["envs"] = {"BASHGYM_REQUEST_SHA256": request_digest, "PYTHONUNBUFFERED": "1"}
    if options.secret_names:
        document["secrets"] = dict.fromkeys(options.secret_names)  # null: a reference `--secret NAME` fills
    document.update(file_mounts=file_mounts, setup="\n".join(setup) + "\n", run=run + "\n")
    return document


def _dstack_document(
    request: TrainingRequest, options: PlanOptions, *, name: str, files: dict[str, str], request_digest: str
) -> Document:
    document: Document = {"type": "task", "name": name, "python": options.python_version}
    # A bare name is taken from the environment of whoever applies the plan: the value is never written here.
    document["env"] = [*options.secret_names, f"BASHGYM_REQUEST_SHA256={request_digest}", "PYTHONUNBUFFERED=1"]
    document["files"] = [{"local_path": local, "path": remote} for local, remote in files.items()]
    document["commands"] = [_pip_install(options.install_spec, options, pip="pip"), _train_command("python")]
    document["resources"] = _dstack_resources(options)
    document["spot_policy"] = "spot" if options.use_spot else "on-demand"
    if options.max_price_per_hour is not None:
        document["max_price"] = options.max_price_per_hour
    if options.timeout_minutes is not None:
        document["max_duration"] = f"{options.timeout_minutes}m"
    if options.cloud is not None:
        document["backends"] = [options.cloud]
    if options.region is not None:
        document["regions"] = [options.region]
    if options.checkpoint_store is not None:
        document["volumes"] = [{"name": options.checkpoint_store, "path": OUT_REMOTE}]
    document["nodes"] = request.num_machines
    return document


def _dstack_resources(options: PlanOptions) -> Document:
    """SkyPilot's resource syntax in dstack's: "A100-80GB:8" -> "A100:80GB:8", "8+" CPUs -> "8..", GB units."""
    resources: Document = {}
    if options.accelerators is not None:
        gpu = _gpu_name(options.accelerators)
        sized = _GPU_MEMORY.match(gpu)
        if sized:
            gpu = f"{sized['name']}:{sized['gb']}GB"
        resources["gpu"] = f"{gpu}:{gpu_count(options.accelerators)}"
    if options.cpus is not None:
        resources["cpu"] = options.cpus.replace("+", "..")
    if options.memory is not None:
        resources["memory"] = options.memory.removesuffix("+") + ("GB.." if options.memory.endswith("+") else "GB")
    if options.disk_size_gb is not None:
        resources["disk"] = f"{options.disk_size_gb}GB"
    return resources


def _gpu_name(accelerators: str | None) -> str:
    return (accelerators or "").partition(":")[0]


def gpu_count(accelerators: str | None) -> int:
    """GPUs asked for: SkyPilot reads a bare name as one."""
    if accelerators is None:
        return 0
    count = accelerators.partition(":")[2]
    return int(count) if count.isdigit() else 1


def _command(engine: Engine, options: PlanOptions, *, name: str) -> str:
    where = f"cd {shlex.quote(str(options.plan_dir.resolve()))} && " if options.plan_dir else ""
    match engine:
        case "skypilot":
            secrets = "".join(f" --secret {n}" for n in options.secret_names)
            # --down only with a checkpoint store: without one, the outputs live on the cluster's disk.
            down = " --down" if options.checkpoint_store else ""
            return f"{where}sky launch -c {name}{down}{secrets} {PLAN_FILES[engine]}"
        case "dstack":
            return f"{where}dstack apply -f {PLAN_FILES[engine]}"


def _yaml_text(engine: Engine, document: Document, *, command: str, secret_names: tuple[str, ...]) -> str:
    import yaml  # PyYAML comes with huggingface_hub; loaded only when a plan is rendered

    header = (
        f"# A BashGym {engine} plan (bashgym {bashgym_version()}): rendering it ran nothing.\n"
        f"# Run it by hand, from the folder holding it and {REQUEST_FILE}: {command}\n"
    )
    if secret_names:
        source = "SkyPilot reads --secret values" if engine == "skypilot" else "dstack reads them"
        header += f"# Export {', '.join(secret_names)} in that shell first: {source} from it.\n"

    # Multi-line scripts (setup, run) as literal blocks, readable as the shell lines they are; a dumper of its
    # own, so yaml's shared SafeDumper is left as it was.
    dumper: Any = type("PlanDumper", (yaml.SafeDumper,), {})

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    dumper.add_representer(str, text)
    return header + str(yaml.dump(document, Dumper=dumper, sort_keys=False, default_flow_style=False, width=1000))


def _warnings(engine: Engine, options: PlanOptions) -> tuple[str, ...]:
    if options.checkpoint_store is not None:
        return ()
    where = "the cluster's disk (sky down deletes it)" if engine == "skypilot" else "the run's container"
    return (f"No checkpoint_store: the run's outputs stay in {OUT_REMOTE} on {where}; copy them off before it goes.",)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
