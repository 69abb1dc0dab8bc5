"""Compile cold start: what `torch.compile` costs before a run's first step, whole model against each decoder layer.

BashGym's `compile` setting compiles the whole model (the reference's compiled loop did too). Compiling each
decoder layer instead ("regional" compilation: the layers share one code object, so dynamo compiles it once)
should cost a fraction of the time, at some cost in fusion across layer boundaries. Each mode runs in a fresh
process with inductor's caches off, so neither reuses the other's work; one JSON line per mode, then the ratio.

    python bench/compile_cold_start.py                       # CPU, 24 layers of a tiny Llama, about 90 s here
    python bench/compile_cold_start.py --layers 2 --steps 2  # a quick check of the script
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def measure(mode: str, layers: int, hidden: int, seq_len: int, steps: int) -> dict[str, object]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=1000, attn_implementation="sdpa",
    )  # fmt: skip
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = LlamaForCausalLM(config).to(device)
    if mode == "whole":
        model.compile()
    else:
        for layer in model.model.layers:
            layer.compile()
    tokens = torch.randint(0, config.vocab_size, (2, seq_len), device=device)

    def step() -> None:
        model(input_ids=tokens, labels=tokens).loss.backward()
        if device == "cuda":
            torch.cuda.synchronize()

    started = time.perf_counter()
    step()
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return {
        "bench": "compile_cold_start", "mode": mode, "device": device, "torch": torch.__version__, "layers": layers,
        "hidden": hidden, "seq_len": seq_len, "first_step_s": round(first, 2),
        "step_s": round((time.perf_counter() - started) / steps, 4),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="steady steps timed after the first")
    parser.add_argument("--mode", choices=["whole", "regional"], help=argparse.SUPPRESS)  # one measurement
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.layers, args.hidden, args.seq_len, args.steps)), flush=True)
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
