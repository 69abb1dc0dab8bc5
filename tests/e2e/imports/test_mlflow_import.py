"""`bashgym import mlflow` against a real `mlflow server` on loopback (issue 53, item 4).

MLflow runs in the bench environment (.venv-bench, `make bench-env`), never in .venv: the import reads MLflow's REST
API, so the `mlflow` package is no dependency. Imported twice, an experiment adds nothing the second time; a run
that grew since gains only its new points; an imported run is never evidence; tokens that may not write the project,
bodies past the bounds and an MLflow that is not there are refused with what to do.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data
from tests.support.helpers import CliResult, RunningDaemon, cli, eventually, register_versions, running_daemon

pytestmark = pytest.mark.slow  # starting `mlflow server` takes several seconds
ROOT = Path(__file__).resolve().parents[3]
BENCH_BIN = ROOT / ".venv-bench" / "bin"
PROJECT = "nightly"
VERSIONS = ("--model-version", "tiny-v1", "--dataset-version", "rows-v1")


@dataclass
class Mlflow:
    uri: str
    running_run: str  # the MLflow run left RUNNING by mlflow_runs.py

    def script(self, *args: str) -> str:
        done = subprocess.run(
            [str(BENCH_BIN / "python"), str(Path(__file__).with_name("mlflow_runs.py")), *args, self.uri],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""  # MLflow prints links first


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mlflow]:
    if not (BENCH_BIN / "mlflow").exists():
        reason = f"no MLflow in the bench environment ({BENCH_BIN / 'mlflow'}); `make bench-env` installs it"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must run this test (.ci/run makes it)")
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    command = [
        str(BENCH_BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--default-artifact-root", str(root / "artifacts"),
    ]  # fmt: skip
    log = (root / "server.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    uri = f"http://127.0.0.1:{port}"
    try:
        eventually("mlflow server to answer /health", lambda: _healthy(uri, server), timeout_s=90, every_s=0.25)
        yield Mlflow(uri, "")
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _healthy(uri: str, server: subprocess.Popen[bytes]) -> bool:
    assert server.poll() is None, "mlflow server exited; see its server.log"
    try:
        return httpx.get(f"{uri}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def world(mlflow: Mlflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, Mlflow]]:
    root = tmp_path_factory.mktemp("import")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    mlflow.running_run = mlflow.script("populate")
    with running_daemon(root / "home") as daemon:
        with daemon.client() as admin:
            assert admin.post("/v1/projects", json={"project_id": PROJECT, "name": PROJECT}).status_code == 201
        register_versions(daemon, PROJECT, root / "model", sft_data(root, rows=4))
        yield daemon, mlflow


def import_mlflow(daemon: RunningDaemon, token: str, uri: str, *extra: str, experiment: str = "sft sweep") -> CliResult:
    env = {**daemon.env(), "BASHGYM_TOKEN": token}
    args = ("import", "mlflow", "--tracking-uri", uri, "--experiment", experiment, "--project", PROJECT)
    return cli(env, "--json", *args, *extra)


def imported_runs(daemon: RunningDaemon, project: str = PROJECT) -> dict[str, dict[str, Any]]:
    """The project's imported runs, by MLflow run id, with their `run.imported` events and metric points."""
    with daemon.client() as admin:
        listed = admin.get(f"/v1/projects/{project}/runs", params={"limit": 200})
        assert listed.status_code == 200, listed.text
        runs = {}
        for row in listed.json():
            run = admin.get(f"/v1/projects/{project}/runs/{row['run_id']}").json()
            if run["source_system"] != "mlflow":
                continue
            events = admin.get(f"/v1/projects/{project}/events", params={"type": "run.imported", "limit": 1000}).json()[
                "events"
            ]
            run["imported"] = [e["payload"] for e in events if e["run_id"] == run["run_id"]]
            trend = admin.get(f"/v1/projects/{project}/trend", params={"metric": "train_loss", "run": run["run_id"]})
            run["loss"] = list(zip(trend.json()["steps"], trend.json()["values"], strict=True))
            runs[run["config"]["provenance"]["run_id"]] = run
        return runs


def test_an_experiment_imported_twice_is_recorded_once_and_a_grown_run_gains_only_its_new_points(
    world: tuple[RunningDaemon, Mlflow],
) -> None:
    daemon, mlflow = world
    token = issue_token(daemon, "rita", "researcher", project=PROJECT)
    first = import_mlflow(daemon, token, mlflow.uri, *VERSIONS)
    assert first.code == 0, first.stderr
    assert (first.json()["new"], first.json()["unchanged"], first.json()["points_added"]) == (3, 0, 10), first.stdout
    runs = imported_runs(daemon)
    assert len(runs) == 3
    statuses = sorted(r["status"] for r in runs.values())
    assert statuses == ["completed", "failed", "unknown"], statuses  # RUNNING: BashGym cannot watch it, so unknown
    done = next(r for r in runs.values() if r["status"] == "completed")
    assert done["context_status"] == "verified" and done["model_version_id"] == "tiny-v1"
    assert done["config"]["lane"] == "imported"
    provenance = done["config"]["provenance"]
    assert (provenance["system"], provenance["tracking_uri"], provenance["project"]) == ("mlflow", mlflow.uri, PROJECT)
    [values] = done["imported"]
    assert values["params"] == {"lr": "0.001", "epochs": "3"} and values["tags"]["team"] == "nlp"
    assert done["tags"]["team"] == "nlp"  # the run's tags, read as every run's are (ledger/tags.py)
    assert values["artifacts"] == [{"path": "reports/notes.txt", "size_bytes": 5}]
    assert values["metric_names"] == {"train_loss": "train loss"} and values["experiment_name"] == "sft sweep"
    assert done["loss"] == [(s, pytest.approx(1.0 / (s + 1))) for s in range(5)]  # as MLflow's store keeps them

    again = import_mlflow(daemon, token, mlflow.uri, *VERSIONS)
    assert again.code == 0, again.stderr
    assert (again.json()["new"], again.json()["updated"], again.json()["unchanged"]) == (0, 0, 3), again.stdout
    assert again.json()["points_added"] == 0
    assert imported_runs(daemon) == runs  # nothing added: no run, no event, no point

    mlflow.script("finish", mlflow.running_run)
    grown = import_mlflow(daemon, token, mlflow.uri, *VERSIONS)
    assert (grown.json()["updated"], grown.json()["unchanged"], grown.json()["points_added"]) == (1, 2, 2), grown.stdout
    finished = imported_runs(daemon)[mlflow.running_run]
    assert finished["status"] == "completed" and [s for s, _ in finished["loss"]] == [0, 1, 2, 3, 4]
    assert len(finished["imported"]) == 2  # its values changed (status, end time): recorded again, once


def test_an_imported_run_is_never_evidence(world: tuple[RunningDaemon, Mlflow]) -> None:
    daemon, mlflow = world
    token = issue_token(daemon, "lee", "lead", project=PROJECT)
    assert import_mlflow(daemon, token, mlflow.uri, *VERSIONS).code == 0
    done = next(r for r in imported_runs(daemon).values() if r["status"] == "completed")
    env = {**daemon.env(), "BASHGYM_TOKEN": token}
    gate = cli(env, "--json", "promote", "gate", "--project", PROJECT, "--run", done["run_id"])
    assert "imported_run" in [b["code"] for b in gate.json()["blockers"]], gate.stdout
    model = cli(
        env, "model", "register", "--project", PROJECT, "--run", done["run_id"], "--model", "m", "--version", "v"
    )
    assert model.code == 7 and "imported from mlflow" in model.stderr, model.stderr


def test_without_versions_the_runs_are_kept_under_unassigned(world: tuple[RunningDaemon, Mlflow]) -> None:
    daemon, mlflow = world
    token = issue_token(daemon, "una", "researcher")
    answer = import_mlflow(daemon, token, mlflow.uri)
    assert answer.code == 0, answer.stderr
    assert answer.json()["recorded_in"] == ["unassigned"] and "--model-version" in answer.stderr
    kept = imported_runs(daemon, "unassigned")
    assert len(kept) == 3 and {r["config"]["provenance"]["project"] for r in kept.values()} == {PROJECT}


def test_tokens_that_may_not_write_the_project_and_oversized_bodies_are_refused(
    world: tuple[RunningDaemon, Mlflow],
) -> None:
    daemon, mlflow = world
    before = len(imported_runs(daemon))
    viewer = issue_token(daemon, "vic", "viewer", project=PROJECT)
    refused = import_mlflow(daemon, viewer, mlflow.uri, *VERSIONS)
    assert refused.code == 4 and "ledger.write" in refused.stderr, refused.stderr
    elsewhere = issue_token(daemon, "eve", "researcher", workspace="ws-other")
    assert import_mlflow(daemon, elsewhere, mlflow.uri, *VERSIONS).code in {4, 5}
    researcher = issue_token(daemon, "rob", "researcher", project=PROJECT)
    path = f"/v1/projects/{PROJECT}/imports/mlflow"
    run = {"source_run_id": "r1", "status": "FINISHED"}
    body = {"tracking_uri": mlflow.uri, "experiment_id": "1", "experiment_name": "x", "runs": [run]}
    with tenant(daemon, researcher) as rob:
        huge = rob.post(
            path, content=b"{" + b" " * (100 * 1024 * 1024) + b"}", headers={"content-type": "application/json"}
        )
        assert huge.status_code == 413, huge.text
        points = [{"metric": "loss", "step": s, "value": 1.0} for s in range(5001)]
        two = {**body, "runs": [{**run, "points": points}, {**run, "source_run_id": "r2", "points": points}]}
        assert rob.post(path, json=two).status_code == 422  # 10,002 points: past one batch's bound
        many = {**body, "runs": [{**run, "source_run_id": f"r{i}"} for i in range(51)]}
        assert rob.post(path, json=many).status_code == 422
    assert len(imported_runs(daemon)) == before


def test_an_absent_experiment_or_server_says_what_to_do(world: tuple[RunningDaemon, Mlflow]) -> None:
    daemon, mlflow = world
    token = issue_token(daemon, "nina", "researcher", project=PROJECT)
    missing = import_mlflow(daemon, token, mlflow.uri, experiment="no such")
    assert missing.code == 5 and "no such" in missing.stderr and "mlflow experiments search" in missing.stderr
    nobody = import_mlflow(daemon, token, f"http://user:s3cret@127.0.0.1:{_free_port()}")
    assert nobody.code == 8 and "did not answer" in nobody.stderr, nobody.stderr
    assert "s3cret" not in nobody.stderr + nobody.stdout
