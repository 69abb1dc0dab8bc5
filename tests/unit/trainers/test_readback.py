"""Small values cross between host and device without the host waiting for the device's queue (a scaled-out
run's per-step agreement and log collectives). The waiting itself exists only on a GPU: there, torch's sync debug
mode turns any synchronising call into an error."""

from __future__ import annotations

import pytest
import torch
from bashgym.trainers.readback import HostCopy, to_device


def test_values_reach_the_device_and_come_back_as_they_were() -> None:
    on_device = to_device([1, 0, 7], "cpu")
    assert on_device.dtype == torch.int64 and on_device.tolist() == [1, 0, 7]
    assert to_device([0.5], "cpu").dtype == torch.float32
    copy = HostCopy(on_device * 2)
    on_device.zero_()  # the copy holds the values as they were when it was made
    assert copy.read() == [2, 0, 14]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: only a GPU makes the host wait")
def test_on_a_gpu_neither_way_waits_for_the_queue() -> None:
    busy = torch.randn(4096, 4096, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(8):
            busy = busy @ busy  # work queued ahead of the copies
        flags = to_device([1, 0], "cuda")
        copy = HostCopy(flags + 1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert copy.read() == [2, 1]
