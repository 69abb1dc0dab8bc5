"""The exact environment a run trains in, measured in its own process: Python, the training packages' versions, the
OS, CUDA, the GPU driver and the accelerators' names, and the git commit of the user's code (dirty or not).

Shared by the launched trainers (their `started` line) and the tracking client (bashgym.track, in a user's script),
so it imports no torch and nothing of BashGym: versions come from the installed distributions' metadata, CUDA from
torch only where the process has already imported it, the driver and GPU names from `nvidia-smi` where it is
installed, and the commit from `git`, each bounded in time; a missing tool or a directory outside a repository
leaves its fact out, never fails the run. The daemon validates these facts (bashgym.client.environment) and
computes the run's environment digest from them: a caller never sends one.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

# The distributions whose versions a run records when installed: what the trainers and a typical script import.
PACKAGES = (
    "bashgym",
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "tokenizers",
    "safetensors",
    "bitsandbytes",
    "deepspeed",
    "flash-attn",
    "numpy",
    "nvidia-ml-py",
)
TOOL_TIMEOUT_S = 3.0  # each of git and nvidia-smi; a hung network mount must not hold a run's start


def capture_environment(*, code_dir: Path | None = None, timeout_s: float = TOOL_TIMEOUT_S) -> dict[str, Any]:
    """The facts of this process's environment; `code_dir` is where the user's code is (no git facts without it)."""
    accelerators, driver = _gpus(timeout_s)
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}".strip(),
        "machine": platform.machine(),
        "packages": installed_versions(),
        "cuda": _torch_cuda(),
        "driver": driver,
        "accelerators": accelerators,
        "git": git_state(code_dir, timeout_s=timeout_s) if code_dir is not None else None,
        "hostname": platform.node()[:200],
    }
    return facts


def installed_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # not installed here: absent from the record, which is itself a fact
    return versions


def script_dir() -> Path:
    """The directory of the script this process runs (`sys.argv[0]`), or the working directory (a notebook, -c)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.is_file():
        return script.resolve().parent
    return Path.cwd()


def git_state(directory: Path, *, timeout_s: float = TOOL_TIMEOUT_S) -> dict[str, Any] | None:
    """The commit checked out where `directory` is and whether the tree differs from it (untracked files count):
    None outside a repository, without git, or when git does not answer in time."""
    commit = _tool(["git", "-C", str(directory), "rev-parse", "HEAD"], timeout_s)
    if not commit:
        return None
    # --no-optional-locks: reading the state must not take the index lock a user's own git command may need.
    status = _tool(["git", "--no-optional-locks", "-C", str(directory), "status", "--porcelain"], timeout_s)
    if status is None:
        return None
    return {"commit": commit.strip(), "dirty": bool(status.strip())}


def _torch_cuda() -> str | None:
    """The CUDA torch was built with, where this process has imported torch (importing it here costs seconds)."""
    torch = sys.modules.get("torch")
    version = getattr(getattr(torch, "version", None), "cuda", None)
    return str(version) if version else None


def _gpus(timeout_s: float) -> tuple[list[str], str | None]:
    """The GPUs' names and the driver's version, from nvidia-smi where it is installed."""
    if shutil.which("nvidia-smi") is None:
        return [], None
    query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    out = _tool(query, timeout_s)
    rows = [[cell.strip() for cell in line.split(",")] for line in (out or "").splitlines() if "," in line]
    return [row[0] for row in rows], (rows[0][1] if rows else None)


def _tool(argv: list[str], timeout_s: float) -> str | None:
    """A tool's standard output, or None when it is missing, fails or runs past `timeout_s`.

    The tool runs by its full path with an empty environment: the process measuring itself may hold a secret (a
    trainer that pushes holds HF_TOKEN; a user's script, anything), and git or nvidia-smi needs none of it."""
    found = shutil.which(argv[0])
    if found is None:
        return None
    argv = [found, *argv[1:]]
    env = {"LC_ALL": "C"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    except (OSError, subprocess.SubprocessError):  # no such tool, or it hung: the fact is unknown, not an error
        return None
    return done.stdout if done.returncode == 0 else None
