"""Compile cold start: what `torch.compile` costs before a run's first step, whole model against each decoder layer.

BashGym's `compile` setting compiles the whole model (the reference's compiled loop did too). Compiling each
decoder layer instead ("regional" compilation: the layers share one code object, so dynamo compiles it once)
should cost a fraction of the time, at some cost in fusion across layer boundaries. Each mode runs in a fresh
process with inductor's caches off, so neither reuses the other's work; one JSON line per mode, then the ratio.

    python bench/compile_cold_start.py                       # CPU, 24 layers of a tiny Llama, about 90 s here
    python bench/compile_cold_start.py --layers 2 --steps 2  # a quick check of the script
    python bench/compile_cold_start.py --hidden 1024 --heads 16 --vocab 32000 --batch 4 --seq-len 2048  # GPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def measure(mode: str, args: argparse.Namespace) -> dict[str, object]:
    import contextlib

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.heads, vocab_size=args.vocab,
        attn_implementation="sdpa",
    )  # fmt: skip
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = LlamaForCausalLM(config).to(device)
    if mode == "whole":
        model.compile()
    else:
        for layer in model.model.layers:
            layer.compile()
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq_len), device=device)
    # bf16 autocast on a GPU, as the reference trains; full precision on a CPU.
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()

    def step() -> None:
        with autocast:
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        if device == "cuda":
            torch.cuda.synchronize()

    started = time.perf_counter()
    step()
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    return {
        "bench": "compile_cold_start", "mode": mode, "device": device, "torch": torch.__version__,
        "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "vocab": args.vocab,
        "batch": args.batch, "seq_len": args.seq_len, "first_step_s": round(first, 2),
        "step_s": round((time.perf_counter() - started) / args.steps, 4),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="steady steps timed after the first")
    parser.add_argument("--mode", choices=["whole", "regional"], help=argparse.SUPPRESS)  # one measurement
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args)), flush=True)
        return 0
    env = {**os.environ, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    results = {}
    for mode in ("whole", "regional"):
        command = [sys.executable, __file__, "--mode", mode, *sys.argv[1:]]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"{mode}: exit {done.returncode}\n{done.stderr[-3000:]}")
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(results[mode]), flush=True)
    whole, regional = results["whole"], results["regional"]
    ratios = {
        "bench": "compile_cold_start",
        "regional_over_whole_first_step": round(float(regional["first_step_s"]) / float(whole["first_step_s"]), 3),  # type: ignore[arg-type]
        "regional_over_whole_step": round(float(regional["step_s"]) / float(whole["step_s"]), 3),  # type: ignore[arg-type]
    }
    print(json.dumps(ratios), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
