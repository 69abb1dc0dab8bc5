"""The environment of a tracked run (issue 53, item 6): the script's process measures it, the daemon digests it
(a caller's digest is never taken), `bashgym run show` and the MCP run answer show it, and a comparison of two runs
names the facts in which their environments differ. Hostile environments are refused with a researcher's token."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from bashgym import track
from bashgym.agents.compact import run as compact_run

from tests.e2e.tracking.test_track_client import PROJECT, VERSIONS, workspace
from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import suite
from tests.support.helpers import RunningDaemon, cli

P = f"/v1/projects/{PROJECT}"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with workspace(tmp_path_factory.mktemp("environment")) as running:
        yield running


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    return issue_token(daemon, "rita", "researcher", project=PROJECT)


@pytest.fixture(autouse=True)
def user_home(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BASHGYM_HOME", str(tmp_path))  # the spool of the user's process; the daemon's home is its own


def environment(torch: str = "2.13.0", **changes: Any) -> dict[str, Any]:
    facts = {
        "python": "3.11.7",
        "implementation": "CPython",
        "os": "Linux 6.8.0",
        "machine": "x86_64",
        "packages": {"torch": torch, "transformers": "5.24.0", "trl": "1.16.0", "peft": "0.21.2"},
        "cuda": "12.4",
        "driver": "550.54",
        "accelerators": ["NVIDIA H100 80GB HBM3"],
        "git": {"commit": "c0ffee" * 6 + "c0ff", "dirty": True},
        "hostname": "node-7",
    }
    return {**facts, **changes}


def digest_of(facts: dict[str, Any]) -> str:
    """The digest as documented (docs/tracking.md), computed here independently: all facts but the hostname."""
    kept = {k: v for k, v in facts.items() if k != "hostname"}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def opened(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.post("/v1/tracked-runs", params=VERSIONS, json=body)


def context_digest(daemon: RunningDaemon, run: dict[str, Any]) -> str:
    with daemon.client() as admin:
        listed = admin.get(f"{P}/context").json()
    environments = {e["environment_id"]: e["runtime_digest"] for e in listed["lineage"]["environments"]}
    return environments[run["environment_id"]]


def test_a_tracked_run_shows_the_environment_its_script_measured_and_the_daemons_digest(
    daemon: RunningDaemon, rita: str
) -> None:
    with track.start_run(**VERSIONS, api=daemon.url, token=rita, interval_s=0.05) as run:
        run.log_metrics({"loss": 1.0}, step=1)
    with daemon.client() as admin:
        record = admin.get(f"{P}/runs/{run.run_id}").json()
    measured = record["environment"]
    assert (measured["measured_by"], measured["recorded_by"]) == ("tracking client", "rita")
    from importlib import metadata

    assert measured["environment"]["packages"]["torch"] == metadata.version("torch")
    assert measured["environment"]["git"]["commit"]  # the suite runs inside BashGym's repository
    assert measured["digest"] == digest_of(measured["environment"])
    assert context_digest(daemon, record) == measured["digest"]  # the run's environment_runtime_digest
    assert measured["planned_digest"] != measured["digest"]  # the daemon's own runtime, which it did not run on

    text = cli({**daemon.env(), "BASHGYM_TOKEN": rita}, "run", "show", "--project", PROJECT, run.run_id)
    assert text.code == 0, text.stderr
    line = " ".join(next(ln for ln in text.stdout.splitlines() if "environment" in ln and "python" in ln).split())
    assert f"torch {metadata.version('torch')}" in line and "measured by the tracking client (rita)" in line, line
    assert measured["digest"][:12] in text.stdout
    as_json = cli({**daemon.env(), "BASHGYM_TOKEN": rita}, "run", "show", "--project", PROJECT, run.run_id, "--json")
    assert as_json.json()["environment"]["digest"] == measured["digest"]
    assert compact_run(record)["environment"] == {
        "digest": measured["digest"],
        "measured_by": "tracking client",
        "summary": measured["summary"],
    }


def test_two_runs_on_different_torch_versions_compare_with_the_difference_named(
    daemon: RunningDaemon, rita: str
) -> None:
    with tenant(daemon, rita) as researcher:
        first = opened(researcher, {"environment": environment("2.13.0")})
        second = opened(researcher, {"environment": environment("2.12.1", hostname="node-9")})
        assert first.status_code == second.status_code == 201, (first.text, second.text)
        runs = [first.json()["run_id"], second.json()["run_id"]]
    with daemon.client() as admin:  # results recorded elsewhere: the admin holds evidence.import
        assert admin.post(f"{P}/eval-suites", json=suite("env-suite")).status_code == 201
        for run_id in runs:
            result = {"suite_id": "env-suite", "run_id": run_id, "metrics": {"pass_at_1": 0.5}, "sample_count": 4}
            assert admin.post(f"{P}/eval-results", json=result).status_code == 201
    env = {**daemon.env(), "BASHGYM_TOKEN": rita}
    compared = cli(env, "ledger", "compare", "--project", PROJECT, "--run", runs[0], "--run", runs[1])
    assert compared.code == 0, compared.stderr
    assert f"environments differ: {runs[1]} vs {runs[0]}: torch 2.12.1 vs 2.13.0" in compared.stdout
    as_json = cli(env, "ledger", "compare", "--project", PROJECT, "--run", runs[0], "--run", runs[1], "--json")
    environments = as_json.json()["environments"]
    assert environments["same"] is False
    assert environments["differences"] == {runs[1]: ["torch 2.12.1 vs 2.13.0"]}  # the host's name is not a difference
    assert environments["digests"] == {
        runs[0]: digest_of(environment("2.13.0")),
        runs[1]: digest_of(environment("2.12.1")),
    }


@pytest.mark.parametrize(
    "body",
    [
        {"environment": environment(), "environment_runtime_digest": "0" * 64},
        {"environment": {**environment(), "digest": "0" * 64}},
        {"environment": environment(packages={"torch": {"nested": [[["junk"]]]}})},
        {"environment": environment(packages={f"pkg{i}": "1.0" for i in range(500)})},
        {"environment": environment(os="Linux\n\x1b[31mforged")},
        {"environment": environment(git={"commit": "$(reboot)", "dirty": False})},
    ],
    ids=["caller-digest", "digest-in-facts", "nested-junk", "too-many-packages", "control-characters", "bad-commit"],
)
def test_a_hostile_environment_is_refused_and_opens_no_run(daemon: RunningDaemon, rita: str, body: dict) -> None:
    with daemon.client() as admin:
        before = len(admin.get(f"{P}/runs").json())
    with tenant(daemon, rita) as researcher:
        answer = opened(researcher, body)
    assert answer.status_code == 422, answer.text
    with daemon.client() as admin:
        assert len(admin.get(f"{P}/runs").json()) == before


def test_ten_megabytes_of_environment_are_refused_before_they_are_parsed(daemon: RunningDaemon, rita: str) -> None:
    with tenant(daemon, rita) as researcher:
        answer = opened(researcher, {"environment": environment(os="x" * 10_000_000)})
    assert answer.status_code == 413, answer.text
