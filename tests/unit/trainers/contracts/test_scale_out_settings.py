"""Scale-out request fields, the accelerate config a run gets, its GPU-hours, and which rank a process is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.contracts.topology import (
    DistributedRefused,
    RankInfo,
    accelerate_config,
    charged_gpus,
    check_strategy,
)
from bashgym.trainers.speed import Machine, SpeedRefused, resolve_bf16, resolve_mixed_precision
from pydantic import ValidationError

CPU = Machine(cuda=False, bf16_supported=False, memory_bytes=16 * 1024**3, cpu_count=2, has_liger=False)
H200 = Machine(cuda=True, bf16_supported=True, memory_bytes=141 * 1024**3, cpu_count=16, has_liger=False)


def request(**overrides: Any) -> TrainingRequest:
    return TrainingRequest.model_validate(
        {"strategy": "sft", "base_model": "m", "dataset_path": "/d.jsonl", **overrides}
    )


def test_one_process_with_ddp_is_the_plain_path_and_anything_else_goes_through_accelerate() -> None:
    assert not request().is_distributed
    assert request(num_processes=2).is_distributed
    assert request(distributed_strategy="fsdp").is_distributed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_processes": 3, "num_machines": 2, "compute_target": "ssh-group:pair"}, "does not split evenly"),
        ({"num_processes": 2, "num_machines": 2}, "needs compute_target `ssh-group:<group_id>`"),
        ({"num_processes": 2, "compute_target": "cloud:nemo-customizer"}, "NeMo Customizer places its own jobs"),
        ({"mixed_precision": "bf16", "bf16": False}, "contradicts bf16 false"),
        ({"mixed_precision": "fp16", "bf16": True}, "contradicts bf16 true"),
        ({"distributed_strategy": "zero3"}, "distributed_strategy"),
        ({"num_processes": 0}, "num_processes"),
        ({"compute_target": "ssh-group:../x"}, "does not name a device group"),
    ],
)
def test_scale_out_fields_refuse_what_cannot_run_saying_what_to_send(fields: dict[str, Any], message: str) -> None:
    with pytest.raises((ValidationError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        request(**fields)


def test_a_device_group_target_names_the_group_not_a_device() -> None:
    spread = request(compute_target="ssh-group:pair", num_machines=2, num_processes=4)
    assert (spread.lane, spread.device_group, spread.ssh_device) == ("ssh-group", "pair", None)


def test_mixed_precision_follows_bf16_when_auto_and_fixes_it_otherwise() -> None:
    assert resolve_mixed_precision(request(), H200) == "bf16"
    assert resolve_mixed_precision(request(), CPU) == "no"
    assert resolve_mixed_precision(request(mixed_precision="no"), H200) == "no"
    assert resolve_bf16("auto", H200, "no").used is False
    assert resolve_bf16("auto", CPU, "bf16").describe() == "auto -> on (mixed_precision bf16)"
    with pytest.raises(SpeedRefused, match="fp16 needs a CUDA GPU"):
        resolve_mixed_precision(request(mixed_precision="fp16"), CPU)


def test_the_accelerate_config_of_ddp_fsdp_and_deepspeed() -> None:
    ddp = accelerate_config(request(num_processes=2), mixed_precision="no")
    assert (ddp["distributed_type"], ddp["num_processes"], ddp["main_process_port"]) == ("MULTI_GPU", 2, 0)
    assert ddp["use_cpu"] is False, "accelerate's CPU switch would take its MPI launcher"
    spread = accelerate_config(
        request(compute_target="ssh-group:pair", num_machines=2, num_processes=2),
        mixed_precision="bf16",
        machine_rank=1,
        main_address="10.0.0.5",
        main_port=29600,
    )
    assert {k: spread[k] for k in ("num_machines", "machine_rank", "main_process_ip", "main_process_port")} == {
        "num_machines": 2,
        "machine_rank": 1,
        "main_process_ip": "10.0.0.5",
        "main_process_port": 29600,
    }
    fsdp = accelerate_config(request(num_processes=8, distributed_strategy="fsdp"), mixed_precision="bf16")
    assert fsdp["distributed_type"] == "FSDP" and fsdp["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    zero3 = accelerate_config(request(num_processes=8, distributed_strategy="deepspeed-zero3"), mixed_precision="bf16")
    assert zero3["distributed_type"] == "DEEPSPEED" and zero3["deepspeed_config"]["zero_stage"] == 3
    # What the launcher writes is YAML accelerate reads back into the same values.
    assert yaml.safe_load(yaml.safe_dump(zero3)) == zero3


def test_strategies_a_machine_cannot_run_are_refused_with_what_to_do() -> None:
    with pytest.raises(DistributedRefused, match=r"needs the deepspeed package.*pip install deepspeed"):
        check_strategy(request(distributed_strategy="deepspeed-zero2"), cuda=True, has_deepspeed=False)
    with pytest.raises(DistributedRefused, match="needs CUDA GPUs"):
        check_strategy(request(distributed_strategy="deepspeed-zero2"), cuda=False, has_deepspeed=True)
    with pytest.raises(DistributedRefused, match="fsdp shards over CUDA GPUs"):
        check_strategy(request(distributed_strategy="fsdp"), cuda=False)
    check_strategy(request(num_processes=2), cuda=False)
    check_strategy(request(distributed_strategy="deepspeed-zero3"), cuda=True, has_deepspeed=True)


def test_gpu_hours_are_charged_for_every_rank() -> None:
    assert charged_gpus(request(), 8) == 8, "one process holds the lane's GPUs"
    assert charged_gpus(request(num_processes=4), 8) == 4
    assert charged_gpus(request(compute_target="ssh-group:pair", num_machines=2, num_processes=16), 8) == 16
    assert charged_gpus(request(num_processes=2), 0) == 0, "CPU ranks hold no GPU"


def test_a_process_knows_its_rank_from_torch_distributed_environment() -> None:
    rank = RankInfo.from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1"})
    assert (rank.is_main, rank.is_distributed) == (False, True)
    assert rank.describe() == "rank 3 of 4 (machine 1, local rank 1)"
    assert RankInfo.from_env({}) == RankInfo() and RankInfo().is_main


@pytest.mark.parametrize(
    ("strategy", "kind"),
    [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("deepspeed-zero2", "DEEPSPEED"), ("deepspeed-zero3", "DEEPSPEED")],
)
def test_accelerate_reads_each_written_config_back(strategy: str, kind: str, tmp_path: Path) -> None:
    """The config is accelerate's own format: its loader takes every key (an unknown one raises there)."""
    from accelerate.commands.config.config_args import load_config_from_file

    config = accelerate_config(request(num_processes=2, distributed_strategy=strategy), mixed_precision="bf16")
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load_config_from_file(str(path))
    assert (str(loaded.distributed_type).rsplit(".", 1)[-1], loaded.num_processes) == (kind, 2)
    assert str(loaded.mixed_precision) == "bf16"
