"""SFT throughput: TRL's SFTTrainer with its defaults against BashGym's SFT trainer with its defaults (issue 13).

One process, one synthetic data set, one model built from config and re-initialised from the same seed for
every run. Reference shape (PERFORMANCE.md): Llama-style, 374M parameters (hidden 1024, 24 layers, 16 heads,
intermediate 2816, vocab 32000), sequence 2048, batch 16, bf16 autocast, SDPA; 5 warm-up and 30 timed steps.
Prints one JSON line per run (tokens/s, MFU = 6·N·tokens/s over the peak, peak memory, the speed settings
BashGym resolved) and one per method with the BashGym/TRL ratios. Tokens are real tokens: padding is not counted.

    python bench/gpu_sft.py --tiny                          # CPU check of the script, a few seconds per run
    python bench/gpu_sft.py [--variable-lengths]            # the reference on one GPU, under 10 minutes
    python bench/gpu_sft.py --wheels DIR ...                # first pip-install DIR/*.whl (trl, datasets, ...)

--wheels serves an offline GPU host whose Python has torch, transformers, peft and accelerate but not trl or
datasets: the wheels of packages the host lacks (or has older) go into a temporary --target folder put first on
sys.path, and a "wheels" JSON line says what was installed, what the host kept, and which requirements of the
installed packages remain unmet. Without an installed bashgym,
the repository's own tree is imported (through .typecheck/bashgym, the same layout the type checker reads).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import glob
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# bf16 dense peaks the MFU is measured against, by device name; pass --peak-tflops for anything else.
PEAK_TFLOPS = {"H200": 790.0}
# BashGym's request describes a run as long as a real fine-tune's, so its speed settings are those such a run gets
# (auto compiles only a run long enough to repay it); the bench times its first steps and stops it there.
BASHGYM_RUN_STEPS = 2000


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    seq_len: int
    batch: int
    warmup_steps: int
    timed_steps: int


REFERENCE = Shape(
    hidden=1024, layers=24, heads=16, intermediate=2816, vocab=32000, seq_len=2048, batch=16, warmup_steps=5,
    timed_steps=30,
)  # fmt: skip
# 30 timed steps as on the reference: with 6, a step of 60 ms timed the CPU's jitter, and the ratio swung 0.99..1.24.
TINY = Shape(
    hidden=64, layers=2, heads=4, intermediate=128, vocab=1000, seq_len=128, batch=4, warmup_steps=3, timed_steps=30
)


def install_wheels(folder: Path) -> dict[str, Any]:
    """pip-install the wheels in `folder`, without dependencies or an index, into a folder first on sys.path.

    A wheel of a package the host already has at the same or a newer version is left out: the host's own build
    stays in use (pyarrow, typing-extensions travel only for a host whose copy is too old for datasets or
    pydantic). Returns the record of what was installed, what the host kept, and the requirements of the
    installed packages still unmet; they are reported, not fatal (pip itself only warns, and liger-kernel's Triton
    is absent from a CPU host that never uses it): a package that then fails to import stops the run."""
    from importlib import metadata

    from packaging.utils import parse_wheel_filename
    from packaging.version import Version

    wheels = sorted(glob.glob(str(folder / "*.whl")))
    if not wheels:
        raise SystemExit(f"--wheels {folder}: no .whl files there.")
    chosen, kept = [], []
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(Path(wheel).name)
        try:
            host = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            host = None
        if host is not None and host >= version:
            kept.append(f"{name} {host} (wheel {version})")
        else:
            chosen.append((wheel, name))  # parse_wheel_filename gives the canonical name
    # Named site-packages: dill (datasets' fingerprints) pickles a module by value, not by name, unless its file
    # lies under sys.prefix or a folder of that name, and pyarrow's module then fails to pickle.
    target = Path(tempfile.mkdtemp(prefix="gpu-sft-wheels-")) / "site-packages"
    if chosen:
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        subprocess.run([*command, "--target", str(target), *(wheel for wheel, _ in chosen)], check=True)
    sys.path.insert(0, str(target))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
    installed = [f"{name} {metadata.version(name)}" for _, name in chosen]
    missing, mismatched = unmet_requirements([name for _, name in chosen])
    return {"check": "wheels", "installed": installed, "host_kept": kept, "missing": missing, "mismatched": mismatched}


def unmet_requirements(names: list[str]) -> tuple[list[str], list[str]]:
    """The requirements of the distributions `names` that this interpreter does not meet: (absent, wrong version)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    missing, mismatched = [], []
    for name in names:
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                have = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                missing.append(f"{requirement} (for {name})")
                continue
            if not requirement.specifier.contains(have, prereleases=True):
                mismatched.append(f"{name} needs {requirement}, the host has {have}")
    return sorted(set(missing)), mismatched


def import_bashgym(module: str = "bashgym.trainers.speed") -> None:
    """Import `module` from the installed bashgym, else from the repository's own tree (.typecheck/bashgym)."""
    import importlib

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("bashgym"):
            raise  # bashgym is there and a package it needs is not: the message names it
        sys.path.insert(0, str(REPO / ".typecheck"))
        importlib.import_module(module)


def check_imports() -> None:
    missing = []
    for name in ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "pydantic"):
        try:
            __import__(name)
        except ImportError as exc:
            missing.append(f"{name} ({exc})")
    if missing:
        raise SystemExit("missing: " + "; ".join(missing) + ". Add their wheels to the --wheels folder.")


def build_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer over `vocab` words `w4`...: one word is one token, so lengths are exact."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, **{f"w{i}": i for i in range(4, vocab)}}
    core = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def build_model(shape: Shape, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=shape.seq_len,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    return model.to("cuda") if torch.cuda.is_available() else model


def synthetic_rows(shape: Shape, *, variable: bool, seed: int) -> list[dict[str, str]]:
    """Text rows of random words ending in </s>; enough real tokens for every step of a packed run too."""
    draw = random.Random(seed)
    shortest = max(8, shape.seq_len // 32)  # 64 of 2048
    needed = int((shape.warmup_steps + shape.timed_steps) * shape.batch * shape.seq_len * 1.15)
    rows: list[dict[str, str]] = []
    tokens = 0
    while tokens < needed or len(rows) < (shape.warmup_steps + shape.timed_steps) * shape.batch * 1.15:
        length = draw.randint(shortest, shape.seq_len) if variable else shape.seq_len
        words = " ".join(f"w{draw.randrange(4, shape.vocab)}" for _ in range(length - 1))
        rows.append({"text": words + " </s>"})
        tokens += length
    return rows


class StepClock:
    """Real tokens and wall time of the timed steps. The GPU is synchronised where the timed steps begin and
    where the run ends, not at every step: a trainer whose host queues the next step while the GPU computes
    this one keeps that gain, and one that waits for the GPU every step shows it."""

    def __init__(self, warmup_steps: int, timed_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.last_step = warmup_steps + timed_steps  # training stops there, whatever run the request describes
        self.counted: Any = 0  # a device tensor once a mask is counted: reading it each step would wait
        self.started: float | None = None
        self.ended: float | None = None
        self.waits = HostWaits(sampled=range(max(2, warmup_steps - 1), warmup_steps + 1))

    @property
    def tokens(self) -> int:
        return int(self.counted)

    def count(self, trainer: Any) -> None:
        original = trainer.training_step

        def counted(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if trainer.state.global_step >= self.warmup_steps:
                mask = inputs.get("attention_mask")
                # Padding-free packing carries no mask: every position is a real token.
                self.counted += mask.sum() if mask is not None else inputs["input_ids"].numel()
            return original(model, inputs, *args, **kwargs)

        trainer.training_step = counted
        trainer.add_callback(self.callback())

    def callback(self) -> Any:
        import torch
        from transformers import TrainerCallback

        clock = self

        class Clock(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                # From one step's end to the next's: the log, the next batch's fetch and copy, then the step.
                clock.waits.end()
                clock.waits.begin(state.global_step + 1)
                if state.global_step not in (clock.warmup_steps, clock.last_step):
                    return
                control.should_training_stop = state.global_step == clock.last_step
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                if state.global_step == clock.warmup_steps:
                    clock.started = time.perf_counter()
                else:
                    clock.ended = time.perf_counter()

        return Clock()


class HostWaits:
    """How often a step makes the host wait for the GPU, counted by torch's CUDA sync debug mode (a warning per
    synchronising call) over the last warm-up steps, after compilation and outside the timed ones. None on a CPU.
    Each trainer logs at its default: TRL every 10 steps (none of these), BashGym every step, reading each log
    once the next step is queued (a wait on that copy alone, which the debug mode does not count: the GPU has
    the next step to run)."""

    def __init__(self, sampled: range) -> None:
        self.sampled = sampled
        self.per_step: list[int] = []
        self.where: collections.Counter[str] = collections.Counter()
        self._recording: Any = None

    def begin(self, step: int) -> None:
        import torch

        if not torch.cuda.is_available() or step not in self.sampled:
            return
        self._recording = warnings.catch_warnings(record=True)
        self._caught = self._recording.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def end(self) -> None:
        import torch

        if self._recording is None:
            return
        torch.cuda.set_sync_debug_mode("default")
        self._recording.__exit__(None, None, None)
        self._recording = None
        waits = [w for w in self._caught if "synchronizing" in str(w.message)]
        self.per_step.append(len(waits))
        self.where.update(f"{Path(w.filename).name}:{w.lineno}" for w in waits)

    def record(self) -> dict[str, Any] | None:
        if not self.per_step:
            return None
        return {"per_step": self.per_step, "where": dict(self.where.most_common(8))}


def trl_trainer(model: Any, tokenizer: Any, rows: list[dict[str, str]], shape: Shape, lora: bool, out: Path) -> Any:
    """TRL's SFTTrainer with its defaults; only the reference's shape, bf16 and the run length are set."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=shape.batch,
        max_length=shape.seq_len,
        max_steps=shape.warmup_steps + shape.timed_steps,
        bf16=torch.cuda.is_available(),
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    peft = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    return SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft if lora else None,
    )


def bashgym_trainer(
    model: Any, tokenizer: Any, data: Path, shape: Shape, lora: bool, out: Path, protocol: Any, fields: dict[str, Any]
) -> tuple[Any, dict[str, str]]:
    """BashGym's SFT trainer as a trainer process builds it for a BASHGYM_RUN_STEPS-step run, every speed setting
    at auto unless --set says."""
    from bashgym.trainers.contracts.request import TrainingRequest
    from bashgym.trainers.contracts.rundir import RunDirectory
    from bashgym.trainers.methods import build_trainer

    request = TrainingRequest(
        strategy="sft",
        base_model="bench-reference",
        dataset_path=str(data),
        batch_size=shape.batch,
        gradient_accumulation_steps=1,
        max_seq_length=shape.seq_len,
        max_steps=BASHGYM_RUN_STEPS,
        save_steps=10**6,
        use_lora=lora,
        **fields,
    )
    out.mkdir(parents=True, exist_ok=True)
    trainer, plan = build_trainer(request, model, tokenizer, RunDirectory(out, protocol))
    return trainer, plan.record()


def peak_tflops(requested: float | None) -> float | None:
    import torch

    if requested is not None:
        return requested
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    return next((peak for key, peak in PEAK_TFLOPS.items() if key in name), None)


def one_run(which: str, method: str, shape: Shape, rows: list[dict[str, str]], data: Path, args: Any) -> dict[str, Any]:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build_model(shape, args.seed)
    parameters = sum(p.numel() for p in model.parameters())
    tokenizer = build_tokenizer(shape.vocab)
    out = Path(tempfile.mkdtemp(prefix=f"gpu-sft-{which}-{method}-"))
    speed: dict[str, str] | None = None
    from torch._dynamo.utils import counters

    counters.clear()  # BashGym compiles while its trainer is built (the probe step), so from here on
    with open(os.devnull, "w") as protocol, contextlib.redirect_stdout(sys.stderr):
        if which == "trl":
            trainer = trl_trainer(model, tokenizer, rows, shape, method == "lora", out)
        else:
            trainer, speed = bashgym_trainer(
                model, tokenizer, data, shape, method == "lora", out, protocol, dict(args.set)
            )
        clock = StepClock(shape.warmup_steps, shape.timed_steps)
        clock.count(trainer)
        trainer.train()
    assert clock.started is not None and clock.ended is not None, "the run ended before its timed steps"
    seconds = clock.ended - clock.started
    tokens_per_s = clock.tokens / seconds
    peak = peak_tflops(args.peak_tflops)
    result = {
        "bench": "gpu_sft",
        "trainer": which,
        "method": method,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "shape": "tiny" if args.tiny else "reference",
        "variable_lengths": args.variable_lengths,
        "parameters": parameters,
        "timed_steps": trainer.state.global_step - shape.warmup_steps,
        "tokens": clock.tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens_per_s, 1),
        "mfu": round(6 * parameters * tokens_per_s / (peak * 1e12), 4) if peak else None,
        "peak_tflops": peak,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 1024**3, 2) if torch.cuda.is_available() else None,
        "speed": speed,
        "host_waits": clock.waits.record(),
        # What torch.compile captured: a graph break splits the model, and the part between runs eager.
        "compiled_graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": {reason[:160]: count for reason, count in counters["graph_break"].most_common(3)},
    }
    del trainer, model
    torch._dynamo.reset()
    return result


def attention_check(shape: Shape, seed: int) -> dict[str, Any]:
    """Packed attention on one layer's worth of a packed row: its kernel against one causal SDPA call per sequence
    (must agree), and its forward and backward time against SDPA over the whole row under the dense mask that
    transformers builds for a packed row without it."""
    import torch
    import torch.nn.functional as F
    from bashgym.trainers import attention

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    draw = random.Random(seed)
    lengths: list[int] = []
    while sum(lengths) < shape.batch * shape.seq_len:  # about one packed batch: many sequences, one row
        lengths.append(draw.randint(max(8, shape.seq_len // 32), shape.seq_len))
    row = sum(lengths)
    bounds = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
    head_dim = shape.hidden // shape.heads
    generator = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (
        torch.randn(1, shape.heads, row, head_dim, device=device, dtype=dtype, generator=generator).requires_grad_()
        for _ in range(3)
    )
    layer = torch.nn.Module()
    kwargs = {
        "cu_seq_lens_q": bounds,
        "cu_seq_lens_k": bounds,
        "max_length_q": max(lengths),
        "max_length_k": max(lengths),
    }

    def packed() -> Any:
        return attention.packed_attention(layer, q, k, v, None, **kwargs)[0]

    def per_sequence() -> Any:
        return attention._per_sequence(q, k, v, bounds, 0.0, None)

    # Built once, as transformers builds it once per forward for every layer: the timing is the attention's alone.
    owner = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))
    mask = (owner[:, None] == owner[None, :]).tril()

    def dense_mask() -> Any:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)

    def timed_ms(step: Any) -> float:
        for _ in range(2):
            step().sum().backward()
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(5):
            step().sum().backward()
        if cuda:
            torch.cuda.synchronize()
        return round((time.perf_counter() - started) / 5 * 1000, 2)

    with torch.no_grad():
        difference = (packed().float() - per_sequence().float()).abs().max().item()
    result: dict[str, Any] = {
        "bench": "gpu_sft",
        "check": "packed_attention",
        "kernel": "flash varlen" if cuda and attention.VARLEN is not None else "SDPA per sequence",
        "row_tokens": row,
        "sequences": len(lengths),
        "max_abs_difference": difference,
        "agrees": difference < (2e-2 if cuda else 1e-5),
        "fwd_bwd_ms": timed_ms(packed),
    }
    try:
        result["dense_mask_fwd_bwd_ms"] = timed_ms(dense_mask)
    except torch.OutOfMemoryError:
        result["dense_mask_fwd_bwd_ms"] = "out of memory"
    return result


@contextlib.contextmanager
def dataset_file(rows: list[dict[str, str]]) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gpu-sft-data-") as folder:
        path = Path(folder) / "rows.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        yield path


def emit(record: dict[str, Any], out: Path | None) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if out is not None:
        with out.open("a") as handle:
            handle.write(line + "\n")


def field_value(text: str) -> tuple[str, Any]:
    name, _, value = text.partition("=")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model and a few steps, to check on the CPU")
    parser.add_argument("--variable-lengths", action="store_true", help="row lengths drawn in 64..2048 (scaled)")
    parser.add_argument("--methods", default="full,lora", help="comma-separated: full, lora")
    # BashGym first: a run the device session's deadline cuts short keeps the figure nobody has measured yet
    # (TRL's defaults on the reference are in PERFORMANCE.md).
    parser.add_argument("--trainers", default="bashgym,trl", help="comma-separated, in order: bashgym, trl")
    parser.add_argument("--peak-tflops", type=float, help="bf16 dense peak for MFU (default: by device name)")
    parser.add_argument("--wheels", type=Path, help="folder of wheels to pip-install first (offline GPU hosts)")
    parser.add_argument("--out", type=Path, help="also append the JSON lines to this file")
    parser.add_argument(
        "--set",
        type=field_value,
        action="append",
        default=[],
        metavar="FIELD=JSON",
        help="a request field for BashGym's runs, e.g. packing=true or compile=false (repeatable; ablations)",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wheels = install_wheels(args.wheels) if args.wheels else None
    check_imports()
    import_bashgym()
    shape = TINY if args.tiny else REFERENCE
    header = {"bench": "gpu_sft", "config": asdict(shape), "variable_lengths": args.variable_lengths}
    emit({**header, "bashgym_fields": dict(args.set)}, args.out)
    if wheels:
        emit(wheels, args.out)
    if args.variable_lengths or dict(args.set).get("packing") is True:
        check = attention_check(shape, args.seed)
        emit(check, args.out)
        if not check["agrees"]:
            raise SystemExit("packed attention disagrees with attention per sequence; not timing a wrong kernel")
    rows = synthetic_rows(shape, variable=args.variable_lengths, seed=args.seed)
    results: dict[tuple[str, str], dict[str, Any]] = {}
    with dataset_file(rows) as data:
        for method in args.methods.split(","):
            for which in args.trainers.split(","):
                results[which, method] = one_run(which, method, shape, rows, data, args)
                emit(results[which, method], args.out)
    for method in args.methods.split(","):
        trl, ours = results.get(("trl", method)), results.get(("bashgym", method))
        if trl and ours:
            ratio = ours["tokens_per_s"] / trl["tokens_per_s"]
            emit({"bench": "gpu_sft", "method": method, "bashgym_over_trl_tokens_per_s": round(ratio, 3)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
