"""Session distillation's target positions in a batch whose rows differ in context and target length."""

from __future__ import annotations

import pytest
import torch
from bashgym.trainers.methods.session import _target_logits, collate


def _row(context: int, target: int) -> dict[str, list[int]]:
    return {
        "student_ids": list(range(1, context + 1)) + [7] * target,
        "student_start": [context],
        "teacher_ids": [3] * (context + target),
        "teacher_start": [context],
        "target_ids": [7] * target,
    }


@pytest.mark.parametrize("rows", [[(5, 3)], [(100, 4), (2, 50)], [(100, 4), (2, 50), (30, 1), (9, 9)]])
def test_each_rows_target_logits_are_its_own_whatever_the_batch(rows: list[tuple[int, int]]) -> None:
    """A long context with a short target beside a short context with a long target: the window of the longest
    target reached past the first row's end (index 104 out of bounds for size 104)."""
    batch = collate([_row(c, t) for c, t in rows], pad_id=0)
    width = batch["target_ids"].size(1)
    logits = torch.randn(len(rows), batch["student_ids"].size(1), 11)
    picked = _target_logits(logits, batch["student_start"], width)
    assert picked.shape == (len(rows), width, 11)
    for i, (context, target) in enumerate(rows):
        expected = logits[i, context - 1 : context - 1 + target]
        assert torch.equal(picked[i, :target], expected)
        assert int(batch["target_mask"][i].sum()) == target  # past its target, the mask gives no weight
