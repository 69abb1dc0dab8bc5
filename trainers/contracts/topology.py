"""Scale-out (issue 14): who a trainer process is among its run's ranks, and the `accelerate launch` config of a run.

A request with num_processes > 1, num_machines > 1 or a strategy other than ddp runs through `accelerate launch`
(bashgym.trainers.launch, one per machine). Every rank is then `python -m bashgym.trainers RUN_DIR` with torch
distributed's environment (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK). Only the main process, global rank 0,
reports: protocol lines, metrics.jsonl, run_state.json, checkpoint completion markers and the final artifacts.
Importable without torch.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from bashgym.trainers.contracts.request import TrainingRequest

# The launcher's pid, set by bashgym.trainers.launch for its ranks: each rank ends with it.
LAUNCHER_PID_ENV = "BASHGYM_LAUNCHER_PID"
CONFIG_NAME = "accelerate_config.yaml"
# What one machine's launcher leaves when a rank failed: which one, how, and what it said.
LAUNCH_RECORD = "launch.json"
DEEPSPEED_STAGES = {"deepspeed-zero2": 2, "deepspeed-zero3": 3}


class DistributedRefused(RuntimeError):
    """A scale-out setting this machine cannot honour; the message says what to send instead."""


@dataclass(frozen=True)
class RankInfo:
    """This process's place in its run: global rank, world size, rank on its machine, and the machine's rank."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    machine_rank: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RankInfo:
        def number(name: str, default: int) -> int:
            value = environ.get(name, "")
            return int(value) if value.isdigit() else default

        return cls(
            rank=number("RANK", 0),
            world_size=number("WORLD_SIZE", 1),
            local_rank=number("LOCAL_RANK", 0),
            machine_rank=number("GROUP_RANK", 0),
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def describe(self) -> str:
        return f"rank {self.rank} of {self.world_size} (machine {self.machine_rank}, local rank {self.local_rank})"


MAIN = RankInfo()


# What a rank of a scaled-out run keeps until it exits: its trainer, whose model holds the gloo/NCCL group.
_HELD_UNTIL_EXIT: list[Any] = []


def hold_until_exit(trainer: Any) -> None:
    """Keep `trainer` (and the process group its wrapped model holds) alive until `exit_rank`.

    torch frees a gloo group by joining its worker threads while the freeing thread holds the GIL; a worker still
    releasing a gathered tensor waits for the GIL, so freeing the trainer after its last step deadlocked a rank
    (seen on 2 busy cores), and leaving the group to interpreter exit aborted it instead (SIGABRT, "terminate
    called without an active exception"). Either way the launcher failed a run that had finished and saved.
    """
    _HELD_UNTIL_EXIT.append(trainer)


def exit_rank(code: int) -> NoReturn:
    """End a rank without running torch's distributed destructors (see hold_until_exit); output is flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def topology(request: TrainingRequest, mixed_precision: str) -> dict[str, Any]:
    """The run's shape as recorded in its started event and model profile."""
    return {
        "launcher": "accelerate",
        "world_size": request.num_processes,
        "num_machines": request.num_machines,
        "processes_per_machine": request.num_processes // request.num_machines,
        "strategy": request.distributed_strategy,
        "mixed_precision": mixed_precision,
    }


def charged_gpus(request: TrainingRequest, gpus_per_machine: int) -> int:
    """The GPUs a run holds, for its GPU-hours: the lane's GPUs for one process, one per rank when scaled out
    (on a lane without GPUs, none)."""
    if not request.is_distributed:
        return gpus_per_machine
    return request.num_processes if gpus_per_machine else 0


def check_strategy(request: TrainingRequest, *, cuda: bool, has_deepspeed: bool | None = None) -> None:
    """Refuse, before any rank starts, a strategy this machine cannot run."""
    strategy = request.distributed_strategy
    if strategy in DEEPSPEED_STAGES:
        installed = has_deepspeed if has_deepspeed is not None else importlib.util.find_spec("deepspeed") is not None
        if not installed:
            raise DistributedRefused(
                f"distributed_strategy {strategy} needs the deepspeed package, which is not installed where the "
                "trainer runs; install it there (pip install deepspeed) or use ddp or fsdp."
            )
        if not cuda:
            raise DistributedRefused(
                f"distributed_strategy {strategy} needs CUDA GPUs and this machine has none; use ddp on the CPU."
            )
    if strategy == "fsdp" and not cuda:
        raise DistributedRefused(
            "distributed_strategy fsdp shards over CUDA GPUs and this machine has none; use ddp on the CPU."
        )


def accelerate_config(
    request: TrainingRequest,
    *,
    mixed_precision: str,
    machine_rank: int = 0,
    main_address: str = "127.0.0.1",
    main_port: int = 0,
) -> dict[str, Any]:
    """The `accelerate launch` config of one machine's share of the run.

    ddp uses accelerate's torch-distributed launcher (its MULTI_GPU type): on a machine without CUDA the trainer's
    ranks then train on the CPU over gloo. Port 0 on one machine lets accelerate pick a free port, so two runs on
    one host never collide; a multi-machine run uses its device group's rendezvous address and port.
    """
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "MULTI_GPU",
        "num_processes": request.num_processes,
        "num_machines": request.num_machines,
        "machine_rank": machine_rank,
        "main_process_ip": main_address,
        "main_process_port": main_port,
        "rdzv_backend": "static",
        "same_network": True,
        "mixed_precision": mixed_precision,
        # accelerate's own CPU switch would take its MPI launcher; the trainer chooses the CPU itself.
        "use_cpu": False,
        "gpu_ids": "all",
        "debug": False,
        "main_training_function": "main",
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
    }
    strategy = request.distributed_strategy
    if strategy == "fsdp":
        config["distributed_type"] = "FSDP"
        config["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": True,
            # Gathered on save, so a checkpoint and the final model load like any other: saved once, by rank 0.
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_offload_params": False,
            "fsdp_activation_checkpointing": False,
        }
    elif strategy in DEEPSPEED_STAGES:
        stage = DEEPSPEED_STAGES[strategy]
        config["distributed_type"] = "DEEPSPEED"
        config["deepspeed_config"] = {
            "zero_stage": stage,
            "gradient_accumulation_steps": request.gradient_accumulation_steps,
            "gradient_clipping": 1.0,
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero3_init_flag": stage == 3,
            "zero3_save_16bit_model": stage == 3,
        }
    return config


def root_cause(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Of the failed ranks (launch.json's `ranks`, from one machine or several), the one that failed first: one
    killed by a signal outright, else the earliest to record its failure (a peer of a dead rank fails too, on the
    broken connection, a moment later)."""
    killed = [r for r in ranks if r.get("signal")]
    return min(killed or ranks, key=lambda r: float(r.get("time", 0.0)))
