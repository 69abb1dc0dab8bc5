"""`bashgym cluster ...`: the Slurm clusters runs are submitted to (compute_target `slurm:<cluster>`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from bashgym.cli.registry import Ctx, command, command_group, done, no_args
from bashgym.client.errors import EXIT_OK

command_group("cluster", help="Slurm clusters runs are submitted to: add, list, show, remove")


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="cluster id")


def _add_args(parser: argparse.ArgumentParser) -> None:
    _name(parser)
    parser.add_argument("--kind", choices=["slurm"], required=True, help="the scheduler (slurm)")
    parser.add_argument(
        "--login-device",
        help="a registered SSH device that is the cluster's login node (default: the Slurm commands on the "
        "daemon's host, its shared directory under BASHGYM_SLURM_SHARED_ROOT)",
    )
    parser.add_argument("--partition", required=True, help="the partition jobs are submitted to")
    parser.add_argument("--account", help="the Slurm account jobs are charged to")
    parser.add_argument("--qos", help="the quality of service jobs ask for")
    parser.add_argument("--gpu-type", help="the GPU type of --gpus-per-node (a GRES type, e.g. a100)")
    parser.add_argument("--gpus-per-node", type=int, default=0, help="GPUs a job takes on each node (default 0)")
    parser.add_argument("--max-nodes", type=int, default=1, help="most nodes one run may take (default 1)")
    parser.add_argument("--time-limit", type=int, required=True, help="minutes a job may run (its --time)")
    parser.add_argument(
        "--shared-dir", required=True, help="absolute directory run directories go in, seen by the compute nodes"
    )
    parser.add_argument("--python", default="python3", help="python with bashgym installed on the compute nodes")


@command("cluster", "add", help="register a Slurm cluster (device.manage)")(_add_args)
async def cluster_add(ctx: Ctx) -> int:
    a = ctx.args
    spec: dict[str, Any] = {
        "cluster_id": a.name,
        "kind": a.kind,
        "access": "ssh" if a.login_device else "local",
        "login_device_id": a.login_device,
        "partition": a.partition,
        "account": a.account,
        "qos": a.qos,
        "gpu_type": a.gpu_type,
        "gpus_per_node": a.gpus_per_node,
        "max_nodes": a.max_nodes,
        "time_limit_min": a.time_limit,
        "shared_dir": a.shared_dir,
        "python": a.python,
    }
    result = await ctx.client.request("POST", "/v1/clusters", body=spec, params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Cluster {a.name}")


@command("cluster", "list", help="registered Slurm clusters")(no_args)
async def cluster_list(ctx: Ctx) -> int:
    result = await ctx.client.request("GET", "/v1/clusters", params={"workspace": ctx.workspace})
    if ctx.as_json:
        return done(ctx, result)
    rows = [
        {
            "cluster": c["cluster_id"],
            "where": f"login node {c['login_device_id']}" if c["access"] == "ssh" else "this host",
            "partition": c["partition"],
            "gpus_per_node": c["gpus_per_node"],
            "max_nodes": c["max_nodes"],
            "time_limit_min": c["time_limit_min"],
        }
        for c in result["clusters"]
    ]
    return done(ctx, rows, title="Clusters")


@command("cluster", "show", help="one Slurm cluster: where jobs go and what they ask for")(_name)
async def cluster_show(ctx: Ctx) -> int:
    name = ctx.args.name
    result = await ctx.client.request("GET", f"/v1/clusters/{name}", params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Cluster {name}")


def _remove_args(parser: argparse.ArgumentParser) -> None:
    _name(parser)
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


@command("cluster", "remove", help="remove a cluster; refused while runs are active on it (device.manage)")(
    _remove_args
)
async def cluster_remove(ctx: Ctx) -> int:
    a = ctx.args
    if not a.yes and sys.stdin.isatty():
        answer = await asyncio.to_thread(input, f"Remove cluster {a.name}? [y/N] ")
        if answer.strip().lower() not in {"y", "yes"}:
            print("Not removed.")
            return EXIT_OK
    result = await ctx.client.request("DELETE", f"/v1/clusters/{a.name}", params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Removed cluster {a.name}")
