"""Attention for packed rows: each packed sequence attends to itself alone, at the cost of its own length.

Padding-free packing (the `packing` speed setting) hands the model one row holding many sequences, their bounds
in `cu_seq_lens_q`. transformers' SDPA path keeps them apart with a dense mask over the whole row: correct, but
attention then costs the row's length squared (32,768² for 16 bins of 2,048 tokens, several times the rest of
the step) instead of the sum of each sequence's, and the mask alone takes a GiB. `packed_attention` gives the
bounds to a variable-length kernel instead: torch's flash varlen kernel on a CUDA GPU in bf16 or fp16, one
causal SDPA call per sequence anywhere else. Batches without bounds (not packed) take transformers' SDPA path.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "bashgym_packed"
HALF = (torch.bfloat16, torch.float16)


def _find_varlen() -> tuple[Any, frozenset[str]]:
    """torch's varlen kernel and the parameters this torch's version of it takes (they changed from 2.10 on)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # torch before 2.10
        return None, frozenset()
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


# Looked up once, at import: the attention function runs inside compiled graphs, where a lookup would break them.
VARLEN, VARLEN_PARAMETERS = _find_varlen()


def use_packed_attention(model: Any) -> str:
    """Switch `model` to packed attention; return the log line saying which kernel its packed rows take."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(NAME, packed_attention)
    # A packed row carries no mask, its bounds travel as cu_seq_lens; only a padded batch needs one (2D).
    AttentionMaskInterface.register(NAME, flash_attention_mask)
    model.set_attn_implementation(NAME)
    how = "causal SDPA, one call per sequence"
    if (problem := varlen_problem()) is None:
        how = "torch's flash varlen kernel, one call per packed row"
    elif problem:
        _disable_varlen()
        how += f"; torch's flash varlen kernel failed its check: {problem}"
    return f"attention: packed sequences attend to themselves only ({how})"


def varlen_problem() -> str | None:
    """Why the varlen kernel must not train this run ("" where it does not apply), or None when it agrees with
    attention per sequence on a small packed row: a torch whose kernel takes its arguments differently (they
    changed twice) then trains correctly, only slower, instead of wrongly."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device=device).manual_seed(0)
    query, key, value = (
        torch.randn(1, 2, 64, 64, device=device, dtype=torch.bfloat16, generator=generator) for _ in range(3)
    )
    if not _takes_varlen(query):
        return ""
    bounds = torch.tensor([0, 3, 20, 21, 64], dtype=torch.int32, device=device)
    try:
        out = _flash_varlen(query, key, value, bounds, 43, None)
    except Exception as exc:  # any failure means attention per sequence, which is always correct
        return f"{type(exc).__name__}: {exc}"[:200]
    if out is None:
        return "this torch's kernel cannot take the call"
    difference = (out.float() - _per_sequence(query, key, value, bounds, 0.0, None).float()).abs().max().item()
    return None if difference < 2e-2 else f"it differs from attention per sequence by {difference:.3g}"


def _disable_varlen() -> None:
    global VARLEN
    VARLEN = None


def packed_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: (batch, heads, length, dim) in, (batch, length, heads, dim) out."""
    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is None or query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        return _unpacked(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    dropout = dropout if module.training else 0.0
    longest = kwargs.get("max_length_q")
    if _takes_varlen(query) and dropout == 0.0 and longest is not None:
        out = _flash_varlen(query, key, value, bounds, longest, scaling)
        if out is not None:
            return out, None
    return _per_sequence(query, key, value, bounds, dropout, scaling), None


def _takes_varlen(query: torch.Tensor) -> bool:
    """Whether torch's flash varlen kernel can take these queries: it runs on CUDA, in half precision only."""
    return VARLEN is not None and query.is_cuda and query.dtype in HALF


def _flash_varlen(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: torch.Tensor, longest: Any,
    scaling: float | None,
) -> torch.Tensor | None:  # fmt: skip
    """One kernel call over the whole row; None when this torch's kernel cannot take these arguments."""
    accepts = VARLEN_PARAMETERS
    options: dict[str, Any] = {"window_size": (-1, 0)} if "window_size" in accepts else {"is_causal": True}
    head_dim = query.shape[-1]
    if scaling is not None and abs(scaling - head_dim**-0.5) > 1e-9:
        if "scale" not in accepts:
            return None
        options["scale"] = scaling
    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))  # (tokens, heads, dim)
    if k.shape[1] != q.shape[1]:
        if "enable_gqa" in accepts:
            options["enable_gqa"] = True
        else:
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    bounds = bounds.to(device=q.device, dtype=torch.int32)
    out: torch.Tensor = VARLEN(q, k, v, bounds, bounds, longest, longest, **options)
    return out.unsqueeze(0)


# Outside any compiled graph: its loop runs over the row's own bounds, which a graph would recompile for each time.
@torch.compiler.disable  # type: ignore[untyped-decorator]
def _per_sequence(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: torch.Tensor, dropout: float,
    scaling: float | None,
) -> torch.Tensor:  # fmt: skip
    """Causal SDPA on each sequence's own slice of the row: exact wherever a varlen kernel is not available."""
    edges = [int(b) for b in bounds.tolist()]
    if edges[-1] < query.shape[2]:
        edges.append(query.shape[2])  # a tail the bounds leave out is a sequence of its own, never a neighbour's
    gqa = key.shape[1] != query.shape[1]
    parts = [
        F.scaled_dot_product_attention(
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            dropout_p=dropout,
            is_causal=True,
            scale=scaling,
            enable_gqa=gqa,
        )
        for start, end in itertools.pairwise(edges)
        if end > start
    ]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def _unpacked(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
    dropout: float, scaling: float | None, **kwargs: Any,
) -> tuple[torch.Tensor, None]:  # fmt: skip
    """A batch that is not packed: transformers' SDPA, the 2D padding mask made into the 4D causal one it reads."""
    mask = attention_mask
    if mask is not None and mask.dim() == 2:
        q_len, kv_len = query.shape[2], key.shape[2]
        causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
        mask = causal[None, None] & mask[:, None, None, :].bool()
        # A query with nothing to attend to (left padding) reads every key instead of NaN; its output is unused.
        mask = mask | ~mask.any(dim=-1, keepdim=True)
    return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)
