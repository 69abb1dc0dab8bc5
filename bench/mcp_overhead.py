"""What a tool call of `bashgym mcp` adds to the daemon request it makes: the same read (one run, GET
/v1/projects/{p}/runs/{r}) timed N times over plain HTTP with the daemon client, and N times as the
`get_experiment_run` tool through the MCP server (a subprocess on stdio, driven by the SDK's client).

Target: under 2 ms added at p50. Run: python bench/mcp_overhead.py [--calls 1000] [--json]

Both sides run against one daemon on loopback, in turn; the added time is the MCP side's percentile minus the
HTTP side's. On the 2-core machine the daemon, the server and this process share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bashgym.client.http import DaemonClient
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.factories import tracking_context
from tests.support.helpers import BASHGYM, running_daemon

PROJECT = "nightly"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(url: str, token: str, home: Path, calls: int) -> dict[str, float]:
    async with DaemonClient(url, token) as client:
        registered = await client.request(
            "POST", "/v1/runs", body={"method": "sft", "tracking_context": tracking_context()}
        )
        run_id = registered["record"]["run_id"]
        path = f"/v1/projects/{PROJECT}/runs/{run_id}"
        for _ in range(20):  # warm both sides the same way
            await client.request("GET", path, params={"workspace": None})
        http_ms = []
        for _ in range(calls):
            start = time.perf_counter()
            await client.request("GET", path, params={"workspace": None})
            http_ms.append((time.perf_counter() - start) * 1000)
    env = {**os.environ, "BASHGYM_HOME": str(home), "BASHGYM_API": url, "BASHGYM_TOKEN": token}
    params = StdioServerParameters(command=BASHGYM[0], args=[*BASHGYM[1:], "mcp"], env=env)
    arguments = {"project": PROJECT, "run_id": run_id}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(20):
            await session.call_tool("get_experiment_run", arguments)
        mcp_ms = []
        for _ in range(calls):
            start = time.perf_counter()
            result = await session.call_tool("get_experiment_run", arguments)
            mcp_ms.append((time.perf_counter() - start) * 1000)
            assert not result.is_error, result.content
    figures = {
        "calls": calls,
        "http_p50_ms": round(statistics.median(http_ms), 3),
        "http_p99_ms": round(percentile(http_ms, 0.99), 3),
        "mcp_p50_ms": round(statistics.median(mcp_ms), 3),
        "mcp_p99_ms": round(percentile(mcp_ms, 0.99), 3),
    }
    figures["added_p50_ms"] = round(figures["mcp_p50_ms"] - figures["http_p50_ms"], 3)
    figures["added_p99_ms"] = round(figures["mcp_p99_ms"] - figures["http_p99_ms"], 3)
    figures["ratio_p50"] = round(figures["mcp_p50_ms"] / figures["http_p50_ms"], 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # The reads measure the two paths, not the per-principal read limiter, which would refuse them past its burst.
    unlimited = {"BASHGYM_READ_RATE_PER_MINUTE": "1000000", "BASHGYM_READ_RATE_BURST": "1000000"}
    with (
        tempfile.TemporaryDirectory(prefix="bashgym-mcp-bench.") as root,
        running_daemon(Path(root) / "home", env=unlimited) as daemon,
    ):
        figures = asyncio.run(measure(daemon.url, daemon.token, daemon.home, args.calls))
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{args.calls} reads of one run, each way:")
    print(f"  HTTP (daemon client)      p50 {figures['http_p50_ms']:.2f} ms   p99 {figures['http_p99_ms']:.2f} ms")
    print(f"  MCP tool (stdio server)   p50 {figures['mcp_p50_ms']:.2f} ms   p99 {figures['mcp_p99_ms']:.2f} ms")
    print(
        f"  added by MCP              p50 {figures['added_p50_ms']:+.2f} ms   p99 {figures['added_p99_ms']:+.2f} ms"
        f"   (x{figures['ratio_p50']} at p50; target: under 2 ms added at p50)"
    )


if __name__ == "__main__":
    main()
