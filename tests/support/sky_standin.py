"""A stand-in `sky` executable: the SkyPilot CLI commands and outputs the daemon relies on (skypilot 0.14.1's
sky/client/cli/command.py), over a state folder instead of a cloud. Run as `python sky_standin.py STATE ARGS...`
through a wrapper script the test writes (`SkyStandIn.executable`).

- `launch --dryrun -y -c NAME [--secret N]... FILE`: checks the task's top-level keys against SkyPilot's task
  schema and that each `--secret` has a value in the environment; runs nothing.
- `jobs launch -n NAME -y -d [--env K=V]... [--secret N]... FILE`: queues a managed job, prints `Managed Job ID: N`.
- `jobs queue --all -o json`: the ManagedJobRecord list; each call moves an open job one step: PENDING -> RUNNING
  (its trainer "starts": run/request.json and the first metrics in the checkpoint store) -> ... -> SUCCEEDED (the
  model files, model_profile.json and bashgym-run.json written as trainers/external_job.py writes them), or
  CANCELLING -> CANCELLED after a cancel.
- `jobs logs --no-follow ID`, `jobs cancel -y ID`.

The store is the task's `/bashgym/out` mount source, read through STATE/stores.json ({prefix: folder}), as the
operator's mount would show it. STATE/behaviour.json {"looks_to_finish": N} holds the next job's running time.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

TASK_KEYS = {
    "name", "workdir", "resources", "num_nodes", "envs", "secrets", "file_mounts", "setup", "run", "config",
    "service", "volumes", "event_callback",
}  # fmt: skip
TERMINAL = {"SUCCEEDED", "CANCELLED", "FAILED"}


def main(argv: list[str]) -> int:
    state = Path(argv[0])
    args = argv[1:]
    (state / "calls.jsonl").open("a").write(json.dumps(args) + "\n")
    match args[:2]:
        case ["launch", _]:
            return dryrun(args[1:])
        case ["jobs", "launch"]:
            return launch(state, args[2:])
        case ["jobs", "queue"]:
            print(json.dumps([advance(state, job) for job in jobs(state)], indent=2))
            return 0
        case ["jobs", "logs"]:
            log = state / f"job-{args[-1]}.log"
            print(log.read_text() if log.exists() else "", end="")
            return 0
        case ["jobs", "cancel"]:
            return cancel(state, args[-1])
    print(f"Error: No such command {args[:2]}.", file=sys.stderr)
    return 2


def options(args: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    found: dict[str, list[str]] = {}
    rest = []
    flags = {"-y", "-d", "--dryrun", "--no-follow", "--all"}
    i = 0
    while i < len(args):
        if args[i] in flags:
            found.setdefault(args[i], [])
            i += 1
        elif args[i].startswith("-"):
            found.setdefault(args[i], []).append(args[i + 1])
            i += 2
        else:
            rest.append(args[i])
            i += 1
    return found, rest


def task(args: list[str]) -> tuple[dict[str, list[str]], dict[str, Any]]:
    found, rest = options(args)
    document = yaml.safe_load(Path(rest[-1]).read_text())
    unknown = set(document) - TASK_KEYS
    if unknown:
        raise SystemExit(f"ValueError: Invalid task YAML: unknown fields {sorted(unknown)}")
    for name in found.get("--secret", []):
        if "=" not in name and not os.environ.get(name):
            raise SystemExit(f"ValueError: secret {name} has no value in the environment")
    return found, document


def dryrun(args: list[str]) -> int:
    task(args)
    print("Dryrun finished.")
    return 0


def launch(state: Path, args: list[str]) -> int:
    found, document = task(args)
    listed = jobs(state)
    behaviour = read(state / "behaviour.json", {"looks_to_finish": 2})
    job = {
        "job_id": len(listed) + 1,
        "job_name": found["-n"][0],
        "status": "PENDING",
        "looks": 0,
        "looks_to_finish": behaviour["looks_to_finish"],
        "env": dict(item.split("=", 1) for item in found.get("--env", [])),
        "secrets_seen": sorted(name for name in found.get("--secret", []) if os.environ.get(name)),
        "document": document,
        "folder": str(Path(args[-1]).resolve().parent),
    }
    save(state, [*listed, job])
    print("Launching a managed job ...")
    print(f"\n📋 Useful Commands\nManaged Job ID: {job['job_id']}")
    print(f"├── To cancel the job:\t\tsky jobs cancel {job['job_id']}")
    return 0


def cancel(state: Path, job_id: str) -> int:
    listed = jobs(state)
    for job in listed:
        if str(job["job_id"]) == job_id and job["status"] not in TERMINAL:
            job["status"] = "CANCELLING"
    save(state, listed)
    print(f"Cancelling managed job {job_id}.")
    return 0


def advance(state: Path, job: dict[str, Any]) -> dict[str, Any]:
    """One step of the job, as the controller would take it between two looks."""
    if job["status"] == "PENDING":
        job["status"] = "RUNNING"
        start(state, job)
    elif job["status"] == "RUNNING":
        job["looks"] += 1
        if job["looks"] >= job["looks_to_finish"]:
            finish(state, job)
            job["status"] = "SUCCEEDED"
    elif job["status"] == "CANCELLING":
        job["status"] = "CANCELLED"
        log(state, job, "bashgym: the job was cancelled")
    save(state, [job if j["job_id"] == job["job_id"] else j for j in jobs(state)])
    return {
        "job_id": job["job_id"],
        "job_name": job["job_name"],
        "task_id": 0,
        "status": job["status"],
        "failure_reason": None,
        "job_duration": 1.0 * job["looks"],
        "recovery_count": 0,
        "resources": "1x(gpus=H100:1)",
    }


def run_folder(state: Path, job: dict[str, Any]) -> Path:
    source = job["document"]["file_mounts"]["/bashgym/out"]["source"]
    for prefix, folder in read(state / "stores.json", {}).items():
        if source.startswith(prefix):
            return Path(folder) / source.removeprefix(prefix).strip("/") / "run"
    raise SystemExit(f"the stand-in mounts no store {source}")


def local(job: dict[str, Any], remote: str) -> Path:
    mounted = Path(job["document"]["file_mounts"][remote])
    return mounted if mounted.is_absolute() else Path(job["folder"]) / mounted


def start(state: Path, job: dict[str, Any]) -> None:
    run = run_folder(state, job)
    run.mkdir(parents=True, exist_ok=True)
    for stale in run.iterdir():
        if stale.is_file():
            stale.unlink()
    (run / "request.json").write_text(local(job, "/bashgym/request.json").read_text())
    metric(run, 1, 2.5)
    log(state, job, "bashgym: training sft", "step 1 loss 2.5")


def finish(state: Path, job: dict[str, Any]) -> None:
    run = run_folder(state, job)
    metric(run, 2, 1.25)
    files = {"final/config.json": b'{"model_type": "llama"}', "final/adapter_model.safetensors": os.urandom(64)}
    profile = []
    for name, data in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
        profile.append({"path": name, "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)})
    (run / "model_profile.json").write_text(json.dumps({"method": "sft", "use_lora": True, "files": profile}))
    request = json.loads(local(job, "/bashgym/request.json").read_text())
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    data_remote = request["dataset_path"]
    evidence = {
        "schema": "bashgym.external-run/v1",
        "job_id": job["env"].get("BASHGYM_JOB_ID", ""),
        "request_digest": hashlib.sha256(canonical.encode()).hexdigest(),
        "dataset_sha256": hashlib.sha256(local(job, data_remote).read_bytes()).hexdigest(),
        "exit_code": 0,
    }
    (run / "bashgym-run.json").write_text(json.dumps(evidence))
    log(state, job, "step 2 loss 1.25", "bashgym: trainer exited with code 0")


def metric(run: Path, step: int, loss: float) -> None:
    with (run / "metrics.jsonl").open("a") as out:
        out.write(json.dumps({"step": step, "time": time.time(), "metrics": {"train.loss": loss}}) + "\n")


def log(state: Path, job: dict[str, Any], *lines: str) -> None:
    with (state / f"job-{job['job_id']}.log").open("a") as out:
        out.write("".join(f"{line}\n" for line in lines))


def jobs(state: Path) -> list[dict[str, Any]]:
    return list(read(state / "jobs.json", []))


def save(state: Path, listed: list[dict[str, Any]]) -> None:
    (state / "jobs.json").write_text(json.dumps(listed))


def read(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


class SkyStandIn:
    """The stand-in's state folder and the `sky` wrapper the daemon is given (BASHGYM_SKYPILOT_BIN)."""

    def __init__(self, folder: Path, stores: dict[str, Path]) -> None:
        self.state = folder / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "stores.json").write_text(json.dumps({k: str(v) for k, v in stores.items()}))
        self.executable = folder / "sky"
        self.executable.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {self.state} "$@"\n')
        self.executable.chmod(0o755)

    def finish_after(self, looks: int) -> None:
        (self.state / "behaviour.json").write_text(json.dumps({"looks_to_finish": looks}))

    def calls(self) -> list[list[str]]:
        path = self.state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def jobs(self) -> list[dict[str, Any]]:
        return jobs(self.state)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
