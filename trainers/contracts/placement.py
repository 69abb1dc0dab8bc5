"""Where an evaluator runs its model: a CUDA GPU in bfloat16 where there is one with room for it, else the CPU
in float32. An evaluation on a GPU host used to leave the GPU idle and generate on the host's cores.

`choose_placement` is the rule, on plain facts, so it is tested without a GPU; `place` reads the facts and moves
the model. The result records the placement (device, dtype, why), since a result sampled in bfloat16 on a GPU is
not bit for bit the one sampled in float32 on a CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

DeviceChoice = Literal["auto", "cpu", "cuda"]

GIB = 1024**3
# Beyond the weights, generation needs room for the KV cache and activations of a batch (16 prompts times the
# samples asked for), and the CUDA context itself: about 2 GiB for models up to 8B parameters at 48 new tokens.
HEADROOM_BYTES = 2 * GIB
WEIGHT_MARGIN = 1.2  # allocator rounding and the temporaries of the move


@dataclass(frozen=True)
class Placement:
    device: Literal["cpu", "cuda"]
    dtype: Literal["float32", "bfloat16"]
    reason: str
    gpu: str | None = None  # the GPU's name, where it runs on one

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def choose_placement(
    requested: DeviceChoice,
    *,
    cuda: bool,
    bf16: bool,
    gpu: str | None,
    free_bytes: int | None,
    params: int,
) -> Placement:
    """auto: the GPU when torch sees one with room for the model (its parameters at the dtype, plus headroom)
    beside whatever already runs there (a training run's memory is taken first); else the CPU, saying why."""
    if requested == "cpu":
        return Placement("cpu", "float32", "asked for cpu")
    if not cuda:
        if requested == "cuda":
            raise ValueError(
                "The evaluation asked for device cuda, and torch sees no CUDA GPU on this host; "
                "evaluate with --device auto (the CPU here) or on a GPU device (--compute-target ssh:<device_id>)."
            )
        return Placement("cpu", "float32", "no CUDA GPU")
    dtype: Literal["float32", "bfloat16"] = "bfloat16" if bf16 else "float32"
    precision = "bfloat16" if bf16 else "float32: the GPU has no bfloat16"
    if requested == "cuda":
        return Placement("cuda", dtype, f"asked for cuda; {precision}", gpu)
    need = int(params * (2 if bf16 else 4) * WEIGHT_MARGIN) + HEADROOM_BYTES
    if free_bytes is not None and free_bytes < need:
        return Placement(
            "cpu",
            "float32",
            f"{gpu} has {free_bytes / GIB:.1f} GiB free and the model needs about {need / GIB:.1f} GiB",
        )
    return Placement("cuda", dtype, f"a CUDA GPU with room; {precision}", gpu)


def device_facts() -> dict[str, Any]:
    """This host's accelerator as torch sees it: a trainer records these, and `place` decides on them."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "cuda": cuda,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
        "torch": torch.__version__,
    }


def place(model: Any, requested: DeviceChoice) -> tuple[Any, Placement]:
    """Move a model loaded on the CPU to where `choose_placement` says, at its dtype."""
    import torch

    facts = device_facts()
    placement = choose_placement(
        requested,
        cuda=facts["cuda"],
        bf16=facts["bf16"],
        gpu=facts["device"] if facts["cuda"] else None,
        free_bytes=int(torch.cuda.mem_get_info()[0]) if facts["cuda"] else None,
        params=sum(p.numel() for p in model.parameters()),
    )
    model = model.to(device=placement.device, dtype=getattr(torch, placement.dtype))
    return model, placement


def describe(placement: dict[str, Any] | None) -> str:
    """A recorded placement in a few words: `cuda bfloat16 (NVIDIA H200)`, `cpu float32`, or `no model` (the
    gold solutions run none)."""
    if not placement:
        return "no model"
    gpu = f" ({placement['gpu']})" if placement.get("gpu") else ""
    return f"{placement['device']} {placement['dtype']}{gpu}"


def ran_on(*results_details: dict[str, Any]) -> list[str]:
    """Where each result's model ran, `not recorded` for a result from before placements were recorded."""
    return [describe(d["placement"]) if "placement" in d else "not recorded" for d in results_details]


def ran_alike(*described: str) -> bool | None:
    """Whether the models of results (as `ran_on` describes them) ran on one device at one precision: the gold
    solutions run none and match any; None where a placement was not recorded, as nobody knows."""
    if "not recorded" in described:
        return None
    return len(set(described) - {"no model"}) <= 1


def device_of(model: Any) -> Any:
    """The device a placed model's inputs go to."""
    return next(model.parameters()).device
