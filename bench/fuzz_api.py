"""Schemathesis over every operation of /v1/openapi.json with the admin token: no 500, answers match the schema.

Issue 12.4. Starts `bashgym daemon --port 0` in a temporary home (rate limit raised so the fuzzer is not
answered 429 throughout), reads the admin token, and runs `schemathesis run` with the checks
not_a_server_error, response_schema_conformance and status_code_conformance, at most --max-examples cases
per operation. Paths the API writes to (`to` of a ledger backup or a model export) are moved under the
temporary home by bench/fuzz_hooks.py: the fuzzer runs as whoever starts it, and must not write where it likes.

Run: make bench-env && .venv-bench/bin/python bench/fuzz_api.py [--max-examples 25] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

BASHGYM = [sys.executable, "-c", "from bashgym.cli.main import main; main()"]
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance"
HOOKS = Path(__file__).with_name("fuzz_hooks.py")


def start_daemon(home: Path) -> tuple[subprocess.Popen[str], str]:
    env = {
        **os.environ,
        "BASHGYM_HOME": str(home),
        "BASHGYM_RATE_LIMIT_BURST": "100000",
        "BASHGYM_RATE_LIMIT_PER_MINUTE": "100000",
        "BASHGYM_READ_RATE_BURST": "100000",
        "BASHGYM_READ_RATE_PER_MINUTE": "100000",
    }
    home.mkdir(parents=True, exist_ok=True)
    with (home / "daemon.log").open("a") as log:
        proc = subprocess.Popen(
            [*BASHGYM, "daemon", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=log, text=True
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        raise SystemExit(f"daemon did not start: {(home / 'daemon.log').read_text()}")
    # The console channel writes to stdout; drop it so a full pipe never blocks the daemon.
    subprocess.Popen(["cat"], stdin=proc.stdout, stdout=subprocess.DEVNULL)
    return proc, line.split("listening on ", 1)[1].split()[0]


def summarise(report: Path) -> dict[str, Any]:
    """Operations, cases and failing checks (by operation and check) from schemathesis' ndjson events."""
    operations: set[str] = set()
    cases = 0
    failures: Counter[str] = Counter()
    for line in report.read_text().splitlines():
        recorder = json.loads(line).get("ScenarioFinished", {}).get("recorder")
        if not recorder:
            continue
        operations.add(recorder["label"])
        cases += len(recorder.get("cases") or {})
        for checks in (recorder.get("checks") or {}).values():
            for check in checks:
                if check["status"] == "failure":
                    failures[f"{recorder['label']}: {check['name']}"] += 1
    return {"operations": len(operations), "cases": cases, "failures": dict(sorted(failures.items()))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-examples", type=int, default=25, help="cases per operation and phase")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", default="2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        proc, url = start_daemon(home)
        try:
            token = (home / "admin.token").read_text().strip()
            report = Path(tmp) / "events.ndjson"
            command = [
                sys.executable, "-m", "schemathesis.cli", "run", f"{url}/v1/openapi.json",
                "--checks", CHECKS, "--max-examples", str(args.max_examples), "--seed", str(args.seed),
                "--workers", args.workers, "--header", f"Authorization: Bearer {token}",
                "--phases", "examples,coverage,fuzzing", "--suppress-health-check", "all",
                "--request-timeout", "40", "--report", "ndjson", "--report-ndjson-path", str(report),
                "--output-sanitize", "true",
            ]  # fmt: skip
            env = {**os.environ, "SCHEMATHESIS_HOOKS": "fuzz_hooks", "FUZZ_HOME": str(home)}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS.parent), env.get("PYTHONPATH")]))
            started = time.perf_counter()
            code = subprocess.run(command, env=env, cwd=tmp, check=False).returncode  # its cache lands in tmp
            wall_s = time.perf_counter() - started
            summary = {**summarise(report), "exit_code": code, "wall_s": round(wall_s, 1)}
            internal = (home / "daemon.log").read_text().count("Internal error (ref")
            summary["internal_errors_in_daemon_log"] = internal
            print(json.dumps(summary, indent=2))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
