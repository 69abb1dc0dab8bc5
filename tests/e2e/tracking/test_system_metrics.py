"""System metrics and trackers beside the ledger (issue 53, items 5 and 7), against one real daemon on loopback.

A tracked run records system.* series (this process's CPU and memory, read by psutil) at its logged steps, and the
run's page shows them in a System section of their own. A launch that names a tracker the operator has not
configured is refused at plan time saying what to set, and the operator's tracker secret appears in no answer, no
event and no byte of the ledger."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bashgym import track
from bashgym.trainers.tiny import build_tiny

from tests.e2e.tracking.test_track_client import PROJECT, VERSIONS, points, researcher
from tests.support.factories import sft_data, training_request
from tests.support.helpers import RunningDaemon, eventually, register_versions, running_daemon

WANDB_KEY = "wandb-" + "Wq9" * 12  # the operator's W&B key: shaped like one, never real


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """MLflow configured (a file store); W&B's key set but no project; Trackio not configured."""
    root = tmp_path_factory.mktemp("system")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    env = {"BASHGYM_MLFLOW_TRACKING_URI": (root / "mlruns").as_uri(), "WANDB_API_KEY": WANDB_KEY}
    with running_daemon(root / "home", env=env) as running:
        with running.client() as admin:
            assert admin.post("/v1/projects", json={"project_id": PROJECT, "name": PROJECT}).status_code == 201
        register_versions(running, PROJECT, root / "model", sft_data(root, rows=4))
        yield running


@pytest.fixture(autouse=True)
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BASHGYM_HOME", str(tmp_path))  # the user's home here; the daemon's is its own


def test_a_tracked_run_records_system_series_at_its_steps_and_its_page_shows_them_apart(
    daemon: RunningDaemon,
) -> None:
    token = researcher(daemon, "sia")
    with track.start_run(**VERSIONS, api=daemon.url, token=token, interval_s=0.05, system_metrics_s=0.05) as run:
        for step in range(3):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
            assert run.system is not None
            eventually(f"a system sample at step {step}", lambda: run.system.last_step == step)  # noqa: B023
    cpu = points(daemon, run.run_id, "system.cpu_percent")
    memory = points(daemon, run.run_id, "system.memory_rss_mb")
    assert [step for step, _ in cpu] == [0, 1, 2] and all(value >= 0 for _, value in cpu), cpu
    assert [step for step, _ in memory] == [0, 1, 2] and all(value > 1 for _, value in memory), memory
    for metric in ("system.host_cpu_percent", "system.host_memory_percent"):
        assert len(points(daemon, run.run_id, metric)) == 3, metric

    with daemon.client() as admin:
        link = admin.post("/v1/ui/links").json()["url"]
    with httpx.Client(base_url=daemon.url) as browser:
        assert browser.get("/ui/signin?" + link.split("?", 1)[1]).status_code == 303
        page = browser.get(f"/ui/p/{PROJECT}/runs/{run.run_id}")
    assert page.status_code == 200, page.text
    training, _, system = page.text.partition("<h2>System</h2>")
    assert system, "the run's page has a System section"
    assert "<figcaption>loss</figcaption>" in training and "<figcaption>system." not in training
    for metric in ("system.cpu_percent", "system.memory_rss_mb", "system.host_cpu_percent"):
        assert f"<figcaption>{metric}</figcaption>" in system, metric


def test_a_tracker_the_operator_has_not_configured_is_refused_at_plan_time_naming_what_to_set(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    tiny = build_tiny(tmp_path / "tiny")
    data = sft_data(tmp_path)
    with daemon.client() as admin:
        for tracker, needs in (("wandb", "BASHGYM_WANDB_PROJECT"), ("trackio", "BASHGYM_TRACKIO_DIR")):
            request = training_request(tiny, data, report_to=[tracker])
            plan = admin.post("/v1/training/plan", json=request)
            assert plan.status_code == 200, plan.text
            answer = plan.json()
            assert answer["ready"] is False, answer
            said = " ".join(str(reason) for reason in answer["reasons"])
            assert f"report_to names {tracker}" in said and needs in said, said
            started = admin.post("/v1/training/start", json=request)
            assert started.status_code == 422 and needs in started.text, started.text
            assert WANDB_KEY not in plan.text + started.text

        # MLflow is configured; the trainer's Python needs the package too (none in .venv: refused, naming it).
        plan = admin.post("/v1/training/plan", json=training_request(tiny, data, report_to=["mlflow"])).json()
        said = " ".join(str(reason) for reason in plan["reasons"])
        assert "BASHGYM_MLFLOW_TRACKING_URI" not in said, said
        if importlib.util.find_spec("mlflow") is None:
            assert plan["ready"] is False and "report_to mlflow needs the mlflow package" in said, said
        else:
            assert plan["ready"] is True, said

        unknown = admin.post("/v1/training/plan", json=training_request(tiny, data, report_to=["neptune"]))
        assert unknown.status_code == 422 and "report_to" in unknown.text, unknown.text
        events = admin.get(f"/v1/projects/{PROJECT}/events", params={"limit": 1000})
        assert WANDB_KEY not in events.text
        runs = admin.get(f"/v1/projects/{PROJECT}/runs").json()
    assert [r for r in runs if r["method"] != "custom"] == [], "a refused launch registered no run (tracked ones only)"
    for path in daemon.home.glob("ledger.sqlite3*"):
        assert WANDB_KEY.encode() not in path.read_bytes()
