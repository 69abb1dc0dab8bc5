"""The arithmetic behind evaluation evidence: pass@k, holdout splits, contamination, the holdout gate,
the paired cluster bootstrap and reward-variance diagnostics.

Everything here is a pure function over plain values (standard library only), so the evaluation
trainer and the promotion gate can share it and tests need no fixtures.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

VERIFIER_STATUSES = ("ok", "tampered", "error")
SPLITS = ("train", "holdout")
REWARD_SERIES = ("train.reward_mean", "train.reward_std", "train.frac_zero_std_groups")
MAX_FRAC_ZERO_STD_GROUPS = 0.5
MIN_REWARD_STD_MEAN = 1e-6


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts with c passes: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)."""
    if n < 0 or c < 0 or k < 1:
        raise ValueError(f"pass_at_k needs n >= 0, c >= 0 and k >= 1; got n={n}, c={c}, k={k}")
    if k > n or c > n:
        raise ValueError(f"pass_at_k needs k <= n and c <= n; got n={n}, c={c}, k={k}. Run at least k attempts.")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) as a product of terms in (0, 1]: the binomials themselves overflow floats.
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(frozen=True)
class Attempt:
    """One scored attempt of one task."""

    task_id: str
    task_family: str
    attempt_index: int
    passed: bool
    reward: float
    verifier_status: str
    timed_out: bool
    duration_s: float
    split: str = "eval"
    unsafe: bool = False  # the attempt took at least one unsafe action (trainers/environments/safety.py)

    def __post_init__(self) -> None:
        if self.verifier_status not in VERIFIER_STATUSES:
            raise ValueError(
                f"Attempt {self.task_id}#{self.attempt_index} has verifier_status {self.verifier_status!r}; "
                f"use one of {', '.join(VERIFIER_STATUSES)}."
            )

    @property
    def counts_as_passed(self) -> bool:
        """A pass the verifier vouches for: a tampered or errored verification never counts."""
        return self.passed and self.verifier_status == "ok"


def _group_by_task(attempts: Sequence[Attempt]) -> dict[str, list[Attempt]]:
    by_task: dict[str, list[Attempt]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for attempt in attempts:
        key = (attempt.task_id, attempt.attempt_index)
        if key in seen:
            raise ValueError(f"Attempt {attempt.task_id}#{attempt.attempt_index} appears twice; drop the duplicate.")
        seen.add(key)
        group = by_task[attempt.task_id]
        if group and group[0].task_family != attempt.task_family:
            raise ValueError(
                f"Task {attempt.task_id!r} is in families {group[0].task_family!r} and {attempt.task_family!r}; "
                "a task belongs to one family."
            )
        group.append(attempt)
    return {task_id: by_task[task_id] for task_id in sorted(by_task)}


def _rates(attempts: Sequence[Attempt]) -> dict[str, float]:
    total = len(attempts)
    return {
        "mean_success": sum(a.counts_as_passed for a in attempts) / total,
        "timeout_rate": sum(a.timed_out for a in attempts) / total,
        "tamper_rate": sum(a.verifier_status == "tampered" for a in attempts) / total,
        "unsafe_action_rate": sum(a.unsafe for a in attempts) / total,
    }


def _mean_pass_at_k(groups: Sequence[Sequence[Attempt]], k: int) -> float:
    return statistics.fmean(pass_at_k(len(g), sum(a.counts_as_passed for a in g), k) for g in groups)


def summarize(attempts: Sequence[Attempt], ks: tuple[int, ...] = (1, 4, 8)) -> dict[str, Any]:
    """pass@k averaged over tasks, with success, timeout, tamper and unsafe-action rates overall, per family and
    per task.

    A k larger than some task's attempt count is left out and listed under "skipped_k".
    """
    if not attempts:
        raise ValueError("summarize got no attempts; run the evaluation before summarizing it.")
    if any(k < 1 for k in ks):
        raise ValueError(f"ks must all be >= 1; got {ks}")
    by_task = _group_by_task(attempts)
    min_n = min(len(group) for group in by_task.values())
    summary: dict[str, Any] = {"tasks": len(by_task), "attempts": len(attempts)}
    for k in sorted(set(ks)):
        if k <= min_n:
            summary[f"pass@{k}"] = _mean_pass_at_k(list(by_task.values()), k)
    summary["skipped_k"] = sorted(k for k in set(ks) if k > min_n)
    summary.update(_rates(attempts))
    summary["by_family"] = _summarize_families(by_task)
    summary["per_task"] = {
        task_id: {
            "family": group[0].task_family,
            "n": len(group),
            "c": sum(a.counts_as_passed for a in group),
            "pass@1": pass_at_k(len(group), sum(a.counts_as_passed for a in group), 1),
        }
        for task_id, group in by_task.items()
    }
    return summary


def _summarize_families(by_task: Mapping[str, Sequence[Attempt]]) -> dict[str, dict[str, Any]]:
    families: dict[str, list[Sequence[Attempt]]] = defaultdict(list)
    for group in by_task.values():
        families[group[0].task_family].append(group)
    return {
        family: {
            "tasks": len(groups),
            "attempts": sum(len(g) for g in groups),
            "pass@1": _mean_pass_at_k(groups, 1),
            **_rates([a for g in groups for a in g]),
        }
        for family, groups in sorted(families.items())
    }


def holdout_split(task_families: Mapping[str, str], *, fraction: float, seed: int) -> dict[str, str]:
    """Assign each task to "train" or "holdout", whole families at a time, reproducibly for a seed."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1]; got {fraction}")
    families = sorted(set(task_families.values()), key=lambda f: (hashlib.sha256(f"{seed}:{f}".encode()).digest(), f))
    n_holdout = round(fraction * len(families))
    if fraction > 0 and len(families) >= 2:
        n_holdout = max(1, n_holdout)
    # Some family always trains: a split with nothing in train is no split.
    n_holdout = min(n_holdout, max(len(families) - 1, 0))
    held = set(families[:n_holdout])
    return {task_id: ("holdout" if task_families[task_id] in held else "train") for task_id in sorted(task_families)}


def contamination(digests: Mapping[str, str], split: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every task-definition digest found in both train and holdout, with the task ids on each side."""
    unsplit = sorted(set(digests) - set(split))
    if unsplit:
        raise ValueError(f"Tasks {unsplit} have digests but no split; split every task before checking contamination.")
    sides: dict[str, dict[str, list[str]]] = defaultdict(lambda: {side: [] for side in SPLITS})
    for task_id in sorted(digests):
        if split[task_id] in SPLITS:
            sides[digests[task_id]][split[task_id]].append(task_id)
    return [
        {"digest": digest, "train": ids["train"], "holdout": ids["holdout"]}
        for digest, ids in sorted(sides.items())
        if ids["train"] and ids["holdout"]
    ]


def _check(name: str, passed: bool, value: float, threshold: float) -> dict[str, Any]:
    return {"name": name, "passed": passed, "value": value, "threshold": threshold}


def holdout_gate(
    summary_holdout: Mapping[str, Any],
    *,
    min_pass_at_1: float,
    max_timeout_rate: float = 0.25,
    contaminated: Sequence[Any] = (),
) -> dict[str, Any]:
    """Pass/fail of a holdout summary (from `summarize`) against promotion thresholds, check by check."""
    missing = [key for key in ("pass@1", "timeout_rate", "tamper_rate") if key not in summary_holdout]
    if missing:
        raise ValueError(f"The holdout summary lacks {missing}; build it with summarize().")
    pass_at_1 = float(summary_holdout["pass@1"])
    timeout_rate = float(summary_holdout["timeout_rate"])
    tamper_rate = float(summary_holdout["tamper_rate"])
    checks = [
        _check("pass@1", pass_at_1 >= min_pass_at_1, pass_at_1, min_pass_at_1),
        _check("timeout_rate", timeout_rate <= max_timeout_rate, timeout_rate, max_timeout_rate),
        _check("tamper_rate", tamper_rate == 0.0, tamper_rate, 0.0),
        _check("contamination", not contaminated, len(contaminated), 0),
    ]
    return {"passed": all(check["passed"] for check in checks), "checks": checks}


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, as numpy's default percentile."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _check_same_tasks(
    baseline: Mapping[str, float], candidate: Mapping[str, float], clusters: Mapping[str, str]
) -> None:
    missing, extra = sorted(set(baseline) - set(candidate)), sorted(set(candidate) - set(baseline))
    if missing or extra:
        raise ValueError(
            f"Baseline and candidate must score the same tasks; candidate lacks {missing}, has extra {extra}."
        )
    unclustered = sorted(set(baseline) - set(clusters))
    if unclustered:
        raise ValueError(f"Tasks {unclustered} have no cluster; give every task its family.")


def paired_bootstrap(
    baseline: Mapping[str, float],
    candidate: Mapping[str, float],
    clusters: Mapping[str, str],
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Mean paired difference (candidate - baseline) with a cluster-bootstrap percentile interval.

    Clusters (task families) are resampled whole because tasks of one family succeed and fail together;
    resampling tasks alone would give intervals that are too narrow.
    """
    _check_same_tasks(baseline, candidate, clusters)
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"Need resamples >= 1 and 0 < confidence < 1; got {resamples}, {confidence}")
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for task_id in sorted(baseline):
        total = totals[clusters[task_id]]
        total[0] += candidate[task_id] - baseline[task_id]
        total[1] += 1
    if len(totals) < 2:
        # One cluster resamples to itself every time: a zero-width interval that proves nothing.
        raise ValueError(f"The cluster bootstrap needs tasks from at least 2 families; got {sorted(totals)}.")
    names = sorted(totals)
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        drawn = rng.choices(names, k=len(names))
        stats.append(sum(totals[name][0] for name in drawn) / sum(totals[name][1] for name in drawn))
    stats.sort()
    tail = (1.0 - confidence) / 2
    ci_low, ci_high = _percentile(stats, tail), _percentile(stats, 1.0 - tail)
    return {
        "delta": statistics.fmean(candidate[t] - baseline[t] for t in sorted(baseline)),
        "ci_low": ci_low,
        "ci_high": ci_high,
        "confidence": confidence,
        "resamples": resamples,
        "clusters": len(names),
        "tasks": len(baseline),
        "excludes_zero": ci_low > 0 or ci_high < 0,
    }


def _describe_series(values: Sequence[float]) -> dict[str, Any]:
    return {"last": values[-1], "mean": statistics.fmean(values), "points": len(values)}


def reward_diagnostics(points: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """Last and mean of the reward series, with warnings when reward variance has collapsed.

    GRPO's advantage is reward minus the group mean: with zero spread inside groups it is zero
    everywhere and the policy stops learning, whatever the loss curve says.
    """
    series = {name: list(points.get(name, ())) for name in REWARD_SERIES}
    warnings: list[str] = []
    missing = [name for name, values in series.items() if not values]
    if missing:
        warnings.append(f"No values logged for {', '.join(missing)}; reward variance cannot be checked from them.")
    nonfinite = [name for name, values in series.items() if not all(math.isfinite(v) for v in values)]
    if nonfinite:
        warnings.append(f"Non-finite values in {', '.join(nonfinite)}; the reward function returned NaN or inf.")
    std, zero_groups = series["train.reward_std"], series["train.frac_zero_std_groups"]
    if std and std[-1] == 0:
        warnings.append("train.reward_std is 0 at the last logged step: every completion scored alike.")
    if std and statistics.fmean(std) < MIN_REWARD_STD_MEAN:
        warnings.append(f"train.reward_std averages below {MIN_REWARD_STD_MEAN}: rewards never varied.")
    if zero_groups and zero_groups[-1] >= MAX_FRAC_ZERO_STD_GROUPS:
        warnings.append(
            f"train.frac_zero_std_groups is {zero_groups[-1]:.2f} at the last logged step: "
            "most groups give no learning signal; make tasks harder or sample more completions per prompt."
        )
    report: dict[str, Any] = {name: _describe_series(values) if values else None for name, values in series.items()}
    report["warnings"] = warnings
    return report
