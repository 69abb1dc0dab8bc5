"""Evaluations task by task in the web view and its API: a measured result's families, tasks and samples (command,
exit code, verifier verdict, transcript), a comparison's flipped tasks, and a compare page's evaluations with their
CIs and each run's gate verdict; read only where the session's or token's grants reach."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from bashgym.daemon.evidence.evaluations import terminal_suite_spec
from bashgym.trainers.environments.terminal_tasks import default_suite

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import suite, tracking_context
from tests.support.helpers import RunningDaemon, cli, daemon_with_project

PROJECT = "nightly"
P = f"/v1/projects/{PROJECT}"
SUITE = default_suite()
FAMILIES = sorted({task.task_family for task in SUITE.tasks})[:4]
TASKS = {  # two tasks of each of four families: the paired bootstrap clusters by family
    task.task_id: task.task_family
    for family in FAMILIES
    for task in [t for t in SUITE.tasks if t.task_family == family][:2]
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("evaluation-pages") / "home", PROJECT) as running:
        with running.client() as admin:
            spec = terminal_suite_spec(SUITE).model_dump(mode="json")
            assert admin.post(f"{P}/eval-suites", json=spec).status_code in {200, 201}
        yield running


@pytest.fixture(scope="module")
def gold(daemon: RunningDaemon) -> dict[str, Any]:
    """A measured result: the gold solutions of two tasks, run in the sandbox by the daemon's evaluator."""
    with daemon.client() as admin:
        return evaluated(admin, {"gold": True, "limit_tasks": 2})


def evaluated(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    started = client.post(f"{P}/evaluations", json=body)
    assert started.status_code == 202, started.text
    deadline = time.monotonic() + 240
    while (job := client.get(f"{P}/evaluations/{started.json()['evaluation_id']}").json())["status"] not in {
        "completed",
        "failed",
    }:
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert job["status"] == "completed", job
    return dict(client.get(f"{P}/eval-results/{job['result_id']}").json())


def asserted(client: httpx.Client, run_id: str | None, passes: dict[str, float], **details: Any) -> str:
    """A result typed in (evidence.import): per-task pass@1 as given."""
    per_task = {task: {"family": TASKS[task], "pass@1": value} for task, value in passes.items()}
    mean = sum(passes.values()) / len(passes)
    body = {"suite_id": SUITE.suite_id, "run_id": run_id, "metrics": {"pass@1": mean}, "sample_count": len(passes),
            "details": {"per_task": per_task, **details}}  # fmt: skip
    answer = client.post(f"{P}/eval-results", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["record"]["result_id"])


def compared(client: httpx.Client, baseline: str, candidate: str) -> dict[str, Any]:
    ids = {"baseline_result_id": baseline, "candidate_result_id": candidate, "resamples": 200}
    answer = client.post(f"{P}/evaluations/compare", json=ids)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


@contextlib.contextmanager
def browser(daemon: RunningDaemon, token: str | None = None) -> Iterator[httpx.Client]:
    """A signed-in browser: follows a sign-in link made for `token` (the admin's when None), keeps the cookie."""
    with daemon.client() if token is None else tenant(daemon, token) as client:
        url = client.post("/v1/ui/links").json()["url"]
    with httpx.Client(base_url=daemon.url, timeout=60) as opened:
        assert opened.get(url.removeprefix(daemon.url)).status_code == 303
        yield opened


def test_a_measured_result_shows_each_task_with_its_samples_commands_and_verdicts(
    daemon: RunningDaemon, gold: dict[str, Any]
) -> None:
    result_id = gold["result"]["result_id"]
    tasks = gold["tasks"]
    assert len(tasks) == 2 and all(t["verdict"] == "pass" and t["pass@1"] == 1.0 for t in tasks), tasks
    sample = tasks[0]["sample_rows"][0]
    by_id = {t.task_id: t for t in SUITE.tasks}
    assert sample["command"] == by_id[tasks[0]["task_id"]].gold and sample["exit code"] == 0, sample
    assert sample["verifier"] == "ok" and sample["verdict"] == "pass"
    assert gold["families"] and gold["canaries"]["guard_rate"] == 1.0 and gold["safety"]["attempts"] == 2
    assert "2 samples from the evaluator's attempts file" in gold["samples_note"]
    with browser(daemon) as opened:
        listing = opened.get(f"/ui/p/{PROJECT}/evaluations")
        assert f'href="/ui/p/{PROJECT}/evaluations/{result_id}"' in listing.text
        page = opened.get(f"/ui/p/{PROJECT}/evaluations/{result_id}")
    assert page.status_code == 200, page.text
    text = page.text
    assert "By family" in text and "By task, failed first" in text and "Canaries and safety" in text
    assert f'id="task-{tasks[0]["task_id"]}"' in text and "exit code 0" in text and "verifier ok" in text
    assert html_text(by_id[tasks[0]["task_id"]].gold) in text  # the command, escaped as text


def test_an_evaluation_is_read_only_where_the_grants_reach(daemon: RunningDaemon, gold: dict[str, Any]) -> None:
    result_id = gold["result"]["result_id"]
    outsider = issue_token(daemon, "olga", "researcher", workspace="elsewhere")
    other_project = issue_token(daemon, "pete", "researcher", project="other")
    for token in (outsider, other_project):
        with tenant(daemon, token) as client:
            answer = client.get(f"{P}/eval-results/{result_id}")
            assert answer.status_code in {403, 404} and "sample_rows" not in answer.text, answer.text
    with browser(daemon, other_project) as opened:
        page = opened.get(f"/ui/p/{PROJECT}/evaluations/{result_id}")
        assert page.status_code == 403 and "exit code" not in page.text
    with daemon.client() as admin:
        unknown = admin.get(f"{P}/eval-results/evalres-nope")
        assert unknown.status_code == 404 and "evalres-nope" in unknown.text
        odd = admin.get(f"{P}/eval-results/..%2Fetc")
        assert odd.status_code in {404, 422}


def test_an_imported_result_opens_no_attempts_file_whatever_digest_it_names(
    daemon: RunningDaemon, gold: dict[str, Any]
) -> None:
    """The attempts file's digest is in the measured result's details; an importer who copies it into their own
    result reads nothing through it: samples are read for measured results only."""
    with daemon.client() as admin:
        measured = admin.get(f"{P}/evaluations").json()["results"]
        source = next(r for r in measured if r["result_id"] == gold["result"]["result_id"])
        digest = source["details"]["attempts_sha256"]
        thief = asserted(admin, None, dict.fromkeys(TASKS, 0.0), attempts_sha256=digest)
        view = admin.get(f"{P}/eval-results/{thief}").json()
    assert all(not t["sample_rows"] for t in view["tasks"]) and "imported" in view["samples_note"], view
    gold_command = gold["tasks"][0]["sample_rows"][0]["command"]
    with browser(daemon) as opened:
        page = opened.get(f"/ui/p/{PROJECT}/evaluations/{thief}")
    assert page.status_code == 200 and html_text(gold_command) not in page.text


def test_a_comparison_lists_the_tasks_that_flipped_regressions_first(daemon: RunningDaemon) -> None:
    names = list(TASKS)
    before = {t: 1.0 if i % 2 == 0 else 0.0 for i, t in enumerate(names)}
    after = {**before, names[0]: 0.0, names[1]: 1.0}
    with daemon.client() as admin:
        made = compared(admin, asserted(admin, None, before), asserted(admin, None, after))
        view = admin.get(f"{P}/comparisons/{made['comparison_id']}").json()
    assert [(f["task"], f["change"]) for f in view["flips"]] == [(names[0], "pass → fail"), (names[1], "fail → pass")]
    assert view["comparison"]["ci_low"] == made["ci_low"] and view["families"], view
    with browser(daemon) as opened:
        page = opened.get(f"/ui/p/{PROJECT}/comparisons/{made['comparison_id']}")
    assert page.status_code == 200 and "Tasks that flipped" in page.text
    assert page.text.index(names[0]) < page.text.index(names[1]) and "pass → fail" in page.text


def test_compare_shows_each_runs_evaluations_the_comparisons_ci_and_the_gates_verdict(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        runs = [
            admin.post(
                "/v1/runs", json={"method": "sft", "tracking_context": tracking_context(project_id=PROJECT)}
            ).json()["record"]["run_id"]
            for _ in range(2)
        ]
        base = asserted(admin, runs[0], dict.fromkeys(TASKS, 0.0))
        cand = asserted(admin, runs[1], {t: 1.0 if i < 6 else 0.0 for i, t in enumerate(TASKS)})
        made = compared(admin, base, cand)
    with browser(daemon) as opened:
        page = opened.get(f"/ui/p/{PROJECT}/compare", params=[("run", runs[0]), ("run", runs[1])])
    assert page.status_code == 200, page.text
    section = page.text[page.text.index("<h2>Evaluations</h2>") :]
    assert base in section and cand in section and made["comparison_id"] in section
    assert f"[{made['ci_low']:.4g}, {made['ci_high']:.4g}]" in section and f"{made['delta']:.4g}" in section
    assert section.count("does not ship") >= 2  # asserted evidence never ships; the gate says why, per run


def html_text(value: str) -> str:
    """`value` as the page writes it: HTML-escaped."""
    return html.escape(value, quote=True)


def test_a_protected_suites_tasks_stay_closed_to_a_reader_without_eval_protected(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        assert admin.post(f"{P}/eval-suites", json=suite("sealed-ui", is_protected=True)).status_code == 201
        body = {"suite_id": "sealed-ui", "metrics": {"pass_at_1": 0.5},
                "details": {"per_task": {"secret-task-7": {"family": "f", "pass@1": 0.0}}}}  # fmt: skip
        result_id = admin.post(f"{P}/eval-results", json=body).json()["record"]["result_id"]
        assert "secret-task-7" in admin.get(f"{P}/eval-results/{result_id}").text  # the admin holds eval.protected
    viewer = issue_token(daemon, "vera", "viewer", project=PROJECT)
    with tenant(daemon, viewer) as client:
        view = client.get(f"{P}/eval-results/{result_id}")
        assert view.status_code == 200 and view.json()["withheld"] and "secret-task-7" not in view.text
    with browser(daemon, viewer) as opened:
        page = opened.get(f"/ui/p/{PROJECT}/evaluations/{result_id}")
    assert page.status_code == 200 and "eval.protected" in page.text and "secret-task-7" not in page.text


def attempts_of(gold: dict[str, Any]) -> tuple[str, str]:
    """The gold result's id and the digest of its attempts file, as its view names them."""
    held = gold["attempts_file"]
    assert held and held["download"] == f"{P}/eval-results/{gold['result']['result_id']}/attempts", held
    return gold["result"]["result_id"], held["sha256"]


def test_a_measured_results_attempts_file_downloads_whole_or_by_range_with_its_recorded_sha256(
    daemon: RunningDaemon, gold: dict[str, Any]
) -> None:
    result_id, digest = attempts_of(gold)
    with daemon.client() as admin:
        whole = admin.get(f"{P}/eval-results/{result_id}/attempts")
        head = admin.get(f"{P}/eval-results/{result_id}/attempts", headers={"Range": "bytes=0-9"})
    assert whole.status_code == 200, whole.text
    assert hashlib.sha256(whole.content).hexdigest() == digest == whole.headers["x-content-sha256"]
    assert whole.headers["repr-digest"] == f"sha-256=:{base64.b64encode(bytes.fromhex(digest)).decode()}:"
    assert f'filename="{result_id}-attempts.jsonl"' in whole.headers["content-disposition"]
    assert whole.headers["content-type"] == "application/octet-stream"
    samples = [json.loads(line) for line in whole.content.splitlines()]
    assert len(samples) == 2 and {s["task_id"] for s in samples} == {t["task_id"] for t in gold["tasks"]}
    assert head.status_code == 206 and head.content == whole.content[:10], head.headers


def test_the_evaluation_page_links_its_attempts_file_and_the_cli_downloads_it_checked(
    daemon: RunningDaemon, gold: dict[str, Any], tmp_path: Any
) -> None:
    result_id, digest = attempts_of(gold)
    link = f"/ui/p/{PROJECT}/evaluations/{result_id}/attempts"
    with browser(daemon) as opened:
        page = opened.get(f"/ui/p/{PROJECT}/evaluations/{result_id}")
        assert f'href="{link}"' in page.text and digest in page.text, page.text
        saved = opened.get(link)
    assert saved.status_code == 200 and hashlib.sha256(saved.content).hexdigest() == digest
    env, out = daemon.env(), tmp_path / "attempts.jsonl"
    first = cli(env, "eval", "download", "--project", PROJECT, result_id, "--out", str(out), "--json")
    assert first.code == 0, first.stderr
    assert first.json()["status"] == "downloaded" and hashlib.sha256(out.read_bytes()).hexdigest() == digest
    again = cli(env, "eval", "download", "--project", PROJECT, result_id, "--out", str(out), "--json")
    assert again.json()["status"] == "unchanged", again.stdout


def test_no_attempts_file_reaches_another_tenant_an_importer_or_a_reader_of_a_protected_suite(
    daemon: RunningDaemon, gold: dict[str, Any], tmp_path: Any
) -> None:
    """Outsiders get nothing; an imported result naming the measured file's digest downloads nothing through it; a
    protected suite's result answers 403 to a viewer before anything says whether a file exists."""
    result_id, digest = attempts_of(gold)
    outsider = issue_token(daemon, "omar", "researcher", workspace="elsewhere")
    other_project = issue_token(daemon, "paul", "researcher", project="other")
    for token in (outsider, other_project):
        with tenant(daemon, token) as client:
            answer = client.get(f"{P}/eval-results/{result_id}/attempts")
            assert answer.status_code in {403, 404} and b"task_id" not in answer.content, answer.text
    with browser(daemon, other_project) as opened:
        page = opened.get(f"/ui/p/{PROJECT}/evaluations/{result_id}/attempts")
        assert page.status_code == 403 and b"task_id" not in page.content
    with daemon.client() as admin:
        thief = asserted(admin, None, dict.fromkeys(TASKS, 1.0), attempts_sha256=digest)
        stolen = admin.get(f"{P}/eval-results/{thief}/attempts")
        assert stolen.status_code == 404 and "measured results only" in stolen.text, stolen.text
        assert admin.get(f"{P}/eval-results/{thief}").json()["attempts_file"] is None
        if admin.get(f"{P}/eval-suites/sealed-dl").status_code == 404:
            assert admin.post(f"{P}/eval-suites", json=suite("sealed-dl", is_protected=True)).status_code == 201
        body = {"suite_id": "sealed-dl", "metrics": {"pass_at_1": 0.5}, "details": {"attempts_sha256": digest}}
        sealed = admin.post(f"{P}/eval-results", json=body).json()["record"]["result_id"]
        assert admin.get(f"{P}/eval-results/{sealed}/attempts").status_code == 404  # held: not measured
    viewer = issue_token(daemon, "vic", "viewer", project=PROJECT)
    with tenant(daemon, viewer) as client:
        assert client.get(f"{P}/eval-results/{result_id}/attempts").status_code == 200  # an open suite's: readable
        closed = client.get(f"{P}/eval-results/{sealed}/attempts")
        assert closed.status_code == 403 and "eval.protected" in closed.text, closed.text
    refused = cli({**daemon.env(), "BASHGYM_TOKEN": outsider}, "eval", "download", "--project", PROJECT, result_id,
                  "--out", str(tmp_path / "taken.jsonl"))  # fmt: skip
    assert refused.code in {4, 5} and not (tmp_path / "taken.jsonl").exists(), refused.stderr
