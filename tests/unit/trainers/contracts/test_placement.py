"""Where an evaluator puts its model: the rule on plain facts (no GPU needed), and the move on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from bashgym.trainers.contracts.placement import GIB, choose_placement, describe, device_of, place, ran_alike, ran_on
from bashgym.trainers.tiny import build_tiny
from transformers import AutoModelForCausalLM

H200 = {"cuda": True, "bf16": True, "gpu": "NVIDIA H200", "free_bytes": 140 * GIB}
BILLION = 10**9


def test_auto_takes_a_gpu_with_room_in_bfloat16() -> None:
    placement = choose_placement("auto", **H200, params=8 * BILLION)
    assert (placement.device, placement.dtype, placement.gpu) == ("cuda", "bfloat16", "NVIDIA H200")


def test_auto_without_a_gpu_runs_on_the_cpu_in_float32() -> None:
    placement = choose_placement("auto", cuda=False, bf16=False, gpu=None, free_bytes=None, params=BILLION)
    assert placement.to_json() == {"device": "cpu", "dtype": "float32", "reason": "no CUDA GPU", "gpu": None}


def test_auto_leaves_a_gpu_without_room_for_the_model_and_says_how_much_was_missing() -> None:
    # A training run holds all but 10 GiB; an 8B model needs about 16 GiB of bfloat16 weights.
    placement = choose_placement("auto", **{**H200, "free_bytes": 10 * GIB}, params=8 * BILLION)
    assert (placement.device, placement.dtype) == ("cpu", "float32")
    assert placement.reason == "NVIDIA H200 has 10.0 GiB free and the model needs about 19.9 GiB"


def test_a_model_that_just_fits_goes_to_the_gpu() -> None:
    need = int(BILLION * 2 * 1.2) + 2 * GIB
    assert choose_placement("auto", **{**H200, "free_bytes": need}, params=BILLION).device == "cuda"
    assert choose_placement("auto", **{**H200, "free_bytes": need - 1}, params=BILLION).device == "cpu"


def test_a_gpu_without_bfloat16_runs_in_float32_and_counts_four_bytes_a_parameter() -> None:
    t4 = {**H200, "bf16": False, "gpu": "Tesla T4", "free_bytes": 15 * GIB}
    placement = choose_placement("auto", **t4, params=2 * BILLION)
    assert (placement.device, placement.dtype) == ("cuda", "float32")
    assert placement.reason == "a CUDA GPU with room; float32: the GPU has no bfloat16"
    assert choose_placement("auto", **t4, params=3 * BILLION).device == "cpu"  # 3e9 x 4 B x 1.2 + 2 GiB > 15 GiB


def test_asking_for_a_device_overrides_the_memory_check() -> None:
    assert choose_placement("cpu", **H200, params=BILLION).to_json()["reason"] == "asked for cpu"
    forced = choose_placement("cuda", **{**H200, "free_bytes": GIB}, params=8 * BILLION)
    assert (forced.device, forced.dtype, forced.reason) == ("cuda", "bfloat16", "asked for cuda; bfloat16")


def test_asking_for_cuda_on_a_host_without_one_says_what_to_do() -> None:
    with pytest.raises(ValueError, match="torch sees no CUDA GPU on this host; evaluate with --device auto"):
        choose_placement("cuda", cuda=False, bf16=False, gpu=None, free_bytes=None, params=BILLION)


def test_a_bfloat16_model_is_placed_on_this_cpu_in_float32(tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "model")).to(torch.bfloat16)
    placed, placement = place(model, "cpu")  # what auto gives on a host without a GPU, asked for on any host
    assert placement.device == "cpu" and placement.dtype == "float32"
    assert device_of(placed) == torch.device("cpu")
    assert {p.dtype for p in placed.parameters()} == {torch.float32}


def test_a_recorded_placement_reads_in_a_few_words_and_an_unrecorded_one_says_so() -> None:
    gpu = choose_placement("auto", **H200, params=BILLION).to_json()
    cpu = choose_placement("cpu", **H200, params=BILLION).to_json()
    assert describe(gpu) == "cuda bfloat16 (NVIDIA H200)" and describe(cpu) == "cpu float32"
    described = ran_on({"placement": gpu}, {"placement": None}, {})
    assert described == ["cuda bfloat16 (NVIDIA H200)", "no model", "not recorded"]


def test_results_ran_alike_on_one_placement_the_gold_solutions_beside_any_and_unrecorded_is_unknown() -> None:
    assert ran_alike("cpu float32", "cpu float32") is True
    assert ran_alike("no model", "cuda bfloat16 (NVIDIA H200)") is True
    assert ran_alike("cpu float32", "cuda bfloat16 (NVIDIA H200)") is False
    assert ran_alike("not recorded", "cpu float32") is None
