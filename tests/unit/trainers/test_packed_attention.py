"""Packed attention (trainers/attention.py): a packed row's sequences attend to themselves alone, exactly.

The CUDA varlen kernel cannot run here; its call is checked against a stand-in with the documented contract of
each torch version's signature (tokens, heads, dim in and out; causal by `is_causal` or by `window_size`).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from bashgym.trainers import attention
from bashgym.trainers.attention import packed_attention

BOUNDS = [0, 5, 6, 19, 32]  # four sequences in one row of 32 tokens, one of them a single token


class Layer(torch.nn.Module):
    """What an attention function reads from its module."""

    is_causal = True


def qkv(heads: int = 4, kv_heads: int = 4, dim: int = 8, seed: int = 0) -> tuple[torch.Tensor, ...]:
    draw = torch.Generator().manual_seed(seed)
    length = BOUNDS[-1]
    return (
        torch.randn(1, heads, length, dim, generator=draw),
        torch.randn(1, kv_heads, length, dim, generator=draw),
        torch.randn(1, kv_heads, length, dim, generator=draw),
    )


def block_causal_reference(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Plain SDPA over the whole row with a dense mask: causal, and only within a sequence."""
    length = query.shape[2]
    owner = torch.zeros(length, dtype=torch.long)
    for index, start in enumerate(BOUNDS[1:-1], start=1):
        owner[start:] = index
    mask = torch.ones(length, length, dtype=torch.bool).tril() & (owner[:, None] == owner[None, :])
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2)


def packed(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    out, weights = packed_attention(
        Layer().train(),
        query,
        key,
        value,
        None,
        cu_seq_lens_q=torch.tensor(BOUNDS, dtype=torch.int32),
        cu_seq_lens_k=torch.tensor(BOUNDS, dtype=torch.int32),
        max_length_q=13,
        max_length_k=13,
    )
    assert weights is None
    return out


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_a_packed_row_attends_within_each_sequence_only(kv_heads: int) -> None:
    query, key, value = qkv(kv_heads=kv_heads)
    out = packed(query, key, value)
    assert out.shape == (1, BOUNDS[-1], 4, 8)
    torch.testing.assert_close(out, block_causal_reference(query, key, value))
    across = F.scaled_dot_product_attention(query, key, value, is_causal=True, enable_gqa=kv_heads != 4)
    assert not torch.allclose(out[:, 5:], across.transpose(1, 2)[:, 5:], atol=1e-3), "the control: one causal row"


def reference_varlen(**expected: Any) -> Any:
    """A stand-in for torch's varlen kernel that holds our call to its contract and computes what it would."""

    def kernel(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int, **options: Any) -> Any:
        assert q.dim() == 3 and q.shape == (BOUNDS[-1], 4, 8), "queries go in as (tokens, heads, dim)"
        assert cu_q.dtype == torch.int32 and cu_q.tolist() == BOUNDS and cu_k.tolist() == BOUNDS
        assert (max_q, max_k) == (13, 13)
        assert options == expected
        if k.shape[1] != q.shape[1]:
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        parts = [
            F.scaled_dot_product_attention(
                q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1), is_causal=True
            ).transpose(0, 1)
            for s, e in itertools.pairwise(BOUNDS)
        ]
        return torch.cat(parts)

    return kernel


@pytest.mark.parametrize(
    ("parameters", "kv_heads", "options"),
    [
        # torch 2.10: causal by flag, no GQA, so fewer key heads are repeated before the call
        ({"is_causal", "return_aux"}, 2, {"is_causal": True}),
        # torch 2.11 and later: causal as a window open to the left only
        ({"window_size", "scale", "return_aux"}, 4, {"window_size": (-1, 0)}),
        ({"window_size", "scale", "enable_gqa"}, 2, {"window_size": (-1, 0), "enable_gqa": True}),
    ],
)
def test_the_varlen_kernel_gets_each_torch_versions_arguments(
    monkeypatch: pytest.MonkeyPatch, parameters: set[str], kv_heads: int, options: dict[str, Any]
) -> None:
    query, key, value = qkv(kv_heads=kv_heads, seed=1)
    monkeypatch.setattr(attention, "VARLEN", reference_varlen(**options))
    monkeypatch.setattr(attention, "VARLEN_PARAMETERS", frozenset(parameters))
    out = attention._flash_varlen(query, key, value, torch.tensor(BOUNDS), 13, None)
    assert out is not None
    torch.testing.assert_close(out, block_causal_reference(query, key, value))


def test_a_scale_the_old_kernel_cannot_take_falls_back_to_one_call_per_sequence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(attention, "VARLEN_PARAMETERS", frozenset({"is_causal"}))
    query, key, value = qkv()
    assert attention._flash_varlen(query, key, value, torch.tensor(BOUNDS), 13, 0.5) is None


def test_a_batch_that_is_not_packed_takes_sdpa_with_its_padding_mask() -> None:
    query, key, value = qkv(seed=2)
    padding = torch.ones(1, BOUNDS[-1], dtype=torch.bool)
    padding[0, :3] = False  # left padding
    out, _ = packed_attention(Layer().eval(), query, key, value, padding)
    mask = torch.ones(32, 32, dtype=torch.bool).tril() & padding[:, None, None, :]
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=mask | ~mask.any(-1, keepdim=True))
    torch.testing.assert_close(out, expected.transpose(1, 2))


def kernel_that(*, causal: bool = True, fails: bool = False) -> Any:
    """A varlen stand-in of any shape: right (causal within each sequence), wrong (not causal), or failing."""

    def kernel(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int, **options: Any) -> Any:
        if fails:
            raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")
        parts = [
            F.scaled_dot_product_attention(
                q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1), is_causal=causal
            ).transpose(0, 1)
            for s, e in itertools.pairwise(cu_q.tolist())
        ]
        return torch.cat(parts)

    return kernel


class Model:
    """What switching attention needs of a model."""

    def set_attn_implementation(self, name: str) -> None:
        self.attention = name


@pytest.mark.parametrize(
    ("kernel", "problem"),
    [
        (kernel_that(), None),
        (kernel_that(causal=False), "it differs from attention per sequence by"),
        (kernel_that(fails=True), "RuntimeError: FlashAttention only supports Ampere GPUs or newer."),
    ],
)
def test_the_varlen_kernel_trains_a_run_only_after_agreeing_with_attention_per_sequence(
    monkeypatch: pytest.MonkeyPatch, kernel: Any, problem: str | None
) -> None:
    monkeypatch.setattr(attention, "VARLEN", kernel)
    monkeypatch.setattr(attention, "VARLEN_PARAMETERS", frozenset({"window_size", "scale", "enable_gqa"}))
    monkeypatch.setattr(attention, "_takes_varlen", lambda query: attention.VARLEN is not None)
    model = Model()
    line = attention.use_packed_attention(model)
    assert model.attention == attention.NAME
    if problem is None:
        assert line.endswith("(torch's flash varlen kernel, one call per packed row)")
        assert attention.VARLEN is kernel
    else:
        # A kernel that disagrees or fails is set aside for the run, which trains correctly per sequence.
        assert "causal SDPA, one call per sequence; torch's flash varlen kernel failed its check: " + problem in line
        assert attention.VARLEN is None


def test_without_a_gpu_there_is_no_kernel_to_check() -> None:
    assert attention.varlen_problem() == ""
    assert attention.use_packed_attention(Model()).endswith("(causal SDPA, one call per sequence)")
