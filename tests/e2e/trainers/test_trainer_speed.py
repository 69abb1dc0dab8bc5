"""Speed settings on the real SFT path (issue 13): packing keeps sequences apart and cuts padding; compile falls back.

These build BashGym's SFT trainer in-process on the tiny model, exactly as a trainer process does, and read
the batches its dataloader hands the model.
"""

from __future__ import annotations

import importlib.machinery
import json
import math
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from bashgym.daemon.lanes.anomalies import AnomalyWatch
from bashgym.trainers import attention, methods
from bashgym.trainers.methods import sft
from bashgym.trainers.speed import Machine, ModelShape, compile_with_fallback, plan_speed
from bashgym.trainers.tiny import build_tiny
from transformers import AutoModelForCausalLM, TrainerCallback, TrainerControl, TrainerState
from trl import SFTTrainer

from tests.support import varlen_standin
from tests.support.trainer_probes import HostReads, StepMarker, Timeline, sft_request, sft_trainer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("student"))


@pytest.fixture
def devnull() -> Iterator[Any]:
    with open(os.devnull, "w") as handle:
        yield handle


def batches(trainer: Any) -> list[dict[str, torch.Tensor]]:
    """One epoch of the batches the trainer's dataloader hands the model."""
    return list(trainer.get_train_dataloader())


def sequences_of(batch: dict[str, torch.Tensor]) -> list[tuple[int, int]]:
    """(start, end) of each packed sequence: its position ids restart at 0."""
    positions = batch["position_ids"][0].tolist()
    starts = [i for i, p in enumerate(positions) if p == 0]
    return list(zip(starts, [*starts[1:], len(positions)], strict=True))


def test_packed_sequences_do_not_attend_to_each_other(student: Path, tmp_path: Path, devnull: Any) -> None:
    trainer, plan = sft_trainer(student, tmp_path, devnull, packing=True)
    assert plan.record()["packing"] == "on -> on (requested)"
    # Attention per sequence (trainers/attention.py), not SDPA over the whole row under a dense mask.
    assert trainer.model.config._attn_implementation == attention.NAME
    batch = batches(trainer)[0]
    assert "attention_mask" not in batch, "padding-free packing marks sequences by position ids alone"
    spans = sequences_of(batch)
    assert len(spans) >= 4, f"expected several sequences in one packed row, got {spans}"
    model = trainer.model.eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        packed = model(**inputs).logits[0]
        # The same tokens with positions that never restart: one long sequence, so later ones see earlier ones.
        joined = model(input_ids=batch["input_ids"]).logits[0]
        for start, end in spans:
            alone = model(input_ids=batch["input_ids"][:, start:end]).logits[0]
            torch.testing.assert_close(packed[start:end], alone, atol=1e-4, rtol=1e-4)
    later = spans[1]
    assert not torch.allclose(joined[later[0] : later[1]], packed[later[0] : later[1]], atol=1e-3), (
        "the control failed: without restarting positions the second sequence should see the first"
    )


def test_packing_removes_the_padding_of_variable_length_batches(student: Path, tmp_path: Path, devnull: Any) -> None:
    padded_trainer, _ = sft_trainer(student, tmp_path / "off", devnull, packing=False)
    packed_trainer, _ = sft_trainer(student, tmp_path / "on", devnull, packing=True)
    padded, packed = batches(padded_trainer), batches(packed_trainer)
    padded_share = 1 - sum(int(b["attention_mask"].sum()) for b in padded) / sum(b["input_ids"].numel() for b in padded)
    assert padded_share > 0.2, f"variable lengths should pad plain batches heavily: {padded_share:.0%}"
    # Padding-free packing hands the model one row of real tokens, sequences marked by their position ids.
    assert all("attention_mask" not in b and b["input_ids"].shape[0] == 1 for b in packed)
    real_tokens = sum(int(b["attention_mask"].sum()) for b in padded)
    assert sum(b["input_ids"].numel() for b in packed) == real_tokens, "packing dropped or padded tokens"
    assert len(packed) < len(padded), "the same tokens should take fewer steps packed"


def test_a_cpu_run_records_each_speed_setting_as_requested_and_used(
    student: Path, tmp_path: Path, devnull: Any
) -> None:
    trainer, plan = sft_trainer(student, tmp_path, devnull, gradient_checkpointing=True, pin_memory=True)
    record = plan.record()
    assert record["pin_memory"] == "on -> off (no GPU to copy to)", "transformers pins nothing without a GPU"
    assert not trainer.args.dataloader_pin_memory and not trainer.accelerator.dataloader_config.non_blocking
    assert record["compile"] == "auto -> off (no GPU)"
    assert record["packing"] == "auto -> off (no GPU)"
    assert record["bf16"] == "auto -> off (no GPU)"
    assert record["liger"] in {"auto -> off (liger-kernel or Triton not installed)", "auto -> off (no GPU)"}
    assert record["gradient_checkpointing"] == "on -> on (requested)"
    assert record["dataloader_workers"] == "auto -> 0 (no GPU: collate in the training process)"


def test_a_failing_compiler_falls_back_to_eager_with_a_log_line(student: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(student).eval()
    tokens = torch.tensor([[2, 10, 11, 12, 13]])
    with torch.no_grad():
        expected = model(input_ids=tokens).logits

    def broken_backend(graph: Any, example_inputs: Any) -> Any:
        raise RuntimeError("no C++ compiler on this host")

    lines: list[str] = []
    failure, seconds = compile_with_fallback(
        model, lambda: model(input_ids=tokens), log=lines.append, backend=broken_backend
    )
    assert failure is not None and "no C++ compiler" in failure and seconds > 0
    assert lines[0].startswith("speed: torch.compile is compiling the model")
    assert lines[1].startswith("speed: torch.compile failed") and lines[1].endswith("training eager")
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=tokens).logits, expected)


def test_a_compiled_model_reports_its_compile_time_and_computes_as_before(student: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(student).eval()
    tokens = torch.tensor([[2, 10, 11, 12, 13]])
    with torch.no_grad():
        expected = model(input_ids=tokens).logits
    lines: list[str] = []
    try:
        # dynamo's eager backend: the graph capture a real compile starts with, without a C++ toolchain's minute.
        failure, seconds = compile_with_fallback(
            model, lambda: model(input_ids=tokens), log=lines.append, backend="eager"
        )
        assert failure is None and seconds > 0
        assert lines == [
            "speed: torch.compile is compiling the model and checking it on one step; the first step waits for it",
            f"speed: torch.compile compiled the model and checked it on one step in {seconds:.1f} s",
        ]
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids=tokens).logits, expected)
    finally:
        torch._dynamo.reset()


class GraphCounter:
    """A torch.compile backend that runs each captured graph as captured, counting the captures."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs += 1
        return graph.forward


# dynamo trips these two while it reads TRL's and torch's objects during capture; a run only logs them.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@pytest.mark.filterwarnings("ignore:<class 'torch.autograd.function.Function'> should not be instantiated")
@pytest.mark.parametrize("kernel", ["per-sequence SDPA", "varlen kernel"])
def test_a_compiled_packed_run_captures_its_graphs_once_for_rows_of_every_length(
    kernel: str, student: Path, tmp_path: Path, devnull: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    if kernel == "varlen kernel":  # the path a GPU run trains through, its kernel stood in for on the CPU
        varlen_standin.install(monkeypatch.setattr)
    counter = GraphCounter()
    monkeypatch.setattr(methods, "COMPILE_BACKEND", counter)
    try:
        trainer, plan = sft_trainer(student, tmp_path, devnull, packing=True, compile=True, max_steps=3)
        printed = capsys.readouterr().out
        assert ("torch's flash varlen kernel, one call per packed row" in printed) == (kernel == "varlen kernel")
        assert plan.record()["compile"].startswith("on -> on (requested; compiled in ")
        assert plan.record()["compile"].endswith(" s, for rows of any length)")
        lengths = [batch["input_ids"].shape[1] for batch in batches(trainer)[:3]]
        assert len(set(lengths)) > 1, f"the check needs packed rows of different lengths, got {lengths}"
        captured = counter.graphs
        assert captured > 0, "the probe step ran through the compiled model"
        trainer.train()
        # Specialised to the probe's lengths (or its eval mode), later rows would be captured (and compiled) again.
        assert counter.graphs == captured, f"rows of lengths {lengths} were captured again"
    finally:
        torch._dynamo.reset()


def test_the_varlen_stand_in_is_exact_attention_per_sequence_forward_and_backward() -> None:
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(1, 2, 40, 8, generator=generator, requires_grad=True) for _ in range(3))
    bounds = torch.tensor([0, 5, 6, 29, 40], dtype=torch.int32)
    packed = varlen_standin.varlen_attn(*(t[0].transpose(0, 1) for t in (query, key, value)), bounds, bounds, 23, 23)
    expected = attention._per_sequence(query, key, value, bounds, 0.0, None)[0]
    torch.testing.assert_close(packed, expected)
    upstream = torch.randn(packed.shape, generator=generator)
    ours = torch.autograd.grad(packed, (query, key, value), upstream)
    theirs = torch.autograd.grad(expected, (query, key, value), upstream)
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want)


@pytest.fixture
def fake_liger(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """liger_kernel.transformers as far as BashGym calls it: Liger's kernels need CUDA and Triton, absent here."""
    calls: list[tuple[Any, dict[str, Any]]] = []
    modules = {name: types.ModuleType(name) for name in ("liger_kernel", "liger_kernel.transformers")}
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, module)
    modules["liger_kernel.transformers"]._apply_liger_kernel_to_instance = (  # type: ignore[attr-defined]
        lambda model, **config: calls.append((model, config))
    )
    return calls


# peft 0.21 reads transformers' old checkpointing name while wrapping the model; trainer processes only log it.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_failed_compilation_trains_eager_with_the_liger_kernels_auto_left_to_the_compiler(
    student: Path, tmp_path: Path, devnull: Any, monkeypatch: pytest.MonkeyPatch,
    fake_liger: list[tuple[Any, dict[str, Any]]], capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    request = sft_request(student, tmp_path, use_lora=True)
    trainer, _ = sft_trainer(student, tmp_path, devnull, use_lora=True)
    gpu = Machine(cuda=True, bf16_supported=True, memory_bytes=141 * 1024**3, cpu_count=16, has_liger=True)
    planned = plan_speed(request, gpu, ModelShape.of(trainer.model, use_lora=True))
    assert planned.record()["liger"] == "auto -> off (torch.compile fuses these layers itself)"

    def no_compiler(graph: torch.fx.GraphModule, example_inputs: Any) -> Any:
        raise RuntimeError("no C++ compiler on this host")

    monkeypatch.setattr(methods, "COMPILE_BACKEND", no_compiler)
    capsys.readouterr()
    record = methods._compile(trainer, planned, request, gpu).record()
    assert record["compile"].startswith("auto -> off (compilation failed after ")
    assert record["liger"] == "auto -> on (installed; training eager)"
    # On the model under the LoRA wrapper, with Liger's cross-entropy left to TRL's fused LM head.
    assert fake_liger == [(trainer.model.get_base_model(), {"fused_linear_cross_entropy": False})]
    assert "liger: Liger's layer kernels in LlamaForCausalLM" in capsys.readouterr().out


@pytest.mark.parametrize("packing", [True, False])
def test_a_step_that_does_not_log_never_waits_for_the_device_and_logs_what_trl_logs(
    packing: bool, student: Path, tmp_path: Path, devnull: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU runs ahead of the host only while nothing reads a result back; each read costs the host's launch
    time on every step. TRL's per-step metrics and transformers' NaN filter read five values a step."""
    fields = {"packing": packing, "max_steps": 8, "logging_steps": 4}
    trainer, _ = sft_trainer(student, tmp_path / "ours", devnull, **fields)
    reads = HostReads()
    ours = StepMarker(reads)
    trainer.add_callback(ours)
    with reads:
        trainer.train()
    logging_steps = {4, 8}
    waits = {step: lines for step, lines in reads.reads.items() if step not in logging_steps}
    assert not waits, "steps that log nothing read values back from the device:\n" + "\n".join(
        f"step {step}: {line}" for step, lines in sorted(waits.items()) for line in lines
    )
    # TRL's own trainer on the same rows and weights logs the same loss and metrics.
    monkeypatch.setattr(sft, "DeviceMetricsSFTTrainer", SFTTrainer)
    reference, _ = sft_trainer(student, tmp_path / "trl", devnull, **fields)
    trl = StepMarker()
    reference.add_callback(trl)
    reference.train()
    keys = ("loss", "grad_norm", "entropy", "mean_token_accuracy", "num_tokens")
    assert len(ours.logs) == len(trl.logs) == 3
    for got, want in zip(ours.logs[:2], trl.logs[:2], strict=True):
        assert got["num_tokens"] == want["num_tokens"] > 0
        assert got == pytest.approx({k: got[k] for k in got} | {k: want[k] for k in keys}, rel=1e-5)


def test_a_step_that_logs_is_read_once_the_next_step_is_queued_and_logs_what_trl_logs(
    student: Path, tmp_path: Path, devnull: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a step's loss as it logs makes the host wait for that step to finish, and the GPU then idles
    while the host queues the next one; with `logging_steps` 1, the default, that was every step. A log is read
    one step late instead, except where the step saves or ends the run, which wait for the GPU anyway."""
    fields = {"packing": True, "max_steps": 6, "logging_steps": 1, "save_steps": 4}
    trainer, _ = sft_trainer(student, tmp_path / "ours", devnull, **fields)
    reads, ours = HostReads(), Timeline()
    trainer.add_callback(StepMarker(reads))
    trainer.add_callback(ours)
    with reads:
        trainer.train()
    assert set(reads.reads) <= {4, 6}, "steps read values back before the next step was queued:\n" + "\n".join(
        f"step {step}: {line}" for step, lines in sorted(reads.reads.items()) for line in lines
    )
    assert ours.events == [
        ("optimizer", 1), ("optimizer", 2), ("log", 1), ("optimizer", 3), ("log", 2), ("optimizer", 4),
        ("log", 3), ("log", 4), ("save", 4), ("optimizer", 5), ("optimizer", 6), ("log", 5), ("log", 6),
        ("save", 6), ("log", 6),
    ]  # fmt: skip
    # TRL's own trainer on the same rows and weights logs the same values, for the same steps and epochs.
    monkeypatch.setattr(sft, "DeviceMetricsSFTTrainer", SFTTrainer)
    reference, _ = sft_trainer(student, tmp_path / "trl", devnull, **fields)
    trl = Timeline()
    reference.add_callback(trl)
    reference.train()
    keys = ("step", "epoch", "loss", "grad_norm", "learning_rate", "entropy", "mean_token_accuracy", "num_tokens")
    assert len(ours.logs) == len(trl.logs) == 7
    for got, want in zip(ours.logs[:6], trl.logs[:6], strict=True):
        assert got["num_tokens"] == want["num_tokens"] > 0
        assert {k: got[k] for k in keys} == pytest.approx({k: want[k] for k in keys}, rel=1e-5)
    assert ours.logs[6]["train_loss"] == pytest.approx(trl.logs[6]["train_loss"], rel=1e-5)


class Crash(TrainerCallback):
    """Fails the run as step 3 ends, as a device error would."""

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if state.global_step == 3:
            raise RuntimeError("the device failed")


def test_a_run_that_crashes_keeps_the_log_of_its_last_step(student: Path, tmp_path: Path, devnull: Any) -> None:
    """Step 2's log is read one step late; the crash in step 3 must neither lose it nor be hidden by it."""
    trainer, _ = sft_trainer(student, tmp_path, devnull, max_steps=6, logging_steps=1)
    trainer.add_callback(Crash())
    with pytest.raises(RuntimeError, match="the device failed"):
        trainer.train()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "train.loss" in r["metrics"]] == [1, 2]


class Poison(TrainerCallback):
    """Turns the weights to NaN after step 2, as a diverging run does."""

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if state.global_step == 2:
            with torch.no_grad():
                next(kwargs["model"].parameters()).fill_(float("nan"))


def test_a_loss_that_turns_nan_is_logged_as_nan_and_the_daemon_flags_it(
    student: Path, tmp_path: Path, devnull: Any
) -> None:
    """transformers' default replaces a NaN step's loss by the window's average (0.0 when each step logs), so
    a diverged run logged a perfect loss and the daemon's non-finite-loss check never fired."""
    trainer, _ = sft_trainer(student, tmp_path, devnull, max_steps=4, logging_steps=1)
    trainer.add_callback(Poison())
    trainer.train()
    watch = AnomalyWatch("sft")
    losses, anomalies = {}, []
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "train.loss" in record["metrics"]:
            losses[record["step"]] = record["metrics"]["train.loss"]
            anomalies += watch.observe(record["step"], record["metrics"])
    assert all(math.isfinite(losses[step]) for step in (1, 2)) and all(math.isnan(losses[s]) for s in (3, 4)), losses
    assert [(a.kind, a.step) for a in anomalies] == [("non_finite_loss", 3)]


def test_a_scaled_out_step_reads_nothing_back_and_every_rank_logs_and_pauses_as_one(
    student: Path, tmp_path: Path
) -> None:
    """Two ranks on the CPU (gloo), as `accelerate launch` runs them. Each step of a scaled-out run used to wait for
    the GPU three ways: the ranks' agreement on pause and stop (read at once), each log's gathered loss, FLOPs and
    token count (read at once), and DDP's search for unused weights (transformers turns it on whenever gradient
    checkpointing is off; it reads a map of used weights back in every backward). Now the first two are read one
    step late and the search is off for a dense model, so only a step that saves or ends the run reads anything."""
    out = tmp_path / "ranks"
    out.mkdir()
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*launch, "-m", "tests.support.two_ranks_sft", str(student), str(out)],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    for rank, seen in enumerate(ranks):
        for run, allowed in (("ours", {"4", "6"}), ("paused", {"3"})):
            waits = {step: lines for step, lines in seen[run]["reads"].items() if step not in allowed}
            assert not waits, f"rank {rank}, {run}: steps read values back before the next step was queued:\n" + (
                "\n".join(f"step {step}: {line}" for step, lines in sorted(waits.items()) for line in lines)
            )
        assert [tuple(event) for event in seen["ours"]["events"]] == [
            ("optimizer", 1), ("optimizer", 2), ("log", 1), ("optimizer", 3), ("log", 2), ("optimizer", 4),
            ("log", 3), ("log", 4), ("save", 4), ("optimizer", 5), ("optimizer", 6), ("log", 5), ("log", 6),
            ("save", 6), ("log", 6),
        ]  # fmt: skip
        # TRL's own trainer on the same rows and weights logs the same values over both ranks, every rank alike.
        ours, trl = seen["ours"]["logs"], ranks[0]["trl"]["logs"]
        keys = ("step", "epoch", "loss", "grad_norm", "learning_rate", "entropy", "mean_token_accuracy", "num_tokens")
        assert len(ours) == len(trl) == 7
        for got, want in zip(ours[:6], trl[:6], strict=True):
            assert {k: got[k] for k in keys} == pytest.approx({k: want[k] for k in keys}, rel=1e-5)
        assert ours[6]["train_loss"] == pytest.approx(trl[6]["train_loss"], rel=1e-5)
        assert seen["ours"]["total_flos"] == ranks[0]["trl"]["total_flos"] > 0
        # A pause that rank 1 alone received as step 2 began: both ranks agree on it at step 2 and act on that
        # agreement at step 3, saving there.
        paused = seen["paused"]
        assert (paused["step"], paused["acted_on"]) == (3, "pause"), f"rank {rank}"
        assert [tuple(event) for event in paused["events"]][-3:] == [("log", 3), ("save", 3), ("log", 3)]
    assert (out / "rank-0" / "paused" / "checkpoint-3").is_dir()
