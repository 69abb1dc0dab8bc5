"""What each speed setting resolves to on a CPU host and on an H200, and what the run records (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.loading import load_rows
from bashgym.trainers.methods import _most_steps
from bashgym.trainers.speed import Machine, ModelShape, SpeedRefused, padding_waste, plan_speed
from pydantic import ValidationError

GiB = 1024**3
CPU = Machine(cuda=False, bf16_supported=False, memory_bytes=8 * GiB, cpu_count=2, has_liger=False)
H200 = Machine(cuda=True, bf16_supported=True, memory_bytes=141 * GiB, cpu_count=16, has_liger=False)
# The reference model of bench/gpu_sft.py: Llama-style, 374M parameters.
REFERENCE = ModelShape(
    parameters=374_000_000,
    trainable_parameters=374_000_000,
    hidden_size=1024,
    num_layers=24,
    intermediate_size=2816,
    vocab_size=32000,
    bytes_per_weight=4,
)
EIGHT_B = ModelShape(
    parameters=8_000_000_000,
    trainable_parameters=8_000_000_000,
    hidden_size=4096,
    num_layers=32,
    intermediate_size=14336,
    vocab_size=128256,
    bytes_per_weight=2,
)


def request(**fields: object) -> TrainingRequest:
    base: dict[str, object] = {"strategy": "sft", "base_model": "m", "dataset_path": "d.jsonl"}
    return TrainingRequest.model_validate({**base, **fields})


def test_every_speed_setting_defaults_to_auto() -> None:
    r = request()
    assert (r.compile, r.packing, r.liger, r.bf16, r.fused_adamw, r.gradient_checkpointing) == ("auto",) * 6
    assert (r.dataloader_workers, r.pin_memory, r.find_unused_parameters) == ("auto",) * 3


def test_a_misspelt_speed_field_is_refused_with_the_right_name() -> None:
    with pytest.raises(ValidationError, match="did you mean `packing`"):
        request(pack1ng=True)


def test_a_stored_request_with_null_checkpointing_still_validates_as_auto() -> None:
    assert request(gradient_checkpointing=None).gradient_checkpointing == "auto"


def test_on_a_cpu_host_auto_keeps_the_cpu_recipe() -> None:
    record = plan_speed(request(batch_size=8, max_seq_length=640), CPU, REFERENCE).record()
    assert record["compile"] == "auto -> off (no GPU)"
    assert record["packing"] == "auto -> off (no GPU)"
    assert record["bf16"] == "auto -> off (no GPU)"
    assert record["fused_adamw"] == "auto -> on (CPU kernel)"
    assert record["liger"] == "auto -> off (liger-kernel or Triton not installed)"
    assert record["dataloader_workers"] == "auto -> 0 (no GPU: collate in the training process)"
    assert record["pin_memory"] == "auto -> off (no GPU to copy to)"


def test_on_an_h200_auto_turns_the_fast_paths_on() -> None:
    even = [2048] * 64
    plan = plan_speed(request(batch_size=16, max_seq_length=2048), H200, REFERENCE, lengths=even)
    record = plan.record()
    assert record["compile"] == "auto -> on (GPU present)"
    assert record["bf16"] == "auto -> on (GPU supports bf16)"
    assert record["fused_adamw"] == "auto -> on (CUDA kernel)"
    assert record["packing"] == "auto -> off (lengths even: 0% padding)"
    assert record["gradient_checkpointing"].startswith("auto -> off (~")
    assert record["dataloader_workers"] == "auto -> 4 (16 CPUs beside the GPU)"
    args = plan.training_args()
    assert args["optim"] == "adamw_torch_fused" and args["bf16"] and not args["gradient_checkpointing"]
    assert args["dataloader_pin_memory"] and args["dataloader_persistent_workers"]
    assert record["pin_memory"] == "auto -> on (copies to the GPU overlap the step)"
    assert args["accelerator_config"] == {"non_blocking": True}, "a pinned batch's copy must not wait for the GPU"


def test_packing_turns_on_for_variable_lengths_on_a_gpu() -> None:
    varied = [64 + (i * 397) % 1985 for i in range(256)]
    record = plan_speed(request(batch_size=16, max_seq_length=2048), H200, REFERENCE, lengths=varied).record()
    assert record["packing"].startswith("auto -> on (lengths vary: ")
    assert padding_waste(varied, 16, 2048) > 0.3


def test_batch_size_one_pads_nothing_so_packing_stays_off() -> None:
    record = plan_speed(request(batch_size=1), H200, REFERENCE, lengths=[10, 2000]).record()
    assert record["packing"] == "auto -> off (batch_size 1 pads nothing)"


def test_checkpointing_turns_on_only_when_memory_does_not_fit() -> None:
    small_gpu = Machine(cuda=True, bf16_supported=True, memory_bytes=24 * GiB, cpu_count=8, has_liger=False)
    record = plan_speed(request(batch_size=8, max_seq_length=4096), small_gpu, EIGHT_B).record()
    assert record["gradient_checkpointing"].startswith("auto -> on (~")
    assert "exceeds 60% of GPU memory" in record["gradient_checkpointing"]
    forced = plan_speed(request(gradient_checkpointing=False), small_gpu, EIGHT_B).record()
    assert forced["gradient_checkpointing"] == "off -> off (requested)"


def test_liger_forced_on_without_the_package_is_refused_plainly() -> None:
    with pytest.raises(SpeedRefused, match=r"liger-kernel package \(or Triton, which it runs on\) is not installed"):
        plan_speed(request(liger=True), H200, REFERENCE)


def test_auto_liger_steps_aside_for_torch_compile_and_serves_eager_runs() -> None:
    with_liger = Machine(cuda=True, bf16_supported=True, memory_bytes=141 * GiB, cpu_count=16, has_liger=True)
    compiled = plan_speed(request(), with_liger, REFERENCE).record()
    assert compiled["compile"] == "auto -> on (GPU present)"
    assert compiled["liger"] == "auto -> off (torch.compile fuses these layers itself)"
    eager = plan_speed(request(compile=False), with_liger, REFERENCE).record()
    assert eager["liger"] == "auto -> on (installed)"
    assert plan_speed(request(liger=True), with_liger, REFERENCE).record()["liger"] == "on -> on (requested)"
    assert plan_speed(request(compile=False), CPU, REFERENCE).record()["liger"] == (
        "auto -> off (liger-kernel or Triton not installed)"
    )


def test_a_run_too_short_to_repay_compiling_trains_eager_on_a_gpu(tmp_path: Path) -> None:
    with_liger = Machine(cuda=True, bf16_supported=True, memory_bytes=141 * GiB, cpu_count=16, has_liger=True)
    smoke = plan_speed(request(max_steps=20), with_liger, REFERENCE, steps=20).record()
    assert smoke["compile"] == "auto -> off (20 steps cannot repay compiling; auto compiles from 200)"
    assert smoke["liger"] == "auto -> on (installed)", "an eager run takes Liger's kernels instead"
    assert plan_speed(request(), H200, REFERENCE, steps=200).record()["compile"] == "auto -> on (GPU present)"
    assert plan_speed(request(compile=True), H200, REFERENCE, steps=20).record()["compile"] == "on -> on (requested)"
    # The bound comes from the request: max_steps, or epochs over the rows (packing only makes steps fewer).
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "ls"}\n' * 100)
    read = lambda: load_rows(str(rows))  # noqa: E731
    assert _most_steps(request(max_steps=20), H200, read) == 20
    epochs = request(dataset_path=str(rows), num_epochs=3, batch_size=4, gradient_accumulation_steps=2)
    assert _most_steps(epochs, H200, read) == 3 * 13
    assert _most_steps(epochs.model_copy(update={"num_processes": 2}), H200, read) == 3 * 7
    assert _most_steps(epochs, CPU, read) is None, "no GPU: nothing to compile, nothing to count"


def test_sft_only_settings_say_so_on_other_strategies() -> None:
    record = plan_speed(request(strategy="dpo", compile=True), H200, REFERENCE).record()
    assert record["compile"] == "on -> off (not applied to dpo)"
    assert record["packing"] == "auto -> off (not applied to dpo)"
    # Pairs count twice in the memory estimate, which decides as it does for SFT (the reference model fits).
    assert record["gradient_checkpointing"].startswith("auto -> off (~")
    assert "(x2: chosen and rejected) fits 60% of GPU memory" in record["gradient_checkpointing"]


def test_forced_settings_are_recorded_as_requested() -> None:
    record = plan_speed(request(compile=True, dataloader_workers=3, bf16=False), CPU, REFERENCE).record()
    assert record["compile"] == "on -> on (requested)"
    assert record["dataloader_workers"] == "3 -> 3 (requested)"
    assert record["bf16"] == "off -> off (requested)"


def test_a_scaled_out_dense_model_skips_ddp_s_search_for_unused_weights() -> None:
    """transformers asks DDP to search for unused weights whenever gradient checkpointing is off: a walk of the
    autograd graph and a read back from the GPU in every backward. A dense model reaches every weight each step."""
    two = {"num_processes": 2}
    assert (
        plan_speed(request(), H200, REFERENCE).record()["find_unused_parameters"] == "auto -> off (one process: no DDP)"
    )
    plan = plan_speed(request(**two), H200, REFERENCE)
    assert plan.record()["find_unused_parameters"] == (
        "auto -> off (a dense model: every weight takes part in each step)"
    )
    assert plan.training_args()["ddp_find_unused_parameters"] is False
    moe = ModelShape(**{**REFERENCE.__dict__, "sometimes_unused": "num_experts"})
    plan = plan_speed(request(**two), H200, moe)
    assert plan.record()["find_unused_parameters"] == (
        "auto -> on (num_experts in the model's config: a step may leave weights unused)"
    )
    assert plan.training_args()["ddp_find_unused_parameters"] is True
    checkpointed = plan_speed(request(**two, gradient_checkpointing=True), H200, moe).record()
    assert checkpointed["find_unused_parameters"] == (
        "auto -> off (gradient checkpointing on: transformers leaves the search off beside it)"
    )
    forced = plan_speed(request(**two, find_unused_parameters=True), H200, REFERENCE).record()
    assert forced["find_unused_parameters"] == "on -> on (requested)"


def test_a_model_s_config_says_which_parts_a_step_may_leave_unused(tmp_path: Path) -> None:
    from bashgym.trainers.tiny import build_tiny
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "tiny"))
    assert ModelShape.of(model, use_lora=False).sometimes_unused is None
    model.config.num_local_experts = 8
    assert ModelShape.of(model, use_lora=False).sometimes_unused == "num_local_experts"
