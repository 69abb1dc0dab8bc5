"""The evaluator's placement on a GPU: a held-out evaluation of the tiny model where `--device auto` puts it (a CUDA
GPU in bfloat16, where there is one) against the same evaluation on the CPU in float32, on the same rows.

Prints one JSON line, `{"check": "eval_placement", ...}`: where auto put the model and why, each placement's rows
per second, and the largest relative difference of a row's negative log-likelihood (supervised rows) and of a
pair's chosen-side NLL (preference rows). `agrees` is that difference within --tolerance: bfloat16 rounds, it must
not change what is measured. On a machine without a GPU both sides run on the CPU (a rehearsal: it agrees exactly).
Needs torch and transformers only; the repository's own tree is imported when bashgym is not installed.

    python bench/gpu_eval_check.py [--out FILE]      # FILE: the line is appended too (bench/gpu_session.sh)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    supervised = [
        {
            "messages": [
                {"role": "user", "content": f"Count the lines in notes{i}.txt"},
                {"role": "assistant", "content": f"wc -l notes{i}.txt"},
            ]
        }
        for i in range(16)
    ]
    pairs = [{"prompt": f"Show the size of dir{i}", "chosen": f"du -sh dir{i}", "rejected": "ls"} for i in range(8)]
    return supervised, pairs


def measure(
    model: Any, tokenizer: Any, data: list[dict[str, Any]], reference: Any = None
) -> tuple[dict[str, Any], float]:
    from bashgym.trainers.heldout_eval import evaluate_rows

    started = time.perf_counter()
    summary = evaluate_rows(
        model, tokenizer, data, max_new_tokens=16, emit=lambda *args, **fields: None, reference=reference
    )
    return summary, len(data) / (time.perf_counter() - started)


def largest_relative_difference(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return max(abs(a[t][key] - b[t][key]) / max(abs(a[t][key]), 1e-6) for t in a)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="append the JSON line to this file too")
    parser.add_argument("--tolerance", type=float, default=0.02, help="largest relative NLL difference that agrees")
    args = parser.parse_args(argv)
    from gpu_sft import import_bashgym

    import_bashgym("bashgym.trainers.contracts.placement")  # torch and transformers only: no pydantic on the GPU host
    from bashgym.trainers.contracts.placement import place
    from bashgym.trainers.tiny import build_tiny
    from transformers import AutoModelForCausalLM, AutoTokenizer

    supervised, pairs = rows()
    with tempfile.TemporaryDirectory(prefix="gpu-eval-check-") as tmp:
        directory = build_tiny(Path(tmp) / "model")
        tokenizer = AutoTokenizer.from_pretrained(directory)
        sides = {}
        for name, device in (("cpu", "cpu"), ("auto", "auto")):
            model, placement = place(AutoModelForCausalLM.from_pretrained(directory), device)
            model.eval()
            generation, generation_rate = measure(model, tokenizer, supervised)
            # Full weights: the margin is against a frozen copy of the base, placed as the model is.
            frozen, _ = place(AutoModelForCausalLM.from_pretrained(directory), device)
            preference, preference_rate = measure(model, tokenizer, pairs, frozen.eval())
            sides[name] = {
                "placement": placement.to_json(),
                "generation": generation,
                "preference": preference,
                "rows_per_s": round((generation_rate + preference_rate) / 2, 2),
            }
    cpu, auto = sides["cpu"], sides["auto"]
    nll = largest_relative_difference(cpu["generation"]["per_task"], auto["generation"]["per_task"], "nll")
    chosen = largest_relative_difference(cpu["preference"]["per_task"], auto["preference"]["per_task"], "chosen_nll")
    record = {
        "check": "eval_placement",
        "placement": auto["placement"],
        "rows": len(supervised) + len(pairs),
        "rows_per_s": {"cpu_float32": cpu["rows_per_s"], "auto": auto["rows_per_s"]},
        "heldout_loss": {
            "cpu_float32": round(cpu["generation"]["metrics"]["heldout_loss"], 5),
            "auto": round(auto["generation"]["metrics"]["heldout_loss"], 5),
        },
        "max_relative_nll_difference": {"supervised": round(nll, 5), "preference_chosen": round(chosen, 5)},
        "agrees": max(nll, chosen) <= args.tolerance,
    }
    line = json.dumps(record)
    print(line, flush=True)
    if args.out is not None:
        with args.out.open("a") as handle:
            handle.write(line + "\n")
    return 0 if record["agrees"] else 1


if __name__ == "__main__":
    sys.exit(main())
