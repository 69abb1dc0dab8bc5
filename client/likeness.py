"""What makes two evaluation results comparable: they were made alike.

A result records the settings that change its score (`details.settings`: temperature, samples, new tokens, seed,
split, task limit and the evaluator's version, as its kind reads them). Two results whose settings differ in any of
them measure different things: a comparison of them says nothing about the models, so the daemon refuses to
compute one, the ledger marks an imported one unlike whatever it claims, and the gate never counts it.
"""

from __future__ import annotations

from typing import Any

# How a setting is passed to `bashgym eval run`, to say the exact command that evaluates a model alike.
FLAGS = {
    "samples": "--samples",
    "temperature": "--temperature",
    "max_new_tokens": "--max-new-tokens",
    "seed": "--seed",
    "split": "--split",
    "limit_tasks": "--limit-tasks",
}


def settings_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """The settings a result recorded, or None (an import, or a result from before they were recorded)."""
    settings = (result.get("details") or {}).get("settings")
    return settings if isinstance(settings, dict) else None


def unlike(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The settings two results differ in, `{name: {"baseline": x, "candidate": y}}` (empty: made alike); None
    when either recorded none, since then nothing shows they were made alike."""
    base, cand = settings_of(baseline), settings_of(candidate)
    if base is None or cand is None:
        return None
    return {
        name: {"baseline": base.get(name), "candidate": cand.get(name)}
        for name in sorted(set(base) | set(cand))
        if base.get(name) != cand.get(name)
    }


def likeness(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """What a comparison records of its two results: `alike` (True, False, or None where a side recorded no
    settings) and `unlike`, the settings that differ."""
    differ = unlike(baseline, candidate)
    return {"alike": None if differ is None else not differ, "unlike": differ or {}}


def described(differ: dict[str, dict[str, Any]]) -> str:
    """`temperature 0.7 (baseline) and 0.0 (candidate), seed 0 and 1`."""
    parts = [f"{name} {v['baseline']!r} and {v['candidate']!r}" for name, v in differ.items()]
    return ", ".join(parts).replace("'", "")


def evaluate_alike(project: str, result: dict[str, Any], settings: dict[str, Any]) -> str:
    """The command that evaluates `result`'s model again with `settings` (another result's), so the two compare."""
    if result.get("run_id"):
        subject = f"--run {result['run_id']}"
    elif result.get("model_version_id"):
        subject = f"--model-version {result['model_version_id']}"
    else:
        subject = "--gold"
    flags = [
        f"{flag} {settings[name]}"
        for name, flag in FLAGS.items()
        if settings.get(name) is not None and (name, settings[name]) != ("split", "all")
    ]
    # A held-out suite is its rows: the same file again (a terminal-task result records `samples`).
    rows = "" if "samples" in settings else f" --dataset-path FILE (the rows of suite {result.get('suite_id')})"
    return f"bashgym eval run --project {project} {subject} {' '.join(flags)}{rows}".rstrip()
