"""Evaluations in a real headless Chromium: open a measured evaluation of the tiny model, unfold a failed task and read
the command the model produced (shown as text, as the API records it), follow its comparison with the gold solutions
to the tasks that flipped, and compare two runs with their evaluations, the comparison's CI and the gate's verdicts.
Shares test_browser.py's driver; slow (a tiny model evaluated in the sandbox)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.trainers.tiny import build_tiny

from tests.e2e.ui.test_browser import browser, run_with_points, shot, sign_in, until  # noqa: F401 (a fixture)
from tests.e2e.ui.test_evaluation_pages import P, evaluated
from tests.support.helpers import cli, daemon_with_project

pytestmark = pytest.mark.slow


def typed_in(client: httpx.Client, run_id: str, passes: list[float], tasks: list[dict[str, Any]]) -> str:
    per_task = {t["task_id"]: {"family": t["family"], "pass@1": p} for t, p in zip(tasks, passes, strict=True)}
    body = {"suite_id": suite_of(client), "run_id": run_id, "metrics": {"pass@1": sum(passes) / len(passes)},
            "details": {"per_task": per_task}}  # fmt: skip
    answer = client.post(f"{P}/eval-results", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["record"]["result_id"])


def suite_of(client: httpx.Client) -> str:
    return str(client.get(f"{P}/evaluations").json()["suites"][0]["suite_id"])


def test_read_a_failed_tasks_command_and_compare_two_runs_with_their_cis(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    with daemon_with_project(tmp_path / "home") as daemon, daemon.client() as admin:
        model = build_tiny(tmp_path / "tiny")
        registered = cli(daemon.env(), "model", "register", "--project", "nightly", "--model", "tiny", "--version",
                         "tiny-v1", "--dir", str(model))  # fmt: skip
        assert registered.code == 0, registered.stderr
        tiny = evaluated(admin, {"model_version_id": "tiny-v1", "limit_tasks": 4, "max_new_tokens": 8})
        failed = next(t for t in tiny["tasks"] if t["verdict"] == "fail")
        command = failed["sample_rows"][0]["command"]

        sign_in(browser, daemon)
        browser.get(f"{daemon.url}/ui/p/nightly/evaluations")
        browser.find_element(By.LINK_TEXT, tiny["result"]["result_id"]).click()
        until(lambda: "By task, failed first" in browser.page_source, "the evaluation page")
        folded = browser.find_element(By.ID, f"task-{failed['task_id']}")
        shown = folded.find_element(By.CSS_SELECTOR, "pre.command code")
        assert not shown.is_displayed(), "a task's samples start folded"
        folded.find_element(By.TAG_NAME, "summary").click()
        assert until(lambda: shown.is_displayed(), "the failed task's samples unfolded")
        assert shown.get_attribute("textContent") == command  # the model's command, as text, as recorded
        assert "fail" in folded.find_element(By.TAG_NAME, "summary").text
        assert "exit code" in folded.text and "verifier" in folded.text
        browser.execute_script("arguments[0].scrollIntoView()", folded)
        shot(browser, tmp_path, "ui-evaluation")

        # Two runs evaluated on the tiny model's tasks (typed in), compared: the compare page shows the CI.
        runs = [run_with_points(admin, "nightly", 20), run_with_points(admin, "nightly", 20)]
        tasks = tiny["tasks"]
        base = typed_in(admin, runs[0], [0.0] * len(tasks), tasks)
        cand = typed_in(admin, runs[1], [1.0] * (len(tasks) - 1) + [0.0], tasks)
        ids = {"baseline_result_id": base, "candidate_result_id": cand, "resamples": 200}
        made = admin.post(f"{P}/evaluations/compare", json=ids)
        assert made.status_code == 201, made.text
        comparison = made.json()
        browser.get(f"{daemon.url}/ui/p/nightly/compare?run={runs[0]}&run={runs[1]}")
        until(lambda: "Comparisons between these runs" in browser.page_source, "the compare page's evaluations")
        row = browser.find_element(By.XPATH, f"//tr[td/a[text()='{comparison['comparison_id']}']]")
        assert f"[{comparison['ci_low']:.4g}, {comparison['ci_high']:.4g}]" in row.text, row.text
        assert runs[0] in row.text and runs[1] in row.text
        gates = browser.find_elements(By.XPATH, "//td[starts-with(text(), 'does not ship')]")
        assert len(gates) >= 2
        shot(browser, tmp_path, "ui-compare-evaluations")
        row.find_element(By.LINK_TEXT, comparison["comparison_id"]).click()
        until(lambda: "Tasks that flipped" in browser.page_source, "the comparison's flipped tasks")
        assert browser.page_source.count("fail → pass") == len(tasks) - 1
