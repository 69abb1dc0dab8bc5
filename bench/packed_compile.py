"""Compiled packed SFT on the CPU: how often the model is compiled over packed rows of changing length.

A GPU run trains packed rows through torch's flash varlen kernel, which needs CUDA; here a CPU stand-in with the
same call and the same kind of op (tests/support/varlen_standin.py: exact attention per sequence, a torch.library custom
op) takes its place, so the compiled graphs are those a GPU run would compile. The other kernel is the one a CPU
run really uses (one SDPA call per sequence, outside the graph). Each runs gpu_sft.py's tiny model through
BashGym's SFT trainer with compile and packing on, in a fresh process with an empty inductor cache, and prints
one JSON line: recompilations (TORCH_LOGS=recompiles), graphs captured, the compile time BashGym recorded, and
the whole run's wall time. Tokens per second on a stand-in kernel mean nothing and are not printed.

    python bench/packed_compile.py              # both kernels, 32 steps each, about 90 s here
    python bench/packed_compile.py --steps 4    # a quick check of the script
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KERNELS = ("varlen stand-in", "per-sequence SDPA")


def child(kernel: str, steps: int, out: Path) -> None:
    """One compiled packed run, in this (fresh) process."""
    sys.path[:0] = [str(REPO / "bench"), str(REPO)]
    import gpu_sft

    gpu_sft.import_bashgym()
    if kernel == "varlen stand-in":
        from tests.support import varlen_standin

        varlen_standin.install()
    gpu_sft.TINY = dataclasses.replace(gpu_sft.TINY, warmup_steps=2, timed_steps=steps - 2)  # the first two warm up
    fields = ["--set", "compile=true", "--set", "packing=true"]
    gpu_sft.main(
        ["--tiny", "--variable-lengths", "--trainers", "bashgym", "--methods", "full", *fields, "--out", str(out)]
    )


def measure(kernel: str, steps: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "lines.jsonl"
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TORCH_LOGS": "recompiles"}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, __file__, "--child", kernel, "--steps", str(steps), "--child-out", str(out)],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"the {kernel} run failed:\n{done.stderr[-3000:]}")
        runs = [line for line in map(json.loads, out.read_text().splitlines()) if line.get("trainer") == "bashgym"]
    compile_record = runs[-1]["speed"]["compile"]
    seconds = re.search(r"compiled in (\d+) s", compile_record)
    return {
        "bench": "packed_compile",
        "kernel": kernel,
        "steps": steps,
        "recompilations": done.stderr.count("Recompiling function"),
        "graphs": runs[-1]["compiled_graphs"],
        "compile_s": int(seconds.group(1)) if seconds else None,
        "compile": compile_record,
        "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=32, help="training steps per run, the first two warm-up")
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated: " + ", ".join(KERNELS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.steps, args.child_out)
        return 0
    for kernel in args.kernels.split(","):
        print(json.dumps(measure(kernel, args.steps)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
