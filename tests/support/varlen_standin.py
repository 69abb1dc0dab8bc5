"""A CPU stand-in for torch's flash varlen kernel (`torch.nn.attention.varlen.varlen_attn`), for tests only.

The real kernel runs on CUDA in half precision, so no CPU test reaches the path a GPU run trains through. This
stand-in takes the same call (packed (tokens, heads, dim) queries, keys and values, cumulative bounds, longest
lengths as ints) and computes exact causal attention per sequence, forward and backward. Like the real one it is
a `torch.library` custom op, so torch.compile treats it as one opaque kernel whose `max_q` is a symbolic int.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch

PARAMETERS = frozenset({"query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k", "is_causal"})


def _spans(bounds: torch.Tensor) -> list[tuple[int, int]]:
    return [(start, end) for start, end in itertools.pairwise(bounds.tolist()) if end > start]


def _scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Causal attention probabilities of one sequence, (heads, length, length), in float32."""
    q, k = (t.transpose(0, 1).float() for t in (query, key))
    scores = q @ k.transpose(-1, -2) * query.shape[-1] ** -0.5
    length = query.shape[0]
    causal = torch.ones(length, length, dtype=torch.bool, device=query.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1)


@torch.library.custom_op("bashgym_tests::varlen_attn", mutates_args=())
def varlen_attn(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    is_causal: bool = False,
) -> torch.Tensor:
    out = torch.zeros_like(query)
    for start, end in _spans(cu_seq_q):
        probabilities = _scores(query[start:end], key[start:end])
        out[start:end] = (probabilities @ value[start:end].transpose(0, 1).float()).transpose(0, 1).to(out.dtype)
    return out


@varlen_attn.register_fake
def _(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False):  # type: ignore[no-untyped-def]
    return torch.empty_like(query)


@torch.library.custom_op("bashgym_tests::varlen_attn_backward", mutates_args=())
def _backward_op(
    grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: torch.Tensor
) -> list[torch.Tensor]:
    grads = [torch.zeros_like(t) for t in (query, key, value)]
    for start, end in _spans(bounds):
        q, k, v, g = (t[start:end].transpose(0, 1).float() for t in (query, key, value, grad))
        probabilities = _scores(query[start:end], key[start:end])
        d_probabilities = g @ v.transpose(-1, -2)
        d_scores = probabilities * (d_probabilities - (d_probabilities * probabilities).sum(-1, keepdim=True))
        scale = query.shape[-1] ** -0.5
        for into, part in zip(grads, (d_scores @ k * scale, d_scores.transpose(-1, -2) @ q * scale,
                                      probabilities.transpose(-1, -2) @ g), strict=True):  # fmt: skip
            into[start:end] = part.transpose(0, 1).to(into.dtype)
    return grads


@_backward_op.register_fake
def _(grad, query, key, value, bounds):  # type: ignore[no-untyped-def]
    return [torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)]


def _save(ctx, inputs, output):  # type: ignore[no-untyped-def]
    query, key, value, cu_seq_q = inputs[:4]
    ctx.save_for_backward(query, key, value, cu_seq_q)


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    d_query, d_key, d_value = _backward_op(grad, *ctx.saved_tensors)
    return d_query, d_key, d_value, None, None, None, None, None


varlen_attn.register_autograd(_backward, setup_context=_save)


def install(set_attribute: Callable[[Any, str, Any], None] = setattr) -> None:
    """Make trainers/attention.py take this stand-in as torch's varlen kernel, on any device and dtype, as a CUDA
    GPU in bf16 would take the real one. A test passes `monkeypatch.setattr`, so the kernel is restored after it."""
    from bashgym.trainers import attention

    set_attribute(attention, "VARLEN", varlen_attn)
    set_attribute(attention, "VARLEN_PARAMETERS", PARAMETERS)
    set_attribute(attention, "_takes_varlen", lambda query: attention.VARLEN is not None)
