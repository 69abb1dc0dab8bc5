"""Where the Slurm lane's commands run and its files live: on the daemon's host (a cluster of access `local`,
whose shared directory this host mounts) or on a login node over SSH (access `ssh`, through the SSH lane)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from bashgym.client.errors import BashGymError
from bashgym.daemon.lanes.remote import read_from
from bashgym.daemon.lanes.ssh import MIRRORED, RemoteRun, asyncssh
from bashgym.daemon.lanes.supervisor import ArtifactMismatch

log = logging.getLogger("bashgym.slurm")

COMMAND_TIMEOUT_S = 60.0


class SlurmUnavailable(BashGymError):
    """The cluster's commands could not be run, or refused the job."""

    code = "slurm_unavailable"
    status = 503


class SlurmCommands(Protocol):
    """Runs one of the fixed Slurm client commands with argv (never through a shell of ours)."""

    async def __call__(self, argv: list[str]) -> tuple[int, str, str]: ...


class RunFiles(Protocol):
    """The run's directory in the cluster's shared directory, mirrored into the local run directory."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def upload(self, request: dict[str, Any], files: dict[str, Path]) -> None: ...
    async def write_text(self, name: str, text: str) -> None: ...
    async def has(self, name: str) -> bool: ...
    async def sync(self) -> None: ...
    async def exit_code(self) -> int | None: ...
    async def download_artifacts(self) -> dict[str, Any]: ...
    async def remove(self) -> None: ...


class LocalCommands:
    """The Slurm client commands on the daemon's host, with the trainer's share of the daemon's environment (never
    a secret: sbatch hands its environment to the job) and the operator's SLURM_CONF."""

    def __init__(self, environment: Mapping[str, str], slurm_conf: Path | None) -> None:
        self.environment = {**environment, **({"SLURM_CONF": str(slurm_conf)} if slurm_conf else {})}

    async def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        log.info("Slurm: %s", shlex.join(argv))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=self.environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise SlurmUnavailable(
                f"`{argv[0]}` could not be run on the daemon's host: {exc}.",
                hint="Install the Slurm client commands there (Debian: slurm-client) and set BASHGYM_SLURM_CONF.",
            ) from exc
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return 124, "", f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:g} s"
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


class SshCommands:
    """The Slurm client commands on a login node, over the run's SSH connection to it; argv is quoted word by
    word for the login shell."""

    def __init__(self, remote: RemoteRun) -> None:
        self.remote = remote

    async def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        if self.remote.conn is None:
            await self.remote.open()
        assert self.remote.conn is not None
        try:
            result = await self.remote.conn.run(shlex.join(argv), check=False, timeout=COMMAND_TIMEOUT_S)
        except (asyncssh.Error, OSError) as exc:
            raise SlurmUnavailable(f"The login node did not run `{argv[0]}`: {exc}.") from exc
        return int(result.exit_status or 0), str(result.stdout or ""), str(result.stderr or "")


class SshRunFiles:
    """A run directory on the login node's view of the shared directory, over SFTP (the SSH lane's mirror)."""

    def __init__(self, remote: RemoteRun) -> None:
        self.remote = remote

    async def open(self) -> None:
        await self.remote.open()

    async def close(self) -> None:
        await self.remote.close()

    async def upload(self, request: dict[str, Any], files: dict[str, Path]) -> None:
        await self.remote.upload(request, files)

    async def write_text(self, name: str, text: str) -> None:
        assert self.remote.sftp is not None
        async with self.remote.sftp.open(f"{self.remote.remote_dir}/{name}", "w") as handle:
            await handle.write(text)

    async def has(self, name: str) -> bool:
        assert self.remote.sftp is not None
        return bool(await self.remote.sftp.exists(f"{self.remote.remote_dir}/{name}"))

    async def sync(self) -> None:
        await self.remote.sync()

    async def exit_code(self) -> int | None:
        return await self.remote.exit_code()

    async def download_artifacts(self) -> dict[str, Any]:
        return await self.remote.download_artifacts()

    async def remove(self) -> None:
        await self.remote.remove()


class LocalRunFiles:
    """A run directory in a shared directory the daemon's host mounts: files are read and copied directly."""

    def __init__(self, shared: Path, local: Path) -> None:
        self.shared = shared
        self.local = local

    async def open(self) -> None:
        await asyncio.to_thread(self.shared.mkdir, parents=True, exist_ok=True)

    async def close(self) -> None:
        return None

    async def upload(self, request: dict[str, Any], files: dict[str, Path]) -> None:
        await asyncio.to_thread(_stage, self.shared, request, files)

    async def write_text(self, name: str, text: str) -> None:
        await asyncio.to_thread((self.shared / name).write_text, text)

    async def has(self, name: str) -> bool:
        return await asyncio.to_thread((self.shared / name).exists)

    async def sync(self) -> None:
        await asyncio.to_thread(_mirror, self.shared, self.local)

    async def exit_code(self) -> int | None:
        try:
            text = (await asyncio.to_thread((self.shared / "exit_code").read_text)).strip()
        except FileNotFoundError:
            return None
        return int(text) if text.lstrip("-").isdigit() else None

    async def download_artifacts(self) -> dict[str, Any]:
        return await asyncio.to_thread(_copy_verified, self.shared, self.local)

    async def remove(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self.shared, True)


def _stage(shared: Path, request: dict[str, Any], files: dict[str, Path]) -> None:
    shared.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        if source.is_dir():
            shutil.copytree(source, shared / name, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, shared / name)
    (shared / "request.json").write_text(json.dumps(request, indent=2))


def _mirror(shared: Path, local: Path) -> None:
    """Append what the trainer wrote since the last look to the local mirrors; refresh run_state.json."""
    for name in MIRRORED:
        target = local / name
        data = read_from(shared / name, target.stat().st_size if target.exists() else 0)
        if data:
            with target.open("ab") as out:
                out.write(data)
    state = shared / "run_state.json"
    if state.exists():
        tmp = local / "run_state.json.tmp"
        shutil.copyfile(state, tmp)
        tmp.replace(local / "run_state.json")


def _copy_verified(shared: Path, local: Path) -> dict[str, Any]:
    """Copy every file the model profile lists, verifying each sha256 and size as it streams."""
    raw = (shared / "model_profile.json").read_bytes()
    profile: dict[str, Any] = json.loads(raw)
    for entry in profile["files"]:
        relative = PurePosixPath(entry["path"])
        if relative.is_absolute() or ".." in relative.parts:
            raise ArtifactMismatch(f"The model profile names {entry['path']!r}, outside the run directory.")
        target = local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        digest, size = hashlib.sha256(), 0
        with (shared / relative).open("rb") as source, tmp.open("wb") as out:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        if digest.hexdigest() != entry["sha256"] or size != entry["size_bytes"]:
            tmp.unlink()
            raise ArtifactMismatch(
                f"Artifact {entry['path']} in the cluster's shared directory has sha256 {digest.hexdigest()[:12]} "
                f"({size} bytes), but the trainer recorded {entry['sha256'][:12]} ({entry['size_bytes']} bytes); "
                "it was changed after training.",
                hint=f"Nothing from this run was registered. Inspect {shared}; rerun the training.",
            )
        tmp.replace(target)
    (local / "model_profile.json").write_bytes(raw)
    return profile
