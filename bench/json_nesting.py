"""How long the daemon's JSON nesting check takes on hostile 8 MB bodies, beside json.loads on the same bytes.

    python bench/json_nesting.py

The edge middleware scans every JSON body's brackets before FastAPI parses it (daemon/api/middleware.py,
json_nesting): it must cost milliseconds where a count per bracket in Python would take ~0.4 s. Prints one JSON line
per body shape with the median of 5 runs, in seconds, and json.loads' time on the same body as the peer.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable

from bashgym.daemon.api.middleware import MAX_JSON_DEPTH, json_nesting

SHAPES: dict[str, Callable[[], bytes]] = {
    "openers": lambda: b"[" * 8_000_000,
    "empty-arrays-at-the-limit": lambda: b"[" * 63 + b"[]," * 2_666_000 + b"[]" + b"]" * 63,
    "brackets-in-a-string": lambda: b'{"a": ' * 65 + b'"' + b"[" * 8_000_000 + b'"' + b"}" * 65,
}


def _median_s(call: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _loads(body: bytes) -> None:
    # The peer may refuse the body: its time to do so is what is compared.
    with contextlib.suppress(RecursionError, ValueError):
        json.loads(body)


def main() -> None:
    for shape, make in SHAPES.items():
        body = make()
        scan_s = _median_s(lambda body=body: json_nesting(body))
        loads_s = _median_s(lambda body=body: _loads(body))
        depth = json_nesting(body)
        print(json.dumps({"shape": shape, "bytes": len(body), "depth_past_limit": depth > MAX_JSON_DEPTH,
                          "json_nesting_s": round(scan_s, 4), "json_loads_s": round(loads_s, 4),
                          "ratio_to_loads": round(scan_s / loads_s, 3) if loads_s else None}))  # fmt: skip


if __name__ == "__main__":
    main()
