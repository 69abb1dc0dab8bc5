"""The speed settings of a run (issue 13): what each "auto" resolves to on this machine, for this model and data.

Every decision is a pure function of the request, the machine and the model's shape, so it can be tested
without a GPU; the run records each one as "requested -> used (why)" in its started event, model_profile.json
and training.log.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bashgym.trainers.contracts.request import TrainingRequest

# Strategies whose trainer is TRL's SFTTrainer over one model: compile, packing and Liger apply there.
SFT_PATH = frozenset({"sft"})
# Padding below this share of a batch's tokens is not worth changing the step's make-up for.
PACKING_MIN_WASTE = 0.10
# Gradient checkpointing turns on when the estimated training memory passes this share of the device's memory:
# the estimate is rough (allocator slack, fragmentation), so it keeps a margin.
CHECKPOINTING_MEMORY_SHARE = 0.6
MAX_AUTO_WORKERS = 4
# A compiled step of the reference model takes 0.24 s against 0.34 s eager (PERFORMANCE.md), so it saves about 0.1 s,
# and compiling that model takes tens of seconds before the first step: a shorter run cannot repay the compilation
# unless it compiles in under 20 s. (The GPU session measures the cold start; this bound can then be set from it.)
MIN_COMPILE_STEPS = 200
# Config fields that declare parts of a model a batch may not reach: experts a router did not pick, a vision or
# audio tower that text rows never feed.
SOMETIMES_UNUSED = (
    "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "vision_config", "audio_config",
)  # fmt: skip


class SpeedRefused(RuntimeError):
    """A speed setting forced on that this machine cannot honour; the message says what to send instead."""


@dataclass(frozen=True)
class Machine:
    """What the trainer runs on, as far as the speed decisions care."""

    cuda: bool
    bf16_supported: bool
    memory_bytes: int  # the GPU's when there is one, else the host's
    cpu_count: int
    has_liger: bool
    threads: int = 1  # torch's CPU threads in this process

    @classmethod
    def detect(cls) -> Machine:
        import torch

        cuda = torch.cuda.is_available()
        memory = torch.cuda.get_device_properties(0).total_memory if cuda else _host_memory_bytes()
        return cls(
            cuda=cuda,
            bf16_supported=bool(cuda and torch.cuda.is_bf16_supported()),
            memory_bytes=int(memory),
            cpu_count=os.cpu_count() or 1,
            # Liger's kernels are Triton programs: without Triton the package imports but cannot run.
            has_liger=all(importlib.util.find_spec(name) is not None for name in ("liger_kernel", "triton")),
            threads=torch.get_num_threads(),
        )


@dataclass(frozen=True)
class ModelShape:
    """The sizes the memory estimate reads from a model."""

    parameters: int
    trainable_parameters: int
    hidden_size: int
    num_layers: int
    intermediate_size: int
    vocab_size: int
    bytes_per_weight: int
    sometimes_unused: str | None = None  # a config field declaring parts a batch may not reach (SOMETIMES_UNUSED)

    @classmethod
    def of(cls, model: Any, *, use_lora: bool) -> ModelShape:
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        parameters = sum(p.numel() for p in model.parameters())
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        # LoRA r=16 on every linear layer trains well under 2% of the weights; count it as 2%.
        trainable = parameters // 50 if use_lora else parameters
        return cls(
            parameters=parameters,
            trainable_parameters=trainable,
            hidden_size=hidden,
            num_layers=layers,
            intermediate_size=int(getattr(config, "intermediate_size", 4 * hidden) or 4 * hidden),
            vocab_size=int(getattr(config, "vocab_size", 0) or 0),
            bytes_per_weight=next(model.parameters()).element_size(),
            sometimes_unused=next(
                (name for name in SOMETIMES_UNUSED for c in (model.config, config) if getattr(c, name, None)), None
            ),
        )


@dataclass(frozen=True)
class Choice:
    """One setting: what the request said, what the run uses, and why."""

    requested: str
    used: bool | int
    reason: str

    def describe(self) -> str:
        used = self.used if isinstance(self.used, int) and not isinstance(self.used, bool) else _on(self.used)
        return f"{self.requested} -> {used} ({self.reason})"


@dataclass(frozen=True)
class SpeedPlan:
    """Every speed choice of one run."""

    choices: dict[str, Choice]
    fp16: bool = False  # mixed_precision fp16: autocast to half precision with loss scaling (GPU only)

    def uses(self, name: str) -> bool:
        return bool(self.choices[name].used)

    def record(self) -> dict[str, str]:
        """name -> "requested -> used (why)", as the run records it."""
        return {name: choice.describe() for name, choice in self.choices.items()}

    def training_args(self) -> dict[str, Any]:
        """The TrainingArguments these choices set (packing, Liger and compile are the SFT path's own)."""
        workers = int(self.choices["dataloader_workers"].used)
        return {
            "bf16": self.uses("bf16"),
            "fp16": self.fp16,
            "optim": "adamw_torch_fused" if self.uses("fused_adamw") else "adamw_torch",
            "gradient_checkpointing": self.uses("gradient_checkpointing"),
            "dataloader_num_workers": workers,
            "dataloader_pin_memory": self.uses("pin_memory"),
            # A copy from pinned memory that does not wait: else each batch's copy makes the host wait until
            # the GPU has finished the step before, and the GPU then waits while the host queues the next one.
            "accelerator_config": {"non_blocking": self.uses("pin_memory")},
            "dataloader_persistent_workers": workers > 0,
            "ddp_find_unused_parameters": self.uses("find_unused_parameters"),
        }

    def log_line(self) -> str:
        return "speed: " + "; ".join(f"{name} {text}" for name, text in self.record().items())


def _on(value: bool | int) -> str:
    return "on" if value else "off"


def _asked(value: object) -> str:
    if isinstance(value, bool):
        return _on(value)
    return str(value)


def _host_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a modest machine
        return 8 * 1024**3


def forced(requested: object, reason: str = "requested") -> Choice | None:
    """The choice for a setting the request fixed, or None when it says auto."""
    if requested == "auto":
        return None
    return Choice(_asked(requested), bool(requested) if isinstance(requested, bool) else int(str(requested)), reason)


def resolve_bf16(requested: object, machine: Machine, mixed_precision: str = "auto") -> Choice:
    if mixed_precision != "auto":
        # The request validated that bf16 agrees; mixed_precision is the setting every rank's launcher reads too.
        return Choice(_asked(requested), mixed_precision == "bf16", f"mixed_precision {mixed_precision}")
    if requested is True and not machine.cuda:
        return Choice("on", True, "requested; CPU autocast")
    if choice := forced(requested):
        return choice
    if not machine.cuda:
        return Choice("auto", False, "no GPU")
    if not machine.bf16_supported:
        return Choice("auto", False, "this GPU has no bf16")
    return Choice("auto", True, "GPU supports bf16")


def resolve_mixed_precision(request: TrainingRequest, machine: Machine) -> str:
    """`no`, `bf16` or `fp16` for every rank: the request's mixed_precision, else what its bf16 setting resolves to."""
    if request.mixed_precision == "fp16" and not machine.cuda:
        raise SpeedRefused("mixed_precision fp16 needs a CUDA GPU and this machine has none; use bf16 or no.")
    if request.mixed_precision != "auto":
        return request.mixed_precision
    return "bf16" if resolve_bf16(request.bf16, machine).used else "no"


def resolve_fused_adamw(requested: object, machine: Machine) -> Choice:
    if choice := forced(requested):
        return choice
    # torch ships fused AdamW kernels for CUDA and, since 2.4, the CPU; transformers picks them by default too.
    return Choice("auto", True, "CUDA kernel" if machine.cuda else "CPU kernel")


def resolve_pin_memory(requested: object, machine: Machine) -> Choice:
    if not machine.cuda:  # transformers pins nothing without one, whatever was asked
        return Choice(_asked(requested), False, "no GPU to copy to")
    if choice := forced(requested):
        return choice
    return Choice("auto", True, "copies to the GPU overlap the step")


def resolve_threads(machine: Machine) -> Choice:
    """torch's CPU threads: not a request field. The daemon limits them when several local runs share the host's
    cores (settings.local_thread_limit, the trainer's --threads), and so does an OMP_NUM_THREADS it was given;
    otherwise the trainer takes the cores the load at its start left free (cores.limit_threads)."""
    if machine.threads < machine.cpu_count:
        return Choice(
            "auto",
            machine.threads,
            f"{machine.threads} of {machine.cpu_count} CPUs: OMP_NUM_THREADS, the daemon's share, or the load at start",
        )
    return Choice("auto", machine.threads, f"torch's default on {machine.cpu_count} CPUs")


def resolve_workers(requested: object, machine: Machine) -> Choice:
    if choice := forced(requested):
        return choice
    if not machine.cuda:
        # On the CPU the collator and the model compete for the same cores; a worker only adds a process.
        return Choice("auto", 0, "no GPU: collate in the training process")
    workers = max(0, min(MAX_AUTO_WORKERS, machine.cpu_count // 2))
    return Choice("auto", workers, f"{machine.cpu_count} CPUs beside the GPU")


def resolve_find_unused(
    requested: object, request: TrainingRequest, shape: ModelShape, *, checkpointing: bool
) -> Choice:
    """Whether DDP searches each step for weights the forward did not reach (transformers' default whenever
    gradient checkpointing is off). The search walks the autograd graph and reads a map of used weights back from
    the GPU in every backward, so the host waits for the step; without it, a weight that goes unused fails the
    run at the next step, naming this setting."""
    if not request.is_distributed:
        return Choice(_asked(requested), False, "one process: no DDP")
    if choice := forced(requested):
        return choice
    if checkpointing:
        return Choice("auto", False, "gradient checkpointing on: transformers leaves the search off beside it")
    if shape.sometimes_unused:
        return Choice("auto", True, f"{shape.sometimes_unused} in the model's config: a step may leave weights unused")
    return Choice("auto", False, "a dense model: every weight takes part in each step")


def estimate_training_bytes(shape: ModelShape, tokens: int, *, checkpointing: bool) -> int:
    """A rough peak of one training step: weights, gradients and AdamW state, and saved activations.

    Activations per token and layer follow a Llama block under bf16 autocast with fused attention (no
    sequence-squared term): ~20·hidden + 8·intermediate bytes. With checkpointing only each layer's input stays.
    """
    weights = shape.parameters * shape.bytes_per_weight
    optimizer = shape.trainable_parameters * (shape.bytes_per_weight + 8)
    per_token_layer = 2 * shape.hidden_size if checkpointing else 20 * shape.hidden_size + 8 * shape.intermediate_size
    activations = tokens * shape.num_layers * per_token_layer
    # The loss reads logits: bf16 logits plus fp32 for the softmax, for every token.
    logits = tokens * shape.vocab_size * 6
    return weights + optimizer + activations + logits


def resolve_gradient_checkpointing(
    requested: object, machine: Machine, shape: ModelShape, tokens: int, method: str = "sft"
) -> Choice:
    if choice := forced(requested):
        return choice
    factor, why = STEP_TOKENS.get(method, (1, ""))
    need = estimate_training_bytes(shape, tokens * factor, checkpointing=False)
    budget = int(machine.memory_bytes * CHECKPOINTING_MEMORY_SHARE)
    where = "GPU" if machine.cuda else "host"
    fits = need <= budget
    verdict = "fits" if fits else "exceeds"
    counted = f" (x{factor}: {why})" if why else ""
    reason = (
        f"~{need / 1024**3:.1f} GiB without it{counted} {verdict} {CHECKPOINTING_MEMORY_SHARE:.0%} of {where} memory"
    )
    return Choice("auto", not fits, reason)


# How many sequences of the batch's length a step of each method holds activations for, beside SFT's one.
STEP_TOKENS: dict[str, tuple[int, str]] = {
    "dpo": (2, "chosen and rejected"),
    "distillation": (2, "the teacher's logits beside the student's"),
    "session_distillation": (2, "the student's and the hinted teacher's passes"),
    "grpo": (2, "prompt and completion"),
    "rlvr": (2, "prompt and completion"),
    "reward_model": (2, "chosen and rejected"),
    "embedding_retriever": (3, "query, positive and negative"),
}


def resolve_compile(requested: object, machine: Machine, method: str, *, steps: int | None = None) -> Choice:
    """`steps`: the run's optimizer steps at most, where known."""
    if method not in SFT_PATH:
        return Choice(_asked(requested), False, f"not applied to {method}")
    if choice := forced(requested):
        return choice
    if not machine.cuda:
        return Choice("auto", False, "no GPU")
    if steps is not None and steps < MIN_COMPILE_STEPS:
        return Choice("auto", False, f"{steps} steps cannot repay compiling; auto compiles from {MIN_COMPILE_STEPS}")
    return Choice("auto", True, "GPU present")


def resolve_liger(requested: object, machine: Machine, method: str, *, compiled: bool = False) -> Choice:
    if method not in SFT_PATH:
        return Choice(_asked(requested), False, f"not applied to {method}")
    if requested is True and not machine.has_liger:
        raise SpeedRefused(
            "liger is true but the liger-kernel package (or Triton, which it runs on) is not installed; "
            "install it or set it false."
        )
    if requested is True and not machine.cuda:
        raise SpeedRefused("liger is true but Liger's kernels need a CUDA GPU and this machine has none; set it false.")
    if choice := forced(requested):
        return choice
    if not machine.has_liger:
        return Choice("auto", False, "liger-kernel or Triton not installed")
    if not machine.cuda:
        return Choice("auto", False, "no GPU")
    if compiled:
        # TRL keeps Liger's fused cross-entropy off (its own fused LM head takes that place), which leaves Liger's
        # layer kernels (RMSNorm, SwiGLU, RoPE): torch.compile fuses those layers itself, and kernels it cannot
        # see into stop it fusing them with their neighbours.
        return Choice("auto", False, "torch.compile fuses these layers itself")
    return Choice("auto", True, "installed")


def padding_waste(lengths: Sequence[int], batch_size: int, max_length: int) -> float:
    """The share of tokens that would be padding in batches of `batch_size` rows, each padded to its longest."""
    padded = real = 0
    for start in range(0, len(lengths), batch_size):
        batch = [min(n, max_length) for n in lengths[start : start + batch_size]]
        real += sum(batch)
        padded += max(batch) * len(batch)
    return 1 - real / padded if padded else 0.0


def resolve_packing(
    requested: object, machine: Machine, method: str, *, lengths: Sequence[int], batch_size: int, max_length: int
) -> Choice:
    if method not in SFT_PATH:
        return Choice(_asked(requested), False, f"not applied to {method}")
    if choice := forced(requested):
        return choice
    if not machine.cuda:
        # Packing changes what a step holds (many short rows in one), so CPU runs keep their measured recipes.
        return Choice("auto", False, "no GPU")
    if batch_size < 2:
        return Choice("auto", False, "batch_size 1 pads nothing")
    waste = padding_waste(lengths, batch_size, max_length)
    if waste < PACKING_MIN_WASTE:
        return Choice("auto", False, f"lengths even: {waste:.0%} padding")
    return Choice("auto", True, f"lengths vary: {waste:.0%} padding without it")


def plan_speed(
    request: TrainingRequest,
    machine: Machine,
    shape: ModelShape,
    *,
    lengths: Sequence[int] = (),
    steps: int | None = None,
) -> SpeedPlan:
    """Resolve every speed setting of `request` for this machine, model and data (`steps`: the run's optimizer
    steps at most, where known)."""
    tokens = request.batch_size * request.max_seq_length
    compile_choice = resolve_compile(request.compile, machine, request.method, steps=steps)
    checkpointing = resolve_gradient_checkpointing(
        request.gradient_checkpointing, machine, shape, tokens, request.method
    )
    return SpeedPlan(
        {
            "compile": compile_choice,
            "packing": resolve_packing(
                request.packing,
                machine,
                request.method,
                lengths=lengths,
                batch_size=request.batch_size,
                max_length=request.max_seq_length,
            ),
            "liger": resolve_liger(request.liger, machine, request.method, compiled=compile_choice.used is True),
            "bf16": resolve_bf16(request.bf16, machine, request.mixed_precision),
            "fused_adamw": resolve_fused_adamw(request.fused_adamw, machine),
            "gradient_checkpointing": checkpointing,
            "dataloader_workers": resolve_workers(request.dataloader_workers, machine),
            "pin_memory": resolve_pin_memory(request.pin_memory, machine),
            "cpu_threads": resolve_threads(machine),
            "find_unused_parameters": resolve_find_unused(
                request.find_unused_parameters, request, shape, checkpointing=checkpointing.used is True
            ),
        },
        fp16=resolve_mixed_precision(request, machine) == "fp16",
    )


def apply_liger(model: Any) -> str:
    """Put Liger's layer kernels into `model` in place (the base model under a LoRA wrapper); return the log line.

    Its fused cross-entropy stays off: TRL's fused LM head computes the loss. BashGym applies Liger itself when
    the trainer is built, before the compile probe: transformers would apply it when training starts, after the
    probe, and the model would then compile a second time, untested and outside the recorded compile time.
    """
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    _apply_liger_kernel_to_instance(model=base, fused_linear_cross_entropy=False)
    return f"liger: Liger's layer kernels in {type(base).__name__} (its fused cross-entropy off: TRL's LM head)"


def compile_with_fallback(
    model: Any,
    probe: Callable[[], None],
    *,
    log: Callable[[str], None],
    backend: Any = "inductor",
    any_length: bool = False,
) -> tuple[str | None, float]:
    """Compile `model` in place and run `probe` through it; on any failure, train eager. Return the failure (None
    when it compiled) and the seconds compiling and probing took: a run's cold start, paid before its first step.

    torch.compile fails late (at the first forward, when the backend runs), so the probe runs one real
    forward and backward before training starts: a missing compiler or an unsupported op then costs a log line,
    not the run. `any_length` compiles for inputs whose lengths change from batch to batch (packed rows): by
    default torch specialises the first graph to the probe's lengths and compiles it all again at the next batch.
    """
    import torch

    started = time.monotonic()
    # The run shows no step while this lasts (a minute or more for a large model on a GPU); the log says why.
    log("speed: torch.compile is compiling the model and checking it on one step; the first step waits for it")
    model.compile(backend=backend, dynamic=True if any_length else None)
    try:
        probe()
    except Exception as exc:  # any backend failure means eager training, which is always correct
        # nn.Module.compile keeps the compiled call here; clearing it restores the eager module.
        model._compiled_call_impl = None
        torch._dynamo.reset()
        detail = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        failure = f"{type(exc).__name__}: {detail}"[:300]
        log(f"speed: torch.compile failed ({failure}); training eager")
        return failure, time.monotonic() - started
    seconds = time.monotonic() - started
    lengths = " for inputs of any length" if any_length else ""
    log(f"speed: torch.compile compiled the model{lengths} and checked it on one step in {seconds:.1f} s")
    return None, seconds
