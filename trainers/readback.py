"""Moving small values between host and device without making the host wait for the step the device is running.

On a GPU, a copy that is not `non_blocking` waits for everything queued before it (`torch.tensor(x, device=...)`
included), and so does reading a value back (`.item()`, `bool(t)`, `.tolist()`).
"""

from __future__ import annotations

from typing import Any

import torch


class HostCopy:
    """Values on their way to the host.

    The copy is queued behind the work that produces them, into pinned memory, so queuing it does not wait; `read`
    waits for the copy alone. Read once the next step's work is queued, it leaves the GPU that step to run while
    the host waits. (`.item()` or `.tolist()` on the device's tensor would wait for everything queued so far.)
    On a CPU it is a plain copy.
    """

    def __init__(self, values: torch.Tensor) -> None:
        on_gpu = values.is_cuda
        self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=on_gpu)
        self._host.copy_(values.detach(), non_blocking=on_gpu)
        self._ready: torch.cuda.Event | None = None
        if on_gpu:
            self._ready = torch.cuda.Event()
            self._ready.record()

    def read(self) -> list[Any]:
        if self._ready is not None:
            self._ready.synchronize()
        return self._host.tolist()


def to_device(values: list[int] | list[float], device: torch.device | str) -> torch.Tensor:
    """`torch.tensor(values, device=device)`, without waiting for the work queued on the device: the values go
    through pinned memory by a copy that does not wait."""
    device = torch.device(device)
    on_gpu = device.type == "cuda"
    return torch.tensor(values, pin_memory=on_gpu).to(device, non_blocking=on_gpu)
