"""What the daemon adds to a training run: the same tiny-model SFT run as a bare child process and through the daemon.

Target (issue 13): through the daemon (ledger ingestion of every logged step, log following, the console
notifier on) a run takes at most 3% longer than the same trainer started by hand. Runs come in pairs, the order
alternating, so drift on a shared machine hits both sides; the script prints each pair's ratio and the median and
range over pairs, for three clocks:

- wall: spawn to exit for the bare run (its stdio as the daemon gives it); the launch request to the ledger's
  `run.completed` event for the daemon's (launch, supervision and recording of the outcome included), awaited by
  a long poll of the run's events as a client following a run waits, so no polling interval is added to it;
- trainer: the trainer's own first to last metrics line (steps 1..N), i.e. training while the daemon works beside
  it (ingesting the logged steps into the ledger);
- cpu: the CPU seconds the daemon itself spent during a supervised run over the trainer's own CPU seconds (read
  from /proc: the daemon's utime+stime, and its reaped children's). The two wall clocks swing by tens of percent on
  a shared 2-core machine; the CPU share is what the daemon would take from a trainer on a dedicated one.

    python bench/supervisor_overhead.py [--pairs 5] [--steps 40] [--logging-steps 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

BASHGYM = [sys.executable, "-c", "from bashgym.cli.main import main; main()"]
TRAINER = [sys.executable, "-u", "-m", "bashgym.trainers"]
TERMINAL = {"completed", "failed", "cancelled"}


def write_rows(path: Path, count: int = 64) -> Path:
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Count the lines in notes{i}.txt and print only the number"},
                {"role": "assistant", "content": f"wc -l < notes{i}.txt"},
            ]
        }
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def request(model: Path, data: Path, steps: int, logging_steps: int = 1) -> dict[str, Any]:
    """A short SFT run that logs every step by default, so the daemon gets as much to ingest as a run can give it."""
    return {
        "method": "sft",
        "base_model": str(model),
        "dataset_path": str(data),
        "max_steps": steps,
        "batch_size": 8,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5e-3,
        "max_seq_length": 128,
        "logging_steps": logging_steps,
        "save_steps": steps + 1,
    }


def trainer_seconds(run_dir: Path) -> float:
    """Training time as the trainer itself logged it: its first to its last metrics.jsonl line (steps 1..N)."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return float(lines[-1]["time"]) - float(lines[0]["time"])


def direct_run(workdir: Path, body: dict[str, Any], env: dict[str, str]) -> tuple[float, float]:
    run_dir = Path(tempfile.mkdtemp(prefix="direct-", dir=workdir))
    (run_dir / "request.json").write_text(json.dumps(body))
    started = time.perf_counter()
    # Its stdio as the daemon gives it: the protocol on a pipe, no stdin, stderr discarded (training.log keeps it).
    proc = subprocess.run(
        [*TRAINER, str(run_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
        timeout=900,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"direct run failed ({proc.returncode}): {(run_dir / 'training.log').read_text()[-2000:]}")
    return wall, trainer_seconds(run_dir)


class Daemon:
    """`bashgym daemon --port 0` in its own home, its console (the notifier's channel) drained to a file."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.console = (home / "console.txt").open("w")
        with (home / "daemon.log").open("a") as log:
            self.proc = subprocess.Popen(
                [*BASHGYM, "daemon", "--port", "0"],
                env={**env, "BASHGYM_HOME": str(home)},
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = line.split("listening on ", 1)[1].split()[0]
        # Keep draining stdout (the console notifier) so a full pipe never stalls the daemon.
        self._drain = subprocess.Popen(["cat"], stdin=self.proc.stdout, stdout=self.console)
        self.cpu_shares: list[float] = []
        self.cursor = 0  # the ledger events read so far
        token = (home / "admin.token").read_text().strip()
        self.client = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def cpu_s(self) -> tuple[float, float]:
        """(the daemon's own CPU seconds, its reaped children's) from /proc/<pid>/stat."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        utime, stime, cutime, cstime = (int(x) / tick for x in fields[11:15])
        return utime + stime, cutime + cstime

    def run(self, body: dict[str, Any]) -> tuple[float, float]:
        own_before, children_before = self.cpu_s()
        started = time.perf_counter()
        answer = self.client.post("/v1/training/start", json=body)
        answer.raise_for_status()
        run_id = answer.json()["run_id"]
        self._wait_for_end(run_id)
        wall = time.perf_counter() - started
        run = self.client.get(f"/v1/projects/unassigned/runs/{run_id}").json()
        time.sleep(0.2)  # the trainer is reaped once the daemon has recorded its exit
        own_after, children_after = self.cpu_s()
        self.cpu_shares.append((own_after - own_before) / max(children_after - children_before, 1e-9))
        if run["status"] != "completed":
            raise SystemExit(f"daemon run {run_id} ended {run['status']}: {run['attempts'][-1]['error_summary']}")
        return wall, trainer_seconds(self.home / "runs" / run_id)

    def _wait_for_end(self, run_id: str) -> None:
        """Long-poll the ledger's events for the run's end, as a client following a run does: the wait ends when
        the end is recorded, not at the next tick of a polling loop, and costs the daemon nothing meanwhile."""
        while True:
            page = self.client.get(
                "/v1/projects/unassigned/events",
                params={"after_cursor": self.cursor, "wait_s": 30, "type": [f"run.{s}" for s in sorted(TERMINAL)]},
            ).json()
            self.cursor = page["next_cursor"]
            if any(event["run_id"] == run_id for event in page["events"]):
                return

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._drain.wait(timeout=10)
        self.console.close()


def summary(name: str, ratios: list[float]) -> dict[str, Any]:
    return {
        "clock": name,
        "median_ratio": round(statistics.median(ratios), 4),
        "min_ratio": round(min(ratios), 4),
        "max_ratio": round(max(ratios), 4),
        "pairs": len(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--logging-steps", type=int, default=1, help="a metrics line every this many steps")
    args = parser.parse_args(argv)
    from bashgym.trainers.tiny import build_tiny

    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="supervisor-overhead-") as folder:
        root = Path(folder)
        model = build_tiny(root / "model")
        body = request(model, write_rows(root / "rows.jsonl"), args.steps, args.logging_steps)
        daemon = Daemon(root / "home", env)
        walls, trains = [], []
        try:
            direct_run(root, body, env)  # warm the page cache and the imports for both sides
            for pair in range(args.pairs):
                order = ("direct", "daemon") if pair % 2 == 0 else ("daemon", "direct")
                timed: dict[str, tuple[float, float]] = {}
                for side in order:
                    timed[side] = direct_run(root, body, env) if side == "direct" else daemon.run(body)
                walls.append(timed["daemon"][0] / timed["direct"][0])
                trains.append(timed["daemon"][1] / timed["direct"][1])
                record: dict[str, Any] = {"pair": pair, "order": list(order)}
                record |= {f"{k}_wall_s": round(v[0], 3) for k, v in timed.items()}
                record |= {f"{k}_trainer_s": round(v[1], 3) for k, v in timed.items()}
                print(json.dumps(record), flush=True)
        finally:
            daemon.close()
    print(json.dumps({"bench": "supervisor_overhead", **summary("wall", walls)}), flush=True)
    print(json.dumps({"bench": "supervisor_overhead", **summary("trainer", trains)}), flush=True)
    cpu = [1 + share for share in daemon.cpu_shares]
    print(json.dumps({"bench": "supervisor_overhead", **summary("cpu", cpu)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
