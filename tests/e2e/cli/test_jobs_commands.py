"""`bashgym jobs ...` and `bashgym compute plan` as a terminal user runs them, against a real daemon and a loopback
provider: exit codes, what is printed, and what the daemon recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.factories import sft_data
from tests.support.finetune_standin import FineTuneStandIn, provider_daemon
from tests.support.helpers import RunningDaemon, cli

KEY = "sk-provider-key-for-cli"
MODEL = "gpt-4o-mini-2024-07-18"

Pair = tuple[FineTuneStandIn, RunningDaemon]


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with provider_daemon(tmp_path_factory.mktemp("jobs-cli") / "home", KEY, (MODEL,)) as pair:
        yield pair


def submit(daemon: RunningDaemon, tmp_path: Path, *extra: str) -> dict[str, object]:
    data = sft_data(tmp_path, rows=4)
    done = cli(
        daemon.env(), "jobs", "provider", "submit", "--provider", "acme", "--method", "sft", "--model", MODEL,
        "--dataset-path", str(data), "--cost-ceiling", "10", "--epochs", "2", "--json", *extra,
    )  # fmt: skip
    assert done.code == 0, done.stderr
    return dict(done.json())


def test_submit_list_show_and_follow_a_provider_job_to_its_end(standins: Pair, tmp_path: Path) -> None:
    provider, daemon = standins
    job = submit(daemon, tmp_path)
    assert job["state"] == "submitted" and job["project_id"] == "unassigned"
    upstream = str(job["upstream_job_id"])
    assert provider.job(upstream)["hyperparameters"]["n_epochs"] == 2

    listed = cli(daemon.env(), "jobs", "list")
    assert listed.code == 0 and str(job["job_id"]) in listed.stdout and "submitted" in listed.stdout
    shown = cli(daemon.env(), "jobs", "show", str(job["job_id"]), "--json")
    assert shown.code == 0 and shown.json()["upstream_job_id"] == upstream

    def finish() -> None:
        time.sleep(1.0)
        provider.advance(upstream, "running", metrics={"step": 1, "train_loss": 0.9})
        time.sleep(1.0)
        provider.advance(upstream, "succeeded")

    threading.Thread(target=finish, daemon=True).start()
    followed = cli(daemon.env(), "jobs", "follow", str(job["job_id"]), timeout_s=60)
    assert followed.code == 0, followed.stderr
    assert "[receipt]" in followed.stdout and "[metric]" in followed.stdout
    assert f"External job {job['job_id']} completed" in followed.stdout


def test_cancel_prints_who_asked_and_a_second_cancel_exits_6(standins: Pair, tmp_path: Path) -> None:
    _provider, daemon = standins
    job = submit(daemon, tmp_path)
    cancelled = cli(daemon.env(), "jobs", "cancel", str(job["job_id"]), "--json")
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.json()["cancel_requested_by"] == "admin"
    deadline = time.monotonic() + 30
    while cli(daemon.env(), "jobs", "show", str(job["job_id"]), "--json").json()["state"] != "cancelled":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    again = cli(daemon.env(), "jobs", "cancel", str(job["job_id"]))
    assert again.code == 6 and "nothing to cancel" in again.stderr


def test_a_method_the_provider_does_not_offer_exits_7_and_submits_nothing(standins: Pair, tmp_path: Path) -> None:
    provider, daemon = standins
    before = len(provider.state.jobs)
    data = sft_data(tmp_path, rows=2)
    refused = cli(
        daemon.env(), "jobs", "provider", "submit", "--provider", "acme", "--method", "grpo", "--model", MODEL,
        "--dataset-path", str(data), "--cost-ceiling", "10",
    )  # fmt: skip
    assert refused.code in {5, 7}, refused.stderr
    assert len(provider.state.jobs) == before


def test_compute_plan_renders_a_dstack_task_records_it_and_says_nothing_ran(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    data = sft_data(tmp_path, rows=2)
    out = tmp_path / "task.yml"
    planned = cli(
        daemon.env(), "compute", "plan", "--engine", "dstack", "--method", "sft", "--model", "acme/tiny",
        "--dataset-path", str(data), "--accelerators", "A100:1", "--launch", "--out", str(out), "--json",
    )  # fmt: skip
    assert planned.code == 0, planned.stderr
    plan = planned.json()
    assert plan["launched"] is False and "nothing ran" in plan["reason"]
    assert out.read_text() == plan["text"] and "python -m bashgym.trainers.external_job" in plan["text"]
    with daemon.client() as client:
        stored = client.get(f"/v1/projects/unassigned/compute-plans/{plan['plan_id']}").json()
    assert stored["plan_digest"] == plan["digest"] and stored["launched_job_id"] is None
