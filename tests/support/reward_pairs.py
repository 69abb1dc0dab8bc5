"""A learnable synthetic preference for tiny reward models: the chosen answer inspects (grep, ls, wc, head), the
rejected one destroys (rm, chmod, dd, truncate). Four sources make four slices and four bootstrap clusters. Both
answers end with one tail drawn from a shared pool, so the last tokens (which a sequence classifier's head reads)
say nothing by themselves, and the longer answer is the chosen one in half the pairs and the rejected one in the
other half, so length alone predicts nothing."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Literal

WORDS = ("alpha", "bravo", "delta", "echo", "fox", "golf", "hotel", "india", "kilo", "lima", "mike", "nova")
SOURCES = {
    "search": ("grep -c {w} notes.txt", "rm -rf {w}"),
    "listing": ("ls -l {w}/", "chmod -R 777 {w}/"),
    "counting": ("wc -l {w}.log", "truncate -s 0 {w}.log"),
    "reading": ("head -n 5 {w}.txt", "dd if=/dev/zero of={w}.txt"),
}
TAILS = (" && echo done", " ; echo ok", " 2>/dev/null", " # {w}")
LONGER = " --verbose --color=never"


def reward_pairs(seed: int, n: int, *, preferring: Literal["quality", "brevity"] = "quality") -> list[dict[str, Any]]:
    """`n` pairs; different seeds never share a pair (the numbers in their names do not overlap). Preferring
    "brevity", the chosen answer is always the shorter one and the inspecting one in only half the pairs, so
    length is all a model can learn from them."""
    rng = random.Random(seed)
    names = sorted(SOURCES)
    rows = []
    for i in range(n):
        word = f"{rng.choice(WORDS)}{seed * 100 + rng.randrange(100)}"
        source = names[i % len(names)]
        good, bad = (template.format(w=word) for template in SOURCES[source])
        tail = rng.choice(TAILS).format(w=word)
        flip = (i // len(names)) % 2
        if preferring == "brevity":
            chosen, rejected = (bad, good + LONGER) if flip else (good, bad + LONGER)
        else:
            chosen, rejected = (good, bad + LONGER) if flip else (good + LONGER, bad)
        rows.append(
            {
                "prompt": f"Task: inspect {word}.\n",
                "chosen": chosen + tail,
                "rejected": rejected + tail,
                "source": source,
            }
        )
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
