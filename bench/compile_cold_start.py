"""Compile cold start: what `torch.compile` costs before a run's first step, whole model against each decoder layer.

BashGym's `compile` setting compiles the whole model (the reference's compiled loop did too). Compiling each
decoder layer instead ("regional" compilation: the layers share one code object, so dynamo compiles it once)
should cost a fraction of the time, at some cost in fusion across layer boundaries. The model and its shapes are
gpu_sft.py's (the reference, or --tiny); each mode runs in a fresh process with inductor's caches off, so neither
reuses the other's work; one JSON line per mode, then the ratio.

    python bench/compile_cold_start.py --tiny --layers 24   # CPU, 24 layers of the tiny model, about 70 s here
    python bench/compile_cold_start.py --tiny --steps 1     # a quick check of the script
    python bench/compile_cold_start.py                      # the reference's shape, on a GPU
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Any

from gpu_sft import REFERENCE, TINY, Shape, build_model


def measure(mode: str, shape: Shape, steps: int) -> dict[str, Any]:
    import torch

    model = build_model(shape, seed=0)
    if mode == "whole":
        model.compile()
    else:
        for layer in model.model.layers:
            layer.compile()
    cuda = torch.cuda.is_available()
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq_len), device=model.device)
    # bf16 autocast on a GPU, as the reference trains; full precision on a CPU.
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()

    def step() -> None:
        with autocast:
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        if cuda:
            torch.cuda.synchronize()

    started = time.perf_counter()
    step()
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return {
        "bench": "compile_cold_start", "mode": mode, "device": str(model.device), "torch": torch.__version__,
        "config": dataclasses.asdict(shape), "first_step_s": round(first, 2),
        "step_s": round((time.perf_counter() - started) / steps, 4),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="gpu_sft.py's tiny model instead of the reference")
    parser.add_argument("--layers", type=int, help="override the shape's number of decoder layers")
    parser.add_argument("--steps", type=int, default=5, help="steady steps timed after the first")
    parser.add_argument("--mode", choices=["whole", "regional"], help=argparse.SUPPRESS)  # one measurement
    args = parser.parse_args()
    shape = TINY if args.tiny else REFERENCE
    if args.layers:
        shape = dataclasses.replace(shape, layers=args.layers)
    if args.mode:
        print(json.dumps(measure(args.mode, shape, args.steps)), flush=True)
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
        "regional_over_whole_first_step": round(regional["first_step_s"] / whole["first_step_s"], 3),
        "regional_over_whole_step": round(regional["step_s"] / whole["step_s"], 3),
    }
    print(json.dumps(ratios), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
