"""Record factories: valid specs with overridable fields."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The sha256 of the config.json `build_tiny` writes for the default student (deterministic: transformers' version
# field is dropped): a context naming a new model version states its model's real config digest, which launch
# checks. tests/unit/trainers/test_tiny_model.py holds it to the file.
TINY_CONFIG_DIGEST = "469b28e8bf73ff96badfd150636abab0569bf81287f4957b7ebb1b7b71d0fbab"


def tracking_context(**overrides: Any) -> dict[str, Any]:
    context = {
        "workspace_id": "default",
        "project_id": "nightly",
        "project_display_name": "Nightly SFT",
        "experiment_id": "lr-sweep",
        "experiment_name": "LR sweep",
        "objective": "Find the learning rate",
        "task_type": "terminal-agent",
        "model_id": "tiny",
        "model_version_id": "tiny-v1",
        "model_source_uri": "bashgym://models/tiny",
        "model_config_digest": TINY_CONFIG_DIGEST,
        "dataset_id": "traces",
        "dataset_version_id": "traces-v1",
        "dataset_source_uri": "bashgym://datasets/traces",
        "dataset_content_digest": digest("rows"),
        "environment_id": "cpu-local",
        "environment_runtime_digest": digest("runtime"),
    }
    context.update(overrides)
    return context


def suite(suite_id: str = "bash-heldout", **overrides: Any) -> dict[str, Any]:
    spec = {
        "suite_id": suite_id,
        "kind": "terminal_tasks",
        "scoring_contract": {
            "primary_metric": "pass_at_1",
            "metrics": {"pass_at_1": {"direction": "maximize"}, "timeout_rate": {"direction": "minimize"}},
        },
        "code_digest": digest(f"suite-{suite_id}"),
    }
    spec.update(overrides)
    return spec


def sft_data(tmp: Path, rows: int = 16) -> Path:
    path = tmp / "sft.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"Count the lines in notes{i}.txt"},
                        {"role": "assistant", "content": f"wc -l notes{i}.txt"},
                    ]
                }
            )
            + "\n"
            for i in range(rows)
        )
    )
    return path


def grpo_data(tmp: Path, rows: int = 8) -> Path:
    """GRPO/RLVR prompts with an inline exact_match verifier (it runs no shell code)."""
    path = tmp / "grpo.jsonl"
    verifier = {"kind": "exact_match", "expected": "wc -l notes.txt"}
    path.write_text(
        "".join(json.dumps({"prompt": f"Count notes.txt ({i})", "verifier": verifier}) + "\n" for i in range(rows))
    )
    return path


def config_digest_of(model: Path, stated: str) -> str:
    """The sha256 of `model`'s config.json in place of the default (the tiny student's: another model, a teacher,
    has its own); any other stated digest (a test's own claim) as it is."""
    config = Path(model) / "config.json"
    if stated != TINY_CONFIG_DIGEST or not config.is_file():
        return stated
    return hashlib.sha256(config.read_bytes()).hexdigest()


def training_request(tiny: Path, data: Path, **overrides: Any) -> dict[str, Any]:
    # An official run names the exact data it trains on: the context's digest is the file's.
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    base = overrides.pop("tracking_context", tracking_context())
    # One dataset version per distinct file: a version id names exactly one digest.
    context = (
        None
        if base is None
        else {
            **base,
            "dataset_content_digest": digest,
            "dataset_version_id": f"traces-{digest[:12]}",
            # ... and the model it loads: the context's config digest is the model's config.json's, where the
            # caller left the default (a launch holds a new model version's digest to the file).
            "model_config_digest": config_digest_of(tiny, base["model_config_digest"]),
        }
    )
    method = overrides.pop("method", None) or overrides.pop("strategy", "sft")  # tests may say either
    request = {
        "method": method,
        "base_model": str(tiny),
        "dataset_path": str(data),
        "max_steps": 4,
        "batch_size": 4,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5e-3,
        "save_steps": 2,
        "tracking_context": context,
        **overrides,
    }
    # Each method's own bounds (a field its method would not read is refused): GRPO and RLVR generate whole
    # groups of short completions; the others read rows up to max_seq_length.
    if request["method"] in {"grpo", "rlvr"}:
        return {"grpo_num_generations": 2, "grpo_max_completion_length": 8, **request}
    return {"max_seq_length": 128, **request}


def session_records(n: int) -> list[dict[str, Any]]:
    records = []
    for i in range(n):
        target, hint, original = f"wc -l data{i}.txt", "Hint: wc counts lines. ", f"Count lines of data{i}.txt\n$ "
        hinted = hint + original + target + "\n"
        start = hinted.index(target)
        records.append(
            {
                "record_id": f"r{i}",
                "session_id": "s1",
                "step_index": i,
                "original_context": original,
                "hinted_context": hinted,
                "hint_text": hint,
                "target_text": target,
                "target_span": {"start": start, "end": start + len(target)},
                "loss_mask": {"policy": "target_span_only"},
                "reader_confidence": 0.9,
            }
        )
    return records


def make_wheel(folder: Path, name: str, version: str, *, requires: tuple[str, ...] = (), code: str = "") -> None:
    """A minimal pure-Python wheel of package `name` (its module is `name` too)."""
    info = f"{name}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {requirement}" for requirement in requires]
    files = {
        f"{name}/__init__.py": code,
        f"{info}/METADATA": "\n".join(metadata) + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def campaign_spec(**overrides: Any) -> dict[str, Any]:
    """A campaign spec with every part set (schedule, protected metric); overrides replace whole keys."""
    return {
        "campaign_id": "bash-q4",
        "title": "Better bash commands",
        "objective": "Raise pass@1 on the terminal-task suite without more timeouts.",
        "suite_id": "bash-tasks-v1",
        "starting_model_version_id": "tiny-v1",
        "dataset_version_ids": ["traces-v1"],
        "base_recipe": {"strategy": "sft", "max_steps": 4, "learning_rate": 5e-3},
        "budget": {"runs": 4, "gpu_hours": 0},
        "stop_rules": {"max_iterations": 3, "min_improvement": 0.01, "protected_metrics": {"timeout_rate": 0.05}},
        "report_schedule": {"cron": "0 9 * * 1", "timezone": "Europe/Paris", "channel": "bash-research"},
        **overrides,
    }
