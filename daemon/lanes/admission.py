"""What a lane must offer before a run is registered on it: a ready device or device group, a machine share it
can hold, a strategy its trainer's Python can run. Every refusal says what to do; nothing is uploaded first."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bashgym.client.errors import NotFound, RuleRejected
from bashgym.daemon.host_paths import check_device_reach
from bashgym.daemon.lanes.nemo_data import TRAINING_TYPES
from bashgym.daemon.lanes.ssh import Device
from bashgym.daemon.settings import Settings, child_environment
from bashgym.ledger.store import Ledger
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.topology import DistributedRefused, check_strategy

# NeMo Customizer runs supervised fine-tuning and DPO (LoRA or full weights) on data the launch uploads; every other
# method needs a lane that runs our trainers.
NEMO_METHODS_LANE = frozenset(TRAINING_TYPES)
_NEVER_CHECKED = {"reasons": ["it has never been preflighted"]}
# What the local trainer's Python offers a scaled-out run; run only for strategies other than ddp (torch's
# import takes seconds).
_PROBE = (
    "import importlib.metadata, importlib.util, json, torch; "
    "print(json.dumps({'cuda': torch.cuda.is_available(), "
    "'deepspeed': importlib.util.find_spec('deepspeed') is not None, "
    "'bitsandbytes': importlib.util.find_spec('bitsandbytes') is not None, "
    "'peft': importlib.metadata.version('peft') if importlib.util.find_spec('peft') else '', "
    "'trackers': [t for t in ('mlflow', 'wandb', 'trackio') if importlib.util.find_spec(t)]}))"
)


async def check_lane(
    ledger: Ledger, settings: Settings, environ: Mapping[str, str], workspace: str, request: TrainingRequest
) -> Device | None:
    """Refuse a lane that cannot take this run; the SSH lane's device when it can. `environ` is the daemon's own,
    for the probe of the local trainer's Python."""
    if request.lane == "ssh":
        device_id = request.ssh_device or ""
        record = await _found(ledger.get_device(workspace, device_id))
        require_ready(record, f"Device {device_id}", f"bashgym device preflight {device_id}")
        facts = (record["preflight"] or {}).get("facts") or {}
        check_machine_share(request, [device_id], [len(facts.get("gpus") or [])])
        await check_device_reach(settings, record)
        return Device.from_record(record)
    if request.lane == "ssh-group":
        await check_group(ledger, settings, workspace, request)
    elif request.lane == "slurm":
        await check_cluster(ledger, settings, workspace, request)
    elif request.lane == "nemo":
        await check_nemo(settings, request)
    elif request.lane == "local":
        await check_local_strategy(settings, environ, request)
    return None


async def _found(lookup: Any) -> dict[str, Any]:
    """A registry record, or the lookup's NotFound as a refusal of the launch (with its hint)."""
    try:
        return dict(await lookup)
    except NotFound as exc:
        raise RuleRejected(exc.message, hint=exc.hint) from exc


async def check_cluster(ledger: Ledger, settings: Settings, workspace: str, request: TrainingRequest) -> None:
    """A Slurm cluster takes a run it can place: registered, reachable as it was registered (its login device, or
    this host's shared root still holding its shared directory), and no more nodes than it allows."""
    cluster_id = request.slurm_cluster or ""
    cluster = await _found(ledger.get_cluster(workspace, cluster_id))
    if cluster["access"] == "ssh":
        await check_device_reach(settings, await _found(ledger.get_device(workspace, cluster["login_device_id"])))
    elif settings.slurm_shared_root is None:
        raise RuleRejected(
            f"Cluster {cluster_id} is reached on the daemon's host, and BASHGYM_SLURM_SHARED_ROOT is not set.",
            hint="The operator sets it to the directory holding the cluster's shared directory, then restarts.",
        )
    if request.num_machines > cluster["max_nodes"]:
        raise RuleRejected(
            f"num_machines {request.num_machines} is more than cluster {cluster_id} allows ({cluster['max_nodes']} "
            "nodes).",
            hint=f"Set num_machines {cluster['max_nodes']} or fewer.",
        )


def require_ready(record: dict[str, Any], what: str, command: str) -> None:
    """A device or group is ready only when its last preflight passed."""
    if not record["ready"]:
        verdict = record["preflight"] or _NEVER_CHECKED
        raise RuleRejected(
            f"{what} is not ready: {'; '.join(verdict['reasons'])}.",
            hint=f"Fix it, then run {command}.",
            details={"preflight": record["preflight"]},
        )


async def check_group(ledger: Ledger, settings: Settings, workspace: str, request: TrainingRequest) -> None:
    """A device group takes a run when its last preflight passed, every member is still ready, it has one
    member per machine, and each member has a GPU per process (or none of them has GPUs)."""
    group_id = request.device_group or ""
    command = f"bashgym device group preflight {group_id}"
    group = await _found(ledger.get_device_group(workspace, group_id))
    require_ready(group, f"Device group {group_id}", command)
    members = list(group["members"])
    records = [await ledger.get_device(workspace, m) for m in members]
    for record in records:
        await check_device_reach(settings, record)
    stale = [record["device_id"] for record in records if not record["ready"]]
    if stale:
        raise RuleRejected(
            f"Device group {group_id}: {', '.join(stale)} failed a preflight since the group's last one.",
            hint=f"Fix it, then run {command}.",
        )
    if request.num_machines != len(members):
        raise RuleRejected(
            f"Device group {group_id} has {len(members)} machines but num_machines is {request.num_machines}.",
            hint=f"Set num_machines {len(members)} (or leave it out: a group's launch fills it in).",
        )
    verdicts = (group["preflight"].get("facts") or {}).get("members") or []
    check_machine_share(request, members, [len((m.get("facts") or {}).get("gpus") or []) for m in verdicts])


def check_machine_share(request: TrainingRequest, machines: list[str], gpus: list[int]) -> None:
    """Each machine runs num_processes / num_machines ranks: one GPU each, or CPU ranks where it has none."""
    if not request.is_distributed:
        return
    share = request.num_processes // request.num_machines
    short = [f"{name} ({count})" for name, count in zip(machines, gpus, strict=False) if 0 < count < share]
    if short:
        raise RuleRejected(
            f"{share} processes per machine need as many GPUs; too few on {', '.join(short)}.",
            hint="Lower num_processes, or use machines with more GPUs.",
        )
    try:
        check_strategy(request, cuda=any(gpus), has_deepspeed=True)  # the device's launcher checks the package
    except DistributedRefused as exc:
        raise RuleRejected(str(exc), hint="Nothing was launched.") from exc


async def check_local_strategy(settings: Settings, environ: Mapping[str, str], request: TrainingRequest) -> None:
    """A local strategy other than ddp needs what the trainer's Python has: CUDA, and DeepSpeed's package.
    ddp runs anywhere accelerate does (GPUs, or gloo on the CPU); the launcher refuses more ranks than GPUs."""
    if not request.is_distributed or request.distributed_strategy == "ddp":
        return
    facts = await trainer_python_facts(settings, environ)
    try:
        check_strategy(request, cuda=bool(facts.get("cuda")), has_deepspeed=bool(facts.get("deepspeed")))
    except DistributedRefused as exc:
        raise RuleRejected(f"{exc} (checked with {trainer_python(settings)})", hint="Nothing was launched.") from exc


async def check_nemo(settings: Settings, request: TrainingRequest) -> None:
    """The lane is configured, runs the method, and trains a Customizer config; the upload comes at launch."""
    if not settings.nemo_base_url:
        raise RuleRejected(
            "The cloud:nemo-customizer lane is not configured on this daemon.",
            hint="Set BASHGYM_NEMO_BASE_URL (and the key variable named by BASHGYM_NEMO_API_KEY_ENV).",
        )
    if request.method not in NEMO_METHODS_LANE:
        raise RuleRejected(
            f"The cloud:nemo-customizer lane does not run method `{request.method}`: it runs sft and dpo, with a "
            "LoRA adapter or all weights (use_lora), on NeMo Customizer.",
            hint="Use compute_target `local`, `ssh:<device_id>` or `ssh-group:<group_id>` for this method.",
        )
    if request.num_epochs != int(request.num_epochs):
        raise RuleRejected(
            f"num_epochs {request.num_epochs:g}: NeMo Customizer trains whole epochs.",
            hint="Send a whole number of epochs, or bound the run with max_steps.",
        )
    if await asyncio.to_thread(Path(request.base_model).exists):
        raise RuleRejected(
            f"base_model `{request.base_model}` is a local path; NeMo Customizer trains from its own "
            "model configs such as `meta/llama-3.2-1b-instruct@v1.0.0+A100`.",
            hint="Name a Customizer config as base_model, or train on `local` or `ssh:<device_id>`.",
        )


async def shaped_for_lane(ledger: Ledger, workspace: str, request: TrainingRequest) -> TrainingRequest:
    """A device-group launch that leaves out num_machines (and num_processes) gets one machine per member
    (and one process per machine); anything else is taken as sent."""
    group_id = request.device_group
    if group_id is None or "num_machines" in request.model_fields_set:
        return request
    try:
        group = await ledger.get_device_group(workspace, group_id)
    except NotFound:
        return request  # check_lane refuses it, with the hint
    machines = len(group["members"])
    shape = {"num_machines": machines}
    if "num_processes" not in request.model_fields_set:
        shape["num_processes"] = machines
    return TrainingRequest.model_validate({**request.model_dump(exclude_unset=True), **shape})


def trainer_python(settings: Settings) -> str:
    """The Python that runs local trainers and evaluators."""
    return settings.trainer_python or sys.executable


async def trainer_python_facts(settings: Settings, environ: Mapping[str, str]) -> dict[str, Any]:
    """What the local lane's trainer Python has: CUDA, DeepSpeed, bitsandbytes, peft, the trackers a run may report
    to (it imports torch: seconds). It
    runs as a trainer would, with child_environment's share of the daemon's `environ`."""
    python = trainer_python(settings)
    proc = await asyncio.create_subprocess_exec(
        python,
        "-c",
        _PROBE,
        env=child_environment(settings, environ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuleRejected(
            f"The trainer's Python {python} could not be checked: {err.decode(errors='replace').strip()[-500:]}",
            hint="Install bashgym[train] into it, or set trainer_python to one that has it.",
        )
    return dict(json.loads(out.decode().strip().splitlines()[-1]))
