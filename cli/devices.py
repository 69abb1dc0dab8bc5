"""`bashgym device ...`: the SSH compute registry, preflight verdicts, and bootstrapping a host's venv."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from bashgym.cli.registry import Ctx, command, command_group, done, no_args
from bashgym.cli.usage import input_file
from bashgym.client.errors import EXIT_OK, EXIT_RULE, InvalidInput
from bashgym.client.specs import UNASSIGNED

command_group("device", help="SSH compute devices: add, preflight, bootstrap, list, remove")


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="device id")


def _add_args(parser: argparse.ArgumentParser) -> None:
    _name(parser)
    parser.add_argument("--host", required=True, help="host name or address")
    parser.add_argument("--port", type=int, default=22, help="SSH port (default 22)")
    parser.add_argument("--user", required=True, help="login user")
    parser.add_argument(
        "--key-path",
        required=True,
        help="private key in the daemon's keys directory (BASHGYM_SSH_KEYS_DIR): a name, or a path inside it",
    )
    parser.add_argument("--work-dir", default="bashgym-work", help="run directory root on the host (default: ~)")
    parser.add_argument("--python", help="python with bashgym installed (default: WORK_DIR/venv/bin/python)")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs a run occupies there, for GPU-hours")
    parser.add_argument("--slots", type=int, default=1, help="runs the device takes at once")
    parser.add_argument("--host-key", default="", help="pin the host key: 'ssh-ed25519 AAAA...'")
    parser.add_argument("--known-hosts", default="", help="known_hosts file in the keys directory")


@command("device", "add", help="register an SSH compute device (device.manage); then run device preflight")(_add_args)
async def device_add(ctx: Ctx) -> int:
    a = ctx.args
    spec: dict[str, Any] = {
        "device_id": a.name,
        "host": a.host,
        "port": a.port,
        "user": a.user,
        # A name is a file in the daemon's keys directory; an absolute path must lie inside it.
        "key_path": str(Path(a.key_path).expanduser()),
        "work_dir": a.work_dir,
        "python": a.python,
        "gpus": a.gpus,
        "slots": a.slots,
        "host_key": a.host_key,
        "known_hosts": str(Path(a.known_hosts).expanduser()) if a.known_hosts else "",
    }
    result = await ctx.client.request("POST", "/v1/devices", body=spec, params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Device {a.name}")


@command("device", "list", help="registered devices with their last preflight verdict")(no_args)
async def device_list(ctx: Ctx) -> int:
    result = await ctx.client.request("GET", "/v1/devices", params={"workspace": ctx.workspace})
    if ctx.as_json:
        return done(ctx, result)
    rows = [
        {
            "device": d["device_id"],
            "where": f"{d['user']}@{d['host']}:{d['port']}",
            "gpus": d["gpus"],
            "slots": d["slots"],
            "ready": d["ready"],
            "preflight_at": d["preflight_at"] or "never",
        }
        for d in result["devices"]
    ]
    return done(ctx, rows, title="Devices")


def _remove_args(parser: argparse.ArgumentParser) -> None:
    _name(parser)
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


@command("device", "remove", help="remove a device from the registry (device.manage)")(_remove_args)
async def device_remove(ctx: Ctx) -> int:
    a = ctx.args
    if not a.yes and sys.stdin.isatty():
        answer = await asyncio.to_thread(input, f"Remove device {a.name}? [y/N] ")
        if answer.strip().lower() not in {"y", "yes"}:
            print("Not removed.")
            return EXIT_OK
    result = await ctx.client.request("DELETE", f"/v1/devices/{a.name}", params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Removed device {a.name}")


@command("device", "preflight", help="check python, bashgym, torch, GPUs, disk and RAM on the host")(_name)
async def device_preflight(ctx: Ctx) -> int:
    a = ctx.args
    result = await ctx.client.request(
        "POST", f"/v1/devices/{a.name}/preflight", params={"workspace": ctx.workspace}, timeout_s=300
    )
    device = result["record"]
    if ctx.as_json:
        done(ctx, device)
    else:
        verdict = device["preflight"]
        done(ctx, {"ready": verdict["ready"], **verdict["facts"]}, title=f"Preflight of {a.name}")
        for reason in verdict["reasons"]:
            print(f"  not ready: {reason}")
    return EXIT_OK if device["ready"] else EXIT_RULE


def _bootstrap_args(parser: argparse.ArgumentParser) -> None:
    _name(parser)
    parser.add_argument("--base-python", default="python3", help="python on the host that creates the venv")
    parser.add_argument(
        "--wheel", type=input_file, help="a bashgym wheel to install, for hosts without a package index"
    )
    parser.add_argument("--pip-arg", action="append", default=[], help="extra pip argument (repeatable)")


@command("device", "bootstrap", help="install this daemon's bashgym version into WORK_DIR/venv on the host")(
    _bootstrap_args
)
async def device_bootstrap(ctx: Ctx) -> int:
    a = ctx.args
    body: dict[str, Any] = {"base_python": a.base_python, "pip_args": a.pip_arg}
    if a.wheel is not None:
        if not a.wheel.is_file():
            raise InvalidInput(f"--wheel {a.wheel} is not a file.", hint="Build one with: pip wheel --no-deps .")
        # A wheel is the workspace's, not a project's: it is held by `unassigned`, where device managers upload.
        stored = await ctx.client.blob_upload(a.wheel, project=UNASSIGNED, workspace=ctx.workspace)
        body |= {"wheel_sha256": stored["sha256"], "wheel_name": a.wheel.name}
    result = await ctx.client.request(
        "POST", f"/v1/devices/{a.name}/bootstrap", body=body, params={"workspace": ctx.workspace}, timeout_s=3600
    )
    return done(ctx, result, title=f"Bootstrapped {a.name}")


# -- device groups ------------------------------------------------------------------------------

command_group("device", "group", help="named, ordered sets of devices that train one run together (multi-node)")


def _group_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="device group id")


def _group_create_args(parser: argparse.ArgumentParser) -> None:
    _group_name(parser)
    parser.add_argument(
        "--device",
        action="append",
        required=True,
        dest="devices",
        help="a member device, in machine-rank order (repeat: 2 to 64; the first runs the main process)",
    )
    parser.add_argument(
        "--main-address", help="where the other members reach the first one (default: its registered host)"
    )
    parser.add_argument("--main-port", type=int, default=29500, help="rendezvous port on the first member")


@command("device", "group", "create", help="register a device group (device.manage); then run device group preflight")(
    _group_create_args
)
async def device_group_create(ctx: Ctx) -> int:
    a = ctx.args
    spec: dict[str, Any] = {"group_id": a.name, "members": a.devices, "main_process_port": a.main_port}
    if a.main_address:
        spec["main_process_ip"] = a.main_address
    result = await ctx.client.request("POST", "/v1/device-groups", body=spec, params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Device group {a.name}")


@command("device", "group", "list", help="registered device groups with their last group preflight verdict")(no_args)
async def device_group_list(ctx: Ctx) -> int:
    result = await ctx.client.request("GET", "/v1/device-groups", params={"workspace": ctx.workspace})
    if ctx.as_json:
        return done(ctx, result)
    rows = [
        {
            "group": g["group_id"],
            "members": ", ".join(g["members"]),
            "main": f"{g['main_process_ip']}:{g['main_process_port']}",
            "ready": g["ready"],
            "preflight_at": g["preflight_at"] or "never",
        }
        for g in result["groups"]
    ]
    return done(ctx, rows, title="Device groups")


@command("device", "group", "show", help="one device group: its members in rank order and its last verdict")(
    _group_name
)
async def device_group_show(ctx: Ctx) -> int:
    name = ctx.args.name
    result = await ctx.client.request("GET", f"/v1/device-groups/{name}", params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Device group {name}")


def _group_remove_args(parser: argparse.ArgumentParser) -> None:
    _group_name(parser)
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


@command("device", "group", "remove", help="remove a device group; its devices stay (device.manage)")(
    _group_remove_args
)
async def device_group_remove(ctx: Ctx) -> int:
    a = ctx.args
    if not a.yes and sys.stdin.isatty():
        answer = await asyncio.to_thread(input, f"Remove device group {a.name}? [y/N] ")
        if answer.strip().lower() not in {"y", "yes"}:
            print("Not removed.")
            return EXIT_OK
    result = await ctx.client.request("DELETE", f"/v1/device-groups/{a.name}", params={"workspace": ctx.workspace})
    return done(ctx, result, title=f"Removed device group {a.name}")


@command(
    "device",
    "group",
    "preflight",
    help="preflight every member, compare their software and GPUs, and check the rendezvous port",
)(_group_name)
async def device_group_preflight(ctx: Ctx) -> int:
    a = ctx.args
    result = await ctx.client.request(
        "POST", f"/v1/device-groups/{a.name}/preflight", params={"workspace": ctx.workspace}, timeout_s=300
    )
    group = result["record"]
    if ctx.as_json:
        done(ctx, group)
    else:
        verdict = group["preflight"]
        print(f"Preflight of group {a.name}: {'ready' if verdict['ready'] else 'not ready'}")
        for member in verdict["facts"]["members"]:
            print(_member_line(member))
        print(_rendezvous_line(verdict["facts"]["rendezvous"]))
        for reason in verdict["reasons"]:
            print(f"  not ready: {reason}")
    return EXIT_OK if group["ready"] else EXIT_RULE


def _member_line(member: dict[str, Any]) -> str:
    where = f"  rank {member['machine_rank']}  {member['device_id']}"
    if not member["facts"]:
        return f"{where}: not ready: {'; '.join(member['reasons'])}"
    facts = member["facts"]
    found = (
        f"python {facts.get('python')}, bashgym {facts.get('bashgym')}, torch {facts.get('torch')}, "
        f"{len(facts.get('gpus') or [])} GPUs, env {member['env_digest'][:12]}"
    )
    return f"{where}: {'ready' if member['ready'] else 'not ready'} ({found})"


def _rendezvous_line(rendezvous: dict[str, Any]) -> str:
    where = f"Rendezvous {rendezvous['address']}:{rendezvous['port']} on {rendezvous['main_device_id']}"
    if rendezvous["port_in_use"]:
        return f"{where}: the port is in use"
    if not rendezvous["listening"]:
        return f"{where}: {rendezvous['error'] or 'not checked'}"
    outcomes = {True: "reached it", False: "cannot reach it", None: "not checked"}
    return f"{where}: listening; " + "; ".join(
        f"{c['device_id']} {outcomes[c['reached']]}" for c in rendezvous["members"]
    )
