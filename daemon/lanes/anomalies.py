"""Pure checks that turn a run's metric stream into anomalies worth an event."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SPIKE_FACTOR = 2.0
SPIKE_WARMUP = 5
NO_GRADIENT_STEPS = 3  # zero-gradient GRPO steps in a row, of no known cause, that make an anomaly


@dataclass
class Anomaly:
    kind: str
    detail: str
    step: int | None


@dataclass
class AnomalyWatch:
    """Keeps the running mean of the loss; reports each kind of anomaly once per run."""

    method: str
    _losses: list[float] = field(default_factory=list)
    _reported: set[str] = field(default_factory=set)
    _zero_gradient_steps: int = 0

    def mark_reported(self, kind: str) -> None:
        """An anomaly already recorded (before a daemon restart) is not recorded again."""
        self._reported.add(kind)

    def observe(self, step: int, metrics: dict[str, float]) -> list[Anomaly]:
        found = []
        loss = metrics.get("train.loss")
        if loss is not None:
            found += self._loss(step, loss)
        if self.method in {"grpo", "rlvr"} and metrics.get("train.reward_std") == 0.0:
            found.append(
                Anomaly(
                    "zero_reward_variance",
                    "Every group's rewards were equal; GRPO gets no "
                    "gradient. Check the verifier and the sampling temperature.",
                    step,
                )
            )
        if self.method in {"grpo", "rlvr"}:
            found += self._gradient(step, metrics)
        fresh = [a for a in found if a.kind not in self._reported]
        self._reported.update(a.kind for a in fresh)
        return fresh

    def stalled(self, silent_s: float, step: int | None) -> list[Anomaly]:
        """A running trainer that reported nothing for `silent_s` seconds (once per run)."""
        if "no_progress" in self._reported:
            return []
        self._reported.add("no_progress")
        minutes = silent_s / 60
        return [
            Anomaly(
                "no_progress",
                f"No metrics or protocol lines for {minutes:.0f} minutes; the trainer may be hung. "
                "Check training.log, then stop or keep waiting.",
                step,
            )
        ]

    def _gradient(self, step: int, metrics: dict[str, float]) -> list[Anomaly]:
        """A GRPO/RLVR step that trained nothing: a zero gradient where every completion was truncated (and masked
        out of the loss) or every group was filtered, or for NO_GRADIENT_STEPS logged steps in a row."""
        norm = metrics.get("train.grad_norm")
        if norm is None:
            return []
        self._zero_gradient_steps = self._zero_gradient_steps + 1 if norm == 0.0 else 0
        if norm != 0.0:
            return []
        causes = []
        # Truncated alone is no cause: a truncated completion the loss still sees trains.
        if metrics.get("train.truncated_masked_fraction") == 1.0:
            causes.append(
                "every completion hit max_completion_length and was masked out of the loss (raise "
                "grpo_max_completion_length; the terminal_rl_tmax_like profile masks truncated completions)"
            )
        if metrics.get("train.frac_zero_std_groups") == 1.0:
            causes.append("every group's rewards were equal, so filter_zero_std_groups took each out of the loss")
        if not causes and self._zero_gradient_steps < NO_GRADIENT_STEPS:
            return []
        why = "; ".join(causes) or f"the gradient was zero for {self._zero_gradient_steps} logged steps in a row"
        return [Anomaly("no_gradient", f"Step {step} trained nothing (grad norm 0): {why}.", step)]

    def _loss(self, step: int, loss: float) -> list[Anomaly]:
        if not math.isfinite(loss):
            return [Anomaly("non_finite_loss", f"train.loss is {loss} at step {step}.", step)]
        anomalies = []
        if len(self._losses) >= SPIKE_WARMUP:
            mean = sum(self._losses) / len(self._losses)
            if mean > 0 and loss > SPIKE_FACTOR * mean:
                anomalies.append(
                    Anomaly(
                        "loss_spike",
                        f"train.loss {loss:.4g} at step {step} is over {SPIKE_FACTOR:g}x the running mean {mean:.4g}.",
                        step,
                    )
                )
        self._losses.append(loss)
        return anomalies
