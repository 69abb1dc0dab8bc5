"""Preflight of a device group: every member's own preflight, then the checks only a group has (the same
software on every rank, GPUs on all members or none, a work directory of each member's own, and the main member's
rendezvous port reachable)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shlex
from collections.abc import Callable
from typing import Any

from bashgym.client.errors import BashGymError
from bashgym.client.specs import PreflightVerdict
from bashgym.daemon.lanes.ssh import CONNECT_TIMEOUT_S, Device, asyncssh, connect, environment_digest, preflight

log = logging.getLogger("bashgym.group_preflight")
PROBE_TIMEOUT_S = 10.0
# The listener ends by itself after this, should both the stdin close and the hang-up fail to reach it.
LISTENER_LIFETIME_S = 120.0
REASON_MAX = 600

# Runs on the main member: listen on the rendezvous port, echo the line each prober sends, and end when stdin
# closes (the daemon is done, or gone) or after its lifetime, whichever comes first.
_LISTENER = r"""
import errno, json, os, select, socket, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind(("0.0.0.0", port))
    server.listen(64)
except OSError as exc:
    print(json.dumps({"listening": False, "in_use": exc.errno == errno.EADDRINUSE, "error": str(exc)}), flush=True)
    sys.exit(1)
print(json.dumps({"listening": True}), flush=True)
while time.monotonic() < deadline:
    ready, _, _ = select.select([server, sys.stdin], [], [], 1.0)
    if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
        break
    if server in ready:
        peer, _ = server.accept()
        with peer:
            peer.settimeout(5)
            try:
                with peer.makefile("rb") as lines:
                    peer.sendall(lines.readline())
                peer.recv(1)  # the prober closes first, so no TIME_WAIT stays on this port
            except OSError:
                pass
"""

# Runs on every other member: connect to the main address, send a nonce, expect it back.
_PROBE = r"""
import json, socket, sys
host, port, nonce, timeout_s = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
try:
    with socket.create_connection((host, port), timeout=timeout_s) as conn, conn.makefile("rb") as lines:
        conn.sendall(nonce.encode() + b"\n")
        answer = lines.readline().strip().decode(errors="replace")
    error = "" if answer == nonce else "something other than the check's listener answers there"
except OSError as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"reached": not error, "error": error}))
"""

# Facts every rank must agree on, by the label a reason names them with.
_MATCHED: dict[str, Callable[[dict[str, Any]], object]] = {
    "Python": lambda facts: ".".join(str(facts.get("python")).split(".")[:2]),
    "bashgym": lambda facts: facts.get("bashgym"),
    "torch": lambda facts: facts.get("torch"),
    "CUDA": lambda facts: facts.get("cuda_version"),
}


async def preflight_group(devices: list[Device], main_ip: str, main_port: int) -> PreflightVerdict:
    """Preflight every member at once, then judge them as one group.

    Args:
        devices: the members in machine-rank order; the first runs the main process.
        main_ip: the address the other members reach the first one at.
        main_port: the rendezvous port on the first member.
    """
    verdicts = await asyncio.gather(*(_member_preflight(device) for device in devices))
    members = [
        _member(rank, device, verdict) for rank, (device, verdict) in enumerate(zip(devices, verdicts, strict=True))
    ]
    has_run = [bool(v.facts) for v in verdicts]
    shared = await _shared_work_dirs(devices, has_run)
    rendezvous = await _check_rendezvous(devices, has_run, main_ip, main_port)
    reasons = [*_not_ready(members), *_differences(members), *_shared_reasons(shared), *_rendezvous_reasons(rendezvous)]
    facts = {"members": members, "shared_work_dirs": shared, "rendezvous": rendezvous}
    return PreflightVerdict(ready=not reasons, reasons=_capped(reasons), facts=facts)


def member_verdict(member: dict[str, Any]) -> PreflightVerdict:
    """One member's own verdict out of a group verdict's facts, as a single-device preflight records it."""
    return PreflightVerdict(ready=member["ready"], reasons=member["reasons"], facts=member["facts"])


async def _member_preflight(device: Device) -> PreflightVerdict:
    try:
        return await preflight(device)
    except (asyncssh.Error, OSError, TimeoutError) as exc:  # a lost member is its own verdict, not the group's end
        return PreflightVerdict(ready=False, reasons=[f"the connection failed during preflight: {exc}"])


def _member(rank: int, device: Device, verdict: PreflightVerdict) -> dict[str, Any]:
    return {
        "device_id": device.device_id,
        "machine_rank": rank,
        "ready": verdict.ready,
        "reasons": verdict.reasons,
        "env_digest": environment_digest(verdict.facts) if verdict.facts else None,
        "facts": verdict.facts,
    }


def _not_ready(members: list[dict[str, Any]]) -> list[str]:
    return [
        _clip(f"{m['device_id']} (rank {m['machine_rank']}) is not ready: {'; '.join(m['reasons'])}")
        for m in members
        if not m["ready"]
    ]


def _differences(members: list[dict[str, Any]]) -> list[str]:
    """What the members that ran their preflight disagree on, naming who has which."""
    inspected = [m for m in members if m["facts"]]
    reasons = []
    for label, value_of in _MATCHED.items():
        holders: dict[str, list[str]] = {}
        for m in inspected:
            holders.setdefault(str(value_of(m["facts"]) or "none"), []).append(m["device_id"])
        if len(holders) > 1:
            found = "; ".join(f"{value} on {', '.join(ids)}" for value, ids in holders.items())
            reasons.append(_clip(f"the members run different {label} versions ({found}); every rank needs the same"))
    with_gpus = [m["device_id"] for m in inspected if m["facts"].get("gpus")]
    without = [m["device_id"] for m in inspected if not m["facts"].get("gpus")]
    if with_gpus and without:
        have = "has" if len(without) == 1 else "have"
        reasons.append(
            _clip(
                f"{', '.join(with_gpus)} {'has' if len(with_gpus) == 1 else 'have'} GPUs but {', '.join(without)} "
                f"{have} none; a group trains on GPUs on every member or on none"
            )
        )
    return reasons


async def _shared_work_dirs(devices: list[Device], has_run: list[bool]) -> list[list[str]]:
    """The sets of members whose work directories are one directory (a shared home over NFS, say): each member
    leaves a file named for its rank there, then lists the others' it sees, then removes its own."""
    work = {rank: device.shell_path(device.work_dir) for rank, device in enumerate(devices) if has_run[rank]}
    name = f"bashgym-storage-{secrets.token_hex(8)}-"
    await asyncio.gather(*(_shell(devices[rank], f"touch {path}/.{name}{rank}") for rank, path in work.items()))
    # Whichever member of a shared directory lists first sees every marker in it: the others remove only their own.
    listings = await asyncio.gather(
        *(
            _shell(devices[rank], f"ls -a {path} | grep '^[.]{name}'; rm -f {path}/.{name}{rank}")
            for rank, path in work.items()
        )
    )
    together: list[set[int]] = []
    for rank, listing in zip(work, listings, strict=True):
        seen = {rank} | {int(line.removeprefix(f".{name}")) for line in listing.split() if line.startswith(f".{name}")}
        if len(seen) > 1:
            joined = seen.union(*(group for group in together if group & seen))
            together = [group for group in together if not group & seen] + [joined]
    return [[devices[rank].device_id for rank in sorted(group)] for group in together]


async def _shell(device: Device, command: str) -> str:
    """`command`'s output on `device`; empty when it cannot be run (the member's own verdict says why)."""
    output, error = await _run(device, command, CONNECT_TIMEOUT_S)
    if error:
        log.warning("Group preflight: %s on %s did not run: %s", command, device.device_id, error)
    return output


async def _run(device: Device, command: str, timeout_s: float) -> tuple[str, str | None]:
    """`command` on `device` over a connection of its own: its output, and why it could not run (None if it ran)."""
    try:
        conn = await connect(device)
        async with conn:
            result = await conn.run(command, check=False, timeout=timeout_s)
        return str(result.stdout or ""), None
    except (BashGymError, asyncssh.Error, OSError, TimeoutError) as exc:
        return "", str(getattr(exc, "message", exc))


def _shared_reasons(shared: list[list[str]]) -> list[str]:
    return [
        _clip(
            f"{', '.join(ids)} share one work directory (the same disk under the same path); each member needs a "
            "work_dir of its own, or their run files (exit codes, process groups, checkpoints) overwrite each "
            "other's: re-add all but one with another --work-dir (remove the group first)"
        )
        for ids in shared
    ]


async def _check_rendezvous(devices: list[Device], has_run: list[bool], main_ip: str, main_port: int) -> dict[str, Any]:
    """Listen on the main member's port, and connect to it from every other member that ran its preflight."""
    main = devices[0]
    checks = [
        {"device_id": d.device_id, "machine_rank": rank, "reached": None, "error": "not checked: its preflight failed"}
        for rank, d in enumerate(devices)
        if rank > 0
    ]
    result: dict[str, Any] = {
        "main_device_id": main.device_id,
        "address": main_ip,
        "port": main_port,
        "checked": has_run[0],
        "listening": None,
        "port_in_use": False,
        "error": "" if has_run[0] else f"not checked: the preflight of {main.device_id} failed",
        "members": checks,
    }
    if not has_run[0]:
        return result
    try:
        result |= await _listen_and_probe(devices, has_run, checks, main_ip, main_port)
    except TimeoutError:
        result["error"] = f"the listener on {main.device_id} did not start within {CONNECT_TIMEOUT_S:.0f} s"
    except (BashGymError, asyncssh.Error, OSError, ValueError) as exc:
        result["error"] = f"it did not complete: {getattr(exc, 'message', exc)}"
    return result


async def _listen_and_probe(
    devices: list[Device], has_run: list[bool], checks: list[dict[str, Any]], main_ip: str, main_port: int
) -> dict[str, Any]:
    """Hold the listener on the main member while the others probe it; it has ended when this returns."""
    main = devices[0]
    conn = await connect(main)
    async with conn:
        listener = await conn.create_process(_python(main, _LISTENER, main_port, LISTENER_LIFETIME_S))
        try:
            line = await asyncio.wait_for(listener.stdout.readline(), CONNECT_TIMEOUT_S)
            opened = json.loads(line) if line.strip() else {"error": "the listener exited without a word"}
            if opened.get("listening"):
                await _probe_all(devices, has_run, checks, main_ip, main_port)
        finally:
            await _end(listener)
    return {
        "listening": bool(opened.get("listening")),
        "port_in_use": bool(opened.get("in_use")),
        "error": str(opened.get("error", "")),
    }


async def _probe_all(
    devices: list[Device], has_run: list[bool], checks: list[dict[str, Any]], host: str, port: int
) -> None:
    nonce = secrets.token_hex(8)
    ranks = [rank for rank in range(1, len(devices)) if has_run[rank]]
    found = await asyncio.gather(*(_probe(devices[rank], host, port, nonce) for rank in ranks))
    for rank, outcome in zip(ranks, found, strict=True):
        checks[rank - 1] |= outcome


async def _probe(device: Device, host: str, port: int, nonce: str) -> dict[str, Any]:
    command = _python(device, _PROBE, host.strip("[]"), port, nonce, PROBE_TIMEOUT_S)
    output, error = await _run(device, command, PROBE_TIMEOUT_S + CONNECT_TIMEOUT_S)
    try:
        if error is None:
            outcome: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
            return outcome
    except (ValueError, IndexError) as exc:
        error = str(exc)
    return {"reached": False, "error": f"the probe did not run: {error}"}


async def _end(listener: asyncssh.SSHClientProcess[str]) -> None:
    """Close the listener's stdin, which ends it; if it does not end, drop its channel (sshd hangs up on it)."""
    listener.stdin.write_eof()
    try:
        await listener.wait(timeout=CONNECT_TIMEOUT_S)
    except asyncssh.TimeoutError:
        listener.close()  # the hang-up ends it, and failing that its own lifetime


def _python(device: Device, script: str, *args: object) -> str:
    """A shell command that runs `script` with the device's python; nothing of it is left on the host."""
    arguments = " ".join(shlex.quote(str(a)) for a in args)
    return f"{device.shell_path(device.python)} -u -c {shlex.quote(script)} {arguments}"


def _rendezvous_reasons(rendezvous: dict[str, Any]) -> list[str]:
    main, port = rendezvous["main_device_id"], rendezvous["port"]
    if not rendezvous["checked"]:
        return []  # the main member's own reason already says why
    if rendezvous["port_in_use"]:
        return [
            f"port {port} is in use on {main} (rank 0, the main process's machine); free it there, or re-create "
            "the group with another --main-port"
        ]
    if not rendezvous["listening"]:
        return [_clip(f"the rendezvous check on port {port} of {main} (rank 0) failed: {rendezvous['error']}")]
    host = rendezvous["address"].strip("[]")
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return [
        _clip(
            f"{c['device_id']} (rank {c['machine_rank']}) cannot reach {where}: {c['error']}; open port {port} "
            f"on {main} to the other members, or re-create the group with a --main-address they can reach"
        )
        for c in rendezvous["members"]
        if c["reached"] is False
    ]


def _clip(text: str, limit: int = REASON_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _capped(reasons: list[str]) -> list[str]:
    """A verdict holds at most 50 reasons; each member's own reasons stay in its facts."""
    return reasons if len(reasons) <= 50 else [*reasons[:49], f"and {len(reasons) - 49} more reasons"]
