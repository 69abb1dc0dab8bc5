"""The SSH lane's wire work: connect with a verified host key, preflight a device, and run one training
remotely (upload, detached launch, incremental mirror, signals, verified download, cleanup)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import platform
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from bashgym.client.errors import BashGymError
from bashgym.client.specs import PreflightVerdict
from bashgym.client.validation import canonical_json, sha256_text
from bashgym.daemon.lanes import on_first_use
from bashgym.daemon.lanes.supervisor import ArtifactMismatch
from bashgym.daemon.version import bashgym_version

log = logging.getLogger("bashgym.ssh")


if TYPE_CHECKING:
    import asyncssh as asyncssh  # re-exported: the other SSH lanes import it from here
else:
    asyncssh = on_first_use("asyncssh")  # the SSH lanes use it through this name, loaded at the first connect

CONNECT_TIMEOUT_S = 15.0
MIN_DISK_GIB = 1.0
# Files the trainer appends to, mirrored into the local run directory by byte offset.
MIRRORED = ("protocol.jsonl", "metrics.jsonl", "training.log", "evaluation.log")
CHUNK = 256 * 1024
# Hashing a checkpoint on its device reads every byte: an hour covers hundreds of GB.
DIGEST_TIMEOUT_S = 3600.0


class DeviceUnavailable(BashGymError):
    """The device cannot be reached, refused our key, or presented a host key we cannot verify."""

    code = "device_unavailable"
    status = 503


@dataclass(frozen=True)
class Device:
    device_id: str
    host: str
    port: int
    user: str
    key_path: str
    work_dir: str
    python: str
    gpus: int
    slots: int
    host_key: str = ""
    known_hosts: str = ""

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Device:
        return cls(**{name: record[name] for name in cls.__dataclass_fields__})

    def core_share(self) -> list[str]:
        """A trainer's or evaluator's arguments on this device: with several slots, runs there share its cores,
        which the daemon cannot count, so each takes cores / slots itself (trainers/cores.py)."""
        return ["--share-of", str(self.slots)] if self.slots > 1 else []

    def shell_path(self, path: str) -> str:
        """A path for the remote shell: relative ones are under the login directory, as they are for SFTP."""
        return shlex.quote(path) if path.startswith("/") else f'"$HOME"/{shlex.quote(path)}'


async def connect(device: Device) -> asyncssh.SSHClientConnection:
    """Open a connection; the host key must match the pinned key or the known_hosts file."""
    if device.host_key:
        known_hosts: Any = asyncssh.import_known_hosts(f"[{device.host}]:{device.port} {device.host_key}\n")
    else:
        known_hosts = device.known_hosts or ()  # () means the user's ~/.ssh/known_hosts
    where = f"{device.user}@{device.host}:{device.port}"
    try:
        return await asyncssh.connect(
            device.host,
            device.port,
            username=device.user,
            client_keys=[device.key_path],
            known_hosts=known_hosts,
            agent_path=None,
            config=[],
            connect_timeout=CONNECT_TIMEOUT_S,
        )
    except asyncssh.HostKeyNotVerifiable as exc:
        raise DeviceUnavailable(
            f"Device {device.device_id}: the host key of {where} could not be verified ({exc.reason}).",
            hint="Pin it with --host-key 'ssh-ed25519 AAAA...' or add it to the known_hosts file "
            "(ssh-keyscan, checked out of band).",
        ) from exc
    except asyncssh.KeyImportError as exc:
        raise DeviceUnavailable(
            f"Device {device.device_id}: the key {device.key_path} cannot be loaded ({exc}).",
            hint="Use an unencrypted OpenSSH private key readable by the daemon (passphrase keys are not supported).",
        ) from exc
    except asyncssh.PermissionDenied as exc:
        raise DeviceUnavailable(
            f"Device {device.device_id}: {where} refused the key {device.key_path}.",
            hint="Authorise that public key for the user on the host, or register the right --key-path.",
        ) from exc
    except (OSError, asyncssh.Error) as exc:
        raise DeviceUnavailable(
            f"Device {device.device_id}: cannot reach {where}: {exc}.",
            hint="Check the host, port and network, then run bashgym device preflight again.",
        ) from exc


_PREFLIGHT = r"""
import json, os, platform, shutil, sys
facts = {"python": platform.python_version(), "executable": sys.executable}
try:
    from importlib.metadata import version
    facts["bashgym"] = version("bashgym")
except Exception as exc:
    facts["bashgym"] = None
    facts["bashgym_error"] = f"{type(exc).__name__}: {exc}"
try:
    import torch
    facts["torch"] = torch.__version__
    facts["cuda"] = torch.cuda.is_available()
    facts["cuda_version"] = torch.version.cuda
    gpus = []
    for i in range(torch.cuda.device_count() if facts["cuda"] else 0):
        free, total = torch.cuda.mem_get_info(i)
        gpus.append({"index": i, "name": torch.cuda.get_device_name(i),
                     "free_gib": round(free / 2**30, 2), "total_gib": round(total / 2**30, 2)})
    facts["gpus"] = gpus
    import importlib.util
    facts["bitsandbytes"] = importlib.util.find_spec("bitsandbytes") is not None
    import importlib.metadata
    facts["peft"] = importlib.metadata.version("peft") if importlib.util.find_spec("peft") else ""
except Exception as exc:
    facts["torch"] = None
    facts["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    from bashgym.trainers.environments.sandbox import probe_isolation
    facts["sandbox"] = probe_isolation().level
except Exception as exc:
    facts["sandbox"] = None
facts["disk_free_gib"] = round(shutil.disk_usage(".").free / 2**30, 2)
page = os.sysconf("SC_PAGE_SIZE")
facts["ram_total_gib"] = round(page * os.sysconf("SC_PHYS_PAGES") / 2**30, 2)
facts["ram_available_gib"] = round(page * os.sysconf("SC_AVPHYS_PAGES") / 2**30, 2)
print(json.dumps(facts))
"""


async def preflight(device: Device) -> PreflightVerdict:
    """Connect and inspect the host; the verdict says whether it may take runs, and why not."""
    try:
        conn = await connect(device)
    except DeviceUnavailable as exc:
        return PreflightVerdict(ready=False, reasons=[f"{exc.message} {exc.hint}".strip()])
    async with conn:
        work = device.shell_path(device.work_dir)
        command = f"mkdir -p {work} && cd {work} && {device.shell_path(device.python)} -"
        result = await conn.run(command, input=_PREFLIGHT, check=False, timeout=120)
    if result.exit_status != 0:
        stderr = str(result.stderr or "").strip()[-500:]
        reason = f"`{device.python}` did not run the preflight (exit {result.exit_status}): {stderr}"
        if result.exit_status == 127:
            reason = f"python `{device.python}` was not found on {device.host}"
        return PreflightVerdict(
            ready=False, reasons=[f"{reason}; run bashgym device bootstrap {device.device_id}, or set --python."]
        )
    facts = json.loads(str(result.stdout).strip().splitlines()[-1])
    return PreflightVerdict(ready=not (reasons := _judge(device, facts)), reasons=reasons, facts=facts)


def _judge(device: Device, facts: dict[str, Any]) -> list[str]:
    reasons = []
    ours = ".".join(platform.python_version_tuple()[:2])
    theirs = ".".join(str(facts["python"]).split(".")[:2])
    if theirs != ours:
        reasons.append(f"the host runs Python {facts['python']} but the daemon runs {platform.python_version()}")
    if facts.get("bashgym") != bashgym_version():
        found = facts.get("bashgym") or "no bashgym"
        reasons.append(
            f"the host has {found} but the daemon is bashgym {bashgym_version()}; "
            f"run bashgym device bootstrap {device.device_id}"
        )
    if facts.get("torch") is None:
        reasons.append(f"torch does not import on the host: {facts.get('torch_error', 'not installed')}")
    seen_gpus = len(facts.get("gpus") or [])
    if device.gpus and seen_gpus < device.gpus:
        reasons.append(f"the device is registered with {device.gpus} GPUs but CUDA shows {seen_gpus}")
    free = float(facts.get("disk_free_gib", 0))
    if free < MIN_DISK_GIB:
        reasons.append(f"only {free} GiB free in {device.work_dir}; at least {MIN_DISK_GIB} GiB needed")
    return reasons


def environment_digest(facts: dict[str, Any]) -> str:
    """sha256 of what must match across the ranks of one run, from a preflight's facts: Python major.minor,
    bashgym, torch, CUDA and the GPU models. Paths, free memory and disk are left out; the form is stable."""
    python = facts.get("python")
    environment = {
        "python": ".".join(str(python).split(".")[:2]) if python else None,
        "bashgym": facts.get("bashgym"),
        "torch": facts.get("torch"),
        "cuda_version": facts.get("cuda_version"),
        "gpu_names": [gpu.get("name") for gpu in facts.get("gpus") or []],
    }
    return sha256_text(canonical_json(environment))


async def bootstrap(device: Device, *, base_python: str, pip_args: list[str], wheel: Path | None) -> dict[str, Any]:
    """Create `<work_dir>/venv` on the host and install this daemon's exact bashgym version into it."""
    conn = await connect(device)
    async with conn:
        work = device.shell_path(device.work_dir)
        await conn.run(f"mkdir -p {work}", check=True)
        target = f"bashgym[train]=={bashgym_version()}"
        if wheel is not None:
            remote = f"{device.work_dir}/{wheel.name}"
            async with conn.start_sftp_client() as sftp:
                await sftp.put(str(wheel), remote)
            target = f"{device.shell_path(remote)}[train]"
        else:
            target = shlex.quote(target)
        command = (
            f"cd {work} && {shlex.quote(base_python)} -m venv venv && "
            f"venv/bin/python -m pip install --quiet {' '.join(map(shlex.quote, pip_args))} {target}"
        )
        result = await conn.run(command, check=False, timeout=3600)
    output = (str(result.stdout or "") + str(result.stderr or "")).strip()
    return {
        "device_id": device.device_id,
        "ok": result.exit_status == 0,
        "exit_status": result.exit_status,
        "python": f"{device.work_dir}/venv/bin/python",
        "output_tail": output[-2000:],
    }


class RemoteRun:
    """One run's directory on a device, mirrored into the local run directory by byte offsets."""

    def __init__(self, device: Device, run_id: str, local_dir: Path) -> None:
        self.device = device
        self.run_id = run_id
        self.local_dir = local_dir
        self.remote_dir = str(PurePosixPath(device.work_dir) / run_id)  # SFTP form, relative to the login dir
        self.conn: asyncssh.SSHClientConnection | None = None
        self.sftp: asyncssh.SFTPClient | None = None

    @property
    def shell_dir(self) -> str:
        return self.device.shell_path(self.remote_dir)

    async def open(self) -> None:
        await self.close()
        self.conn = await connect(self.device)
        self.sftp = await self.conn.start_sftp_client()

    async def close(self) -> None:
        if self.sftp is not None:
            self.sftp.exit()
            self.sftp = None
        if self.conn is not None:
            self.conn.close()
            await self.conn.wait_closed()
            self.conn = None

    def _channel(self) -> tuple[asyncssh.SSHClientConnection, asyncssh.SFTPClient]:
        assert self.conn is not None and self.sftp is not None, "open() first"
        return self.conn, self.sftp

    async def upload(self, request: dict[str, Any], files: dict[str, Path], *, name: str = "request.json") -> None:
        """Put the request and its data files (or directories) into `<work_dir>/<run_id>/`."""
        _, sftp = self._channel()
        await sftp.makedirs(self.remote_dir, exist_ok=True)
        for target, path in files.items():
            is_dir = await asyncio.to_thread(path.is_dir)
            await sftp.put(str(path), f"{self.remote_dir}/{target}", recurse=is_dir)
        async with sftp.open(f"{self.remote_dir}/{name}", "w") as handle:
            await handle.write(json.dumps(request, indent=2))

    async def fetch(self, name: str) -> None:
        """Copy one file of the remote directory into the local one."""
        _, sftp = self._channel()
        await sftp.get(f"{self.remote_dir}/{name}", str(self.local_dir / name))

    async def fetch_tree(self, name: str, target: Path) -> None:
        """Copy a directory of the remote run directory to `target` (which must not exist yet)."""
        _, sftp = self._channel()
        await sftp.get(f"{self.remote_dir}/{name}", str(target), recurse=True)

    async def digests(self, name: str) -> dict[str, str] | None:
        """sha256 of every file under the run directory's `name`, by path relative to it: {} when it does not
        exist, None when the device cannot say (no sha256sum, or a file name it had to escape)."""
        conn, _ = self._channel()
        folder = f"{self.shell_dir}/{shlex.quote(name)}"
        # Hashing reads every byte (minutes for a large optimizer state); copying it would take far longer.
        command = f"[ -d {folder} ] || exit 3; cd {folder} && find . -type f -exec sha256sum {{}} +"
        try:
            result = await conn.run(command, check=False, timeout=DIGEST_TIMEOUT_S)
        except asyncssh.TimeoutError:
            return None
        if result.exit_status == 3:
            return {}
        if result.exit_status != 0:
            return None
        found = {}
        for line in str(result.stdout).splitlines():
            digest, separator, path = line.partition("  ./")
            if not separator or len(digest) != 64 or line.startswith("\\"):
                return None  # sha256sum escapes names holding a newline or backslash: copy instead of guessing
            found[path] = digest
        return found

    async def fetch_files(self, name: str, paths: Sequence[str], target: Path) -> None:
        """Copy the files `paths` (relative to the run directory's `name`) into `target`, keeping their layout."""
        _, sftp = self._channel()
        for path in paths:
            local = target / path
            await asyncio.to_thread(local.parent.mkdir, parents=True, exist_ok=True)
            await sftp.get(f"{self.remote_dir}/{name}/{path}", str(local))

    async def put_files(self, source: Path, name: str, paths: Sequence[str]) -> None:
        """Copy the files `paths` of the local directory `source` into the run directory's `name`, in order."""
        _, sftp = self._channel()
        for path in paths:
            await sftp.makedirs(str(PurePosixPath(self.remote_dir, name, path).parent), exist_ok=True)
            await sftp.put(str(source / path), f"{self.remote_dir}/{name}/{path}")

    async def launch(self, *, resume: bool, module: str = "bashgym.trainers", args: Sequence[str] = ()) -> int:
        """Start the trainer (or another bashgym child, by module, with `args`) detached in its own session;
        return its process group id."""
        conn, _ = self._channel()
        python = self.device.shell_path(self.device.python)
        extra = "".join(f" {shlex.quote(arg)}" for arg in args)
        trainer = f'{python} -u -m {module} "$PWD"{extra}' + (" --resume" if resume else "")
        # The wrapper ignores the control signals so only the trainer answers them, then records the exit code.
        job = (
            f"trap '' USR1 TERM INT HUP; echo $$ > pgid; {trainer} >> protocol.jsonl 2>> training.log < /dev/null; "
            "echo $? > exit_code.tmp; mv exit_code.tmp exit_code"
        )
        command = (
            f"cd {self.shell_dir} && rm -f exit_code pgid && "
            f"(setsid sh -c {shlex.quote(job)} > /dev/null 2>&1 < /dev/null &) && "
            "for _ in $(seq 100); do [ -s pgid ] && break; sleep 0.05; done && cat pgid"
        )
        result = await conn.run(command, check=False, timeout=60)
        if result.exit_status != 0 or not str(result.stdout).strip().isdigit():
            raise DeviceUnavailable(
                f"Device {self.device.device_id}: the trainer did not start: {str(result.stderr or '').strip()[-500:]}",
                hint="Run bashgym device preflight on it.",
            )
        return int(str(result.stdout).strip())

    async def sync(self) -> None:
        """Append what the trainer wrote since the last sync to the local mirrors; refresh run_state.json."""
        _, sftp = self._channel()
        for name in MIRRORED:
            local = self.local_dir / name
            offset = await asyncio.to_thread(_size, local)
            try:
                async with sftp.open(f"{self.remote_dir}/{name}", "rb") as handle:
                    data = _as_bytes(await handle.read(-1, offset))
            except asyncssh.SFTPNoSuchFile:
                continue
            if data:
                await asyncio.to_thread(_append, local, data)
        try:
            async with sftp.open(f"{self.remote_dir}/run_state.json", "rb") as handle:
                state = _as_bytes(await handle.read())
        except asyncssh.SFTPNoSuchFile:
            return
        await asyncio.to_thread(_replace, self.local_dir / "run_state.json", state)

    async def exit_code(self) -> int | None:
        _, sftp = self._channel()
        try:
            async with sftp.open(f"{self.remote_dir}/exit_code", "r") as handle:
                text = str(await handle.read()).strip()
        except asyncssh.SFTPNoSuchFile:
            return None
        return int(text) if text.lstrip("-").isdigit() else None

    async def signal(self, pgid: int, signame: str) -> bool:
        """Signal the trainer's process group; False when no such group is left."""
        conn, _ = self._channel()
        # `-s NAME -- -PGID` is the form both dash and bash accept for a process group.
        result = await conn.run(f"kill -s {signame} -- -{int(pgid)}", check=False, timeout=30)
        return result.exit_status == 0

    async def download_artifacts(self) -> dict[str, Any]:
        """Fetch every file the trainer's model profile lists, verifying each sha256 while it streams."""
        _, sftp = self._channel()
        async with sftp.open(f"{self.remote_dir}/model_profile.json", "rb") as handle:
            raw = _as_bytes(await handle.read())
        profile: dict[str, Any] = json.loads(raw)
        for entry in profile["files"]:
            relative = PurePosixPath(entry["path"])
            if relative.is_absolute() or ".." in relative.parts:
                raise ArtifactMismatch(f"The model profile names {entry['path']!r}, outside the run directory.")
            target = self.local_dir / relative
            tmp = target.with_name(target.name + ".part")
            await asyncio.to_thread(_replace, tmp, b"")
            digest = hashlib.sha256()
            size = 0
            async with sftp.open(f"{self.remote_dir}/{relative}", "rb") as handle:
                while chunk := _as_bytes(await handle.read(CHUNK)):
                    digest.update(chunk)
                    size += len(chunk)
                    await asyncio.to_thread(_append, tmp, chunk)
            if digest.hexdigest() != entry["sha256"] or size != entry["size_bytes"]:
                await asyncio.to_thread(tmp.unlink)
                raise ArtifactMismatch(
                    f"Artifact {entry['path']} from device {self.device.device_id} has sha256 "
                    f"{digest.hexdigest()[:12]} ({size} bytes), but the trainer recorded "
                    f"{entry['sha256'][:12]} ({entry['size_bytes']} bytes); it was changed after training.",
                    hint="Nothing from this run was registered. Inspect the device; rerun the training.",
                )
            await asyncio.to_thread(tmp.replace, target)
        await asyncio.to_thread(_replace, self.local_dir / "model_profile.json", raw)
        return profile

    async def remove(self) -> None:
        conn, _ = self._channel()
        await conn.run(f"rm -rf {self.shell_dir}", check=False, timeout=120)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


def _replace(path: Path, data: bytes) -> None:
    """Write atomically: a reader sees the old bytes or the new ones, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _as_bytes(data: object) -> bytes:
    """asyncssh types reads as str; files opened in binary mode give bytes."""
    assert isinstance(data, bytes), "open remote files in binary mode"
    return data
