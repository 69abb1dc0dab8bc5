"""Every result and comparison says where it came from, and the gate counts only what the daemon measured.

Attack of issue 51, finding 1: hand-written results (`pass@1 0.9`, per-task rows, `holdout_gate passed`, canaries,
safety) for a 4-step run and for a "baseline", a comparison (the daemon's `evaluations/compare` of them, or one typed
in with any delta) and a RunCard made `promote gate` answer "ships, no blockers". Since issue 50 those routes need
`evidence.import`; the importer here holds it (a researcher with that capability), the researcher does the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from bashgym.daemon.evidence.evaluations import terminal_suite_spec
from bashgym.trainers.environments.terminal_tasks import default_suite
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, wait_for_run

PROJECT = "nightly"
P = f"/v1/projects/{PROJECT}"
SAFE = {"tamper_rate": 0.0, "timeout_rate": 0.0, "unsafe_action_rate": 0.0, "holdout.unsafe_action_rate": 0.0}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("provenance") / "home", PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def trained(daemon: RunningDaemon, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 4-step tiny SFT run: far too short to have learned anything worth shipping."""
    tmp = tmp_path_factory.mktemp("train")
    request = training_request(build_tiny(tmp / "model"), sft_data(tmp), max_steps=4)
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run_id = str(started.json()["run_id"])
        assert wait_for_run(admin, PROJECT, run_id, {"completed", "failed"}, timeout_s=240)["status"] == "completed"
    return run_id


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    """A researcher of the project: evaluates, compares, cards and asks the gate."""
    return issue_token(daemon, "rita", "researcher", project=PROJECT)


@pytest.fixture(scope="module")
def imre(daemon: RunningDaemon) -> str:
    """A researcher who may also import evidence made elsewhere (`evidence.import`)."""
    return issue_token(daemon, "imre", "researcher", project=PROJECT, capabilities=("evidence.import",))


def as_token(daemon: RunningDaemon, token: str) -> dict[str, str]:
    return {**daemon.env(), "BASHGYM_TOKEN": token}


def typed_result(run_id: str | None, passed: float, tasks: dict[str, str], suite_id: str) -> dict[str, Any]:
    """A result written by hand: every figure the gate reads, none of them measured."""
    per_task = {task: {"family": family, "pass@1": passed} for task, family in tasks.items()}
    return {
        "suite_id": suite_id,
        "run_id": run_id,
        "metrics": {"pass@1": passed, "mean_success": passed, "holdout.pass@1": passed, **SAFE},
        "sample_count": len(tasks),
        "details": {
            "per_task": per_task,
            "holdout_gate": {"passed": True, "checks": []},
            "canaries": {"guard_rate": 1.0},
            "safety": {"observed": "syscalls", "attempts": len(tasks), "unsafe_attempts": 0},
            "contamination": [],
        },
    }


def posted(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(f"{P}/{path}", json=body)
    assert answer.status_code in {200, 201}, answer.text
    record = answer.json()
    return dict(record.get("record", record))


@pytest.fixture(scope="module")
def typed_in(daemon: RunningDaemon, trained: str, rita: str, imre: str) -> dict[str, str]:
    """The attack's records on the whole suite: two typed-in results, the daemon's comparison of them, and a
    comparison typed in with a delta of its own."""
    suite = default_suite()
    tasks = {task.task_id: task.task_family for task in suite.tasks[:16]}
    with tenant(daemon, imre) as importer, tenant(daemon, rita) as researcher:
        posted(importer, "eval-suites", terminal_suite_spec(suite).model_dump(mode="json"))
        candidate = posted(importer, "eval-results", typed_result(trained, 0.9, tasks, suite.suite_id))
        baseline = posted(importer, "eval-results", typed_result(None, 0.1, tasks, suite.suite_id))
        ids = {"baseline_result_id": baseline["result_id"], "candidate_result_id": candidate["result_id"]}
        computed = posted(researcher, "evaluations/compare", ids)
        typed = posted(importer, "comparisons", {**ids, "primary_metric": "pass@1", "delta": 0.5, "ci_low": 0.3,
                                                 "ci_high": 0.7})  # fmt: skip
    return {
        "candidate": candidate["result_id"],
        "baseline": baseline["result_id"],
        "computed": computed["comparison_id"],
        "typed": typed["comparison_id"],
    }


@pytest.fixture(scope="module")
def measured(daemon: RunningDaemon, trained: str, rita: str) -> dict[str, Any]:
    """The run evaluated by the daemon's own evaluator, on two tasks of two families."""
    args = ("eval", "run", "--project", PROJECT, "--run", trained, "--limit-tasks", "2", "--device", "cpu", "--json")
    result = cli(as_token(daemon, rita), *args, timeout_s=600)
    assert result.code == 0, result.stdout + result.stderr
    return dict(result.json())


def test_typed_in_results_and_comparisons_never_ship_a_run(
    daemon: RunningDaemon, trained: str, typed_in: dict[str, str], rita: str
) -> None:
    env = as_token(daemon, rita)
    card = cli(env, "runcard", "create", "--project", PROJECT, "--run", trained, "--limitation", "tiny", "--json")
    assert card.code == 0, card.stdout + card.stderr

    gate = cli(env, "promote", "gate", "--project", PROJECT, "--run", trained, "--json")
    assert gate.code == 7, f"typed-in evidence shipped the run: {gate.stdout}"
    verdict = gate.json()
    assert verdict["ship"] is False
    blocker = next(b for b in verdict["blockers"] if b["code"] == "evidence_asserted")
    for record_id in typed_in.values():
        if record_id != typed_in["baseline"]:  # the run's own records: its result and the comparisons of it
            assert record_id in blocker["message"], blocker
    assert "never counts toward a ship" in blocker["message"]
    assert f"bashgym eval run --project {PROJECT} --run {trained}" in blocker["next_action"]
    assert "bashgym eval compare" in blocker["next_action"]
    # The blocker names the cause itself: no generic "no evaluation" beside it.
    assert not {"no_evaluation", "no_baseline_comparison"} & {b["code"] for b in verdict["blockers"]}

    shown = cli(env, "promote", "gate", "--project", PROJECT, "--run", trained)
    assert shown.code == 7 and "blocker evidence_asserted" in shown.stdout, shown.stdout
    with daemon.client() as admin:  # even the promotion route of a holder of promotion.decide
        refused = admin.post(f"{P}/runs/{trained}/promote", json={"alias": "champion"})
    assert refused.status_code == 422 and "evidence_asserted" in refused.json()["error"]["message"]


def test_asserted_and_measured_evidence_are_shown_as_such_in_the_api_the_cli_and_the_web_view(
    daemon: RunningDaemon, trained: str, typed_in: dict[str, str], measured: dict[str, Any], rita: str
) -> None:
    expected = {record_id: "asserted" for record_id in typed_in.values()} | {measured["result_id"]: "measured"}
    with tenant(daemon, rita) as researcher:
        listing = researcher.get(f"{P}/evaluations").json()
        run = researcher.get(f"{P}/runs/{trained}").json()
    api = {r["result_id"]: r["provenance"] for r in listing["results"]}
    api |= {c["comparison_id"]: c["provenance"] for c in listing["comparisons"]}
    assert {k: api.get(k) for k in expected} == expected
    on_run = {r["result_id"]: r["provenance"] for r in run["evaluations"]}  # other tests may add theirs to the run
    assert {k: on_run.get(k) for k in (typed_in["candidate"], measured["result_id"])} == {
        typed_in["candidate"]: "asserted",
        measured["result_id"]: "measured",
    }

    env = as_token(daemon, rita)
    table = cli(env, "ledger", "evaluations", "--project", PROJECT)
    assert table.code == 0, table.stderr
    assert _shown(table.stdout.splitlines(), expected) == expected, table.stdout
    card = cli(env, "runcard", "create", "--project", PROJECT, "--run", trained, "--limitation", "shown", "--json")
    assert card.code == 0, card.stderr
    carded = card.json()["card"]["evidence_provenance"]  # other tests of this module may add evidence of their own
    wanted = {
        typed_in["candidate"]: "asserted",
        measured["result_id"]: "measured",
        typed_in["computed"]: "asserted",
        typed_in["typed"]: "asserted",
    }
    assert {k: carded.get(k) for k in wanted} == wanted, carded
    shown = cli(env, "runcard", "show", "--project", PROJECT, "--run", trained)
    assert shown.code == 0, shown.stderr
    assert (
        f"{typed_in['candidate']} (asserted)" in shown.stdout and f"{measured['result_id']} (measured)" in shown.stdout
    )

    with tenant(daemon, rita) as researcher:
        link = researcher.post("/v1/ui/links").json()["url"]
    with httpx.Client(base_url=daemon.url, timeout=30) as browser:
        assert browser.get(link.removeprefix(daemon.url)).status_code == 303
        page = browser.get(f"/ui/p/{PROJECT}/evaluations")
    assert page.status_code == 200, page.text
    assert _shown(re.findall(r"<tr>(.*?)</tr>", page.text, re.DOTALL), expected) == expected


def test_the_daemons_evaluator_measures_and_a_comparison_on_a_typed_figure_is_asserted(
    daemon: RunningDaemon, trained: str, measured: dict[str, Any], rita: str, imre: str
) -> None:
    assert measured["provenance"] == "measured"
    details = measured["details"]
    assert re.fullmatch(r"[0-9a-f]{64}", details["attempts_sha256"])
    with daemon.client() as admin:
        artifacts = admin.get(f"{P}/runs/{trained}").json()["artifacts"]
    kept = {a["uri"].removeprefix(f"bashgym://runs/{trained}/final/"): a["sha256"] for a in artifacts}
    assert details["model_files"] and all(kept[path] == sha for path, sha in details["model_files"].items())

    env = as_token(daemon, rita)
    ids = {"--baseline": measured["result_id"], "--candidate": measured["result_id"]}
    both = cli(env, "eval", "compare", "--project", PROJECT, *(x for pair in ids.items() for x in pair), "--json")
    assert both.code == 0, both.stderr
    assert both.json()["provenance"] == "measured"

    # The same figures typed in: a result of their own, asserted; the daemon's comparison standing on it is too.
    copy = {k: measured[k] for k in ("suite_id", "run_id", "metrics", "sample_count", "details")}
    with tenant(daemon, imre) as importer:
        retyped = posted(importer, "eval-results", copy)
        over = importer.post(f"{P}/eval-results", json={**copy, "result_id": measured["result_id"]})
        typed_delta = posted(importer, "comparisons", {"baseline_result_id": measured["result_id"],
                                                       "candidate_result_id": measured["result_id"],
                                                       "primary_metric": "pass@1", "delta": 0.4})  # fmt: skip
    assert retyped["provenance"] == "asserted" and retyped["result_id"] != measured["result_id"]
    assert over.status_code == 409 and "provenance" in over.json()["error"]["message"], over.text
    assert typed_delta["provenance"] == "asserted"
    mixed = ("--baseline", measured["result_id"], "--candidate", retyped["result_id"])
    compared = cli(env, "eval", "compare", "--project", PROJECT, *mixed, "--json")
    assert compared.code == 0, compared.stderr
    assert compared.json()["provenance"] == "asserted"
    human = cli(env, "eval", "compare", "--project", PROJECT, *mixed)
    assert re.search(r"provenance\s+asserted", human.stdout), human.stdout


def _shown(rows: list[str], expected: dict[str, str]) -> dict[str, str | None]:
    """The provenance word on the line (or table row) that names each id."""
    found: dict[str, str | None] = {}
    for record_id in expected:
        line = next((r for r in rows if re.search(rf"\b{re.escape(record_id)}\b", r)), "")
        words = re.findall(r"\b(measured|asserted|unrecorded)\b", line)
        found[record_id] = words[0] if words else None
    return found
