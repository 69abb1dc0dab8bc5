"""Training data holds no task the run is judged by: no evaluation-suite instance, no task of a held-out family.

Issue 51, item 4: README's SFT recipe (`gold_sft_rows(range(1, 6), exclude=default_suite().tasks)`) held 300 rows
of the 3 held-out families; a run trained on it reported `holdout.pass@1 0.833` as generalisation and nothing
noticed. Rows are now recognised by their text (the instruction's shape, the evaluation instance's instruction and
files), for every method that trains a policy, in a file or a registered dataset version, and refused by
`training validate`, plan and launch alike, before anything trains. Least privilege: a researcher of the project.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.environments.terminal_tasks import (
    TerminalTask,
    default_suite,
    generate_suite,
    gold_sft_rows,
    holdout_families,
    task_prompt,
    training_families,
)
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import session_records, tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project

PROJECT = "nightly"
RECIPES = Path(__file__).resolve().parents[3] / "docs" / "training-methods.md"  # where the docs show the recipe
HELD_OUT = sorted(holdout_families())


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("contamination") / "home", PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    """A researcher of the project: validates, registers data, plans and launches; nothing more."""
    return issue_token(daemon, "rita", "researcher", project=PROJECT)


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def as_rita(daemon: RunningDaemon, token: str) -> dict[str, str]:
    return {**daemon.env(), "BASHGYM_TOKEN": token}


def launch_files(tmp: Path, data: Path, *, version: str) -> list[str]:
    """CLI flags of a short official run of the project: its config and its tracking context (the data's digest)."""
    config = tmp / "config.json"
    config.write_text(json.dumps({"max_steps": 4, "max_seq_length": 128}))
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    context = tmp / "tracking.json"
    context.write_text(json.dumps(tracking_context(dataset_version_id=version, dataset_content_digest=digest)))
    return ["--config", str(config), "--tracking-context", str(context)]


def old_recipe() -> list[dict[str, Any]]:
    """The rows README's recipe made before this fix: every family, the evaluation suite's instances left out."""
    return gold_sft_rows(range(1, 6), exclude=default_suite().tasks)


def held_out_lines(rows: list[dict[str, Any]]) -> dict[int, str]:
    """1-based line -> family of the rows of a held-out family, read from the generator (not from the check)."""
    prompts = {task_prompt(t): t.task_family for seed in range(1, 6) for t in _suite(seed)}
    lines = {}
    for number, row in enumerate(rows, start=1):
        family = prompts[row["messages"][0]["content"]]
        if family in HELD_OUT:
            lines[number] = family
    return lines


def _suite(seed: int) -> list[TerminalTask]:
    return generate_suite(seed=seed, per_family=20)


def no_runs(daemon: RunningDaemon) -> None:
    with daemon.client() as admin:
        listed = admin.get(f"/v1/projects/{PROJECT}/runs")
    assert listed.status_code == 200 and listed.json() == [], listed.text


def test_readme_old_recipe_is_refused_by_validate_plan_and_launch_naming_rows_and_families(
    daemon: RunningDaemon, rita: str, tiny: Path, tmp_path: Path
) -> None:
    rows = old_recipe()
    data = jsonl(tmp_path / "traces.jsonl", rows)
    expected = held_out_lines(rows)
    assert len(expected) == 300 and set(expected.values()) == set(HELD_OUT)
    first_line, first_family = next(iter(expected.items()))

    validated = cli(daemon.env(), "training", "validate", "--method", "sft", "--dataset", str(data))
    assert validated.code == 7, validated.stdout
    assert f"{data}:{first_line} messages.0.content: The row asks a {first_family} task" in validated.stderr
    assert "held_out_family: 300" in validated.stderr and "796 rows" in validated.stderr
    reported = {int(line): family for line, family in re.findall(r":(\d+) messages\.0\.content: The row asks a "
                                                                 r"(\w+) task", validated.stderr)}  # fmt: skip
    assert reported == expected  # every row of a held-out family, by line, with its family; no other row

    env = as_rita(daemon, rita)
    args = ["--method", "sft", "--model", str(tiny), "--dataset-path", str(data)]
    args += launch_files(tmp_path, data, version="traces-v1")
    for command in ("plan", "start"):
        refused = cli(env, "training", command, *args)
        assert refused.code == 7, (command, refused.stdout, refused.stderr)
        said = refused.stdout + refused.stderr
        assert f"The row asks a {first_family} task" in said and "train on the other families" in said, said

    request = training_request(tiny, data)
    with tenant(daemon, rita) as api:
        plan = api.post("/v1/training/plan", json=request)
        assert plan.status_code == 200, plan.text
        assert not plan.json()["ready"]
        assert any("held_out_family: 300" in reason for reason in plan.json()["reasons"]), plan.json()["reasons"]
        started = api.post("/v1/training/start", json=request)
        assert started.status_code == 422, started.text
        assert started.json()["error"]["details"]["summary"] == {"held_out_family": 300}
    no_runs(daemon)


def policy_rows(text: str) -> dict[str, dict[str, Any]]:
    """One row per method that trains a policy, asking `text`."""
    session = session_records(1)[0]
    hinted = session["hint_text"] + text + "\n$ " + session["target_text"] + "\n"
    start = hinted.rindex(session["target_text"])
    return {
        "sft": {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "ls"}]},
        "dpo": {"prompt": text, "chosen": "sort notes.txt", "rejected": "cat notes.txt"},
        "distillation": {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
            "teacher_response": "sort notes.txt",
        },
        "rlvr": {"prompt": text, "verifier": {"kind": "exact_match", "expected": "3"}},
        "session_distillation": {
            **session,
            "original_context": text + "\n$ ",
            "hinted_context": hinted,
            "target_span": {"start": start, "end": start + len(session["target_text"])},
        },
    }


def test_every_policy_method_refuses_evaluation_instances_and_held_out_families(
    daemon: RunningDaemon, rita: str, tiny: Path, tmp_path: Path
) -> None:
    suite = default_suite()
    trained_family = next(t for t in suite.tasks if t.task_family not in HELD_OUT)  # an evaluation instance
    held_out = next(t for seed in (7, 8) for t in _suite(seed) if t.task_family == HELD_OUT[0])  # unseen seed
    cases = {
        "evaluation_task": f"Solve this.\n{task_prompt(trained_family)}",
        "held_out_family": f"You are a shell expert.\n\n{held_out.instruction}",
    }
    with tenant(daemon, rita) as api:
        for code, text in cases.items():
            for method, row in policy_rows(text).items():
                data = jsonl(tmp_path / f"{method}-{code}.jsonl", [row, row])
                plan = api.post("/v1/training/plan", json=training_request(tiny, data, method=method))
                assert plan.status_code == 200, plan.text
                assert any(f"{code}: 2" in r for r in plan.json()["reasons"]), (method, plan.json()["reasons"])
                if code == "held_out_family":  # the CLI's validate, without a daemon, says the same
                    validated = cli(daemon.env(), "training", "validate", "--method", method, "--dataset", str(data))
                    assert validated.code == 7 and f"[{code}]" in validated.stderr, (method, validated.stderr)
        # The same rows without the judged task pass: the check reads the task, not the method or the layout.
        for method, row in policy_rows("Print the current directory.").items():
            data = jsonl(tmp_path / f"{method}-clean.jsonl", [row])
            plan = api.post("/v1/training/plan", json=training_request(tiny, data, method=method))
            assert not any("contract" in r for r in plan.json()["reasons"]), (method, plan.json()["reasons"])
    no_runs(daemon)


def test_a_registered_dataset_version_holding_held_out_rows_is_refused_at_plan_and_launch(
    daemon: RunningDaemon, rita: str, tiny: Path, tmp_path: Path
) -> None:
    rows = [row for row in old_recipe() if "sorted" in row["messages"][0]["content"]][:5]
    data = jsonl(tmp_path / "sorted.jsonl", rows)
    env = as_rita(daemon, rita)
    registered = cli(env, "dataset", "register", "--project", PROJECT, "--dataset", "traces", "--version",
                     "sorted-v1", "--file", str(data))  # fmt: skip
    assert registered.code == 0, registered.stderr  # a dataset version is data, judged when a run trains on it
    args = ["--method", "sft", "--model", str(tiny), "--dataset-version", "sorted-v1", "--dataset-project", PROJECT]
    args += launch_files(tmp_path, data, version="sorted-v1")
    for command in ("plan", "start"):
        refused = cli(env, "training", command, *args)
        assert refused.code == 7, (command, refused.stdout, refused.stderr)
        said = refused.stdout + refused.stderr
        assert "The row asks a sort_lines task" in said and "held_out_family: 5" in said, said
    request = {key: value for key, value in training_request(tiny, data).items() if key != "dataset_path"}
    query = {"dataset_version": "sorted-v1", "dataset_project": PROJECT}
    with tenant(daemon, rita) as api:
        plan = api.post("/v1/training/plan", params=query, json=request)
        assert plan.status_code == 200 and not plan.json()["ready"], plan.text
        started = api.post("/v1/training/start", params=query, json=request)
        assert started.status_code == 422 and "sort_lines" in started.text, started.text
    no_runs(daemon)


def readme_recipes() -> list[str]:
    """Every `gold_sft_rows(...)` expression docs/training-methods.md shows."""
    return re.findall(r"`(gold_sft_rows\(.*?\))`", " ".join(RECIPES.read_text().split()))


def test_readme_recipe_holds_only_trained_families_and_passes_validate_and_plan(
    daemon: RunningDaemon, rita: str, tiny: Path, tmp_path: Path
) -> None:
    recipes = readme_recipes()
    assert recipes, "docs/training-methods.md shows no gold_sft_rows recipe"
    names = {"gold_sft_rows": gold_sft_rows, "default_suite": default_suite, "training_families": training_families,
             "__builtins__": {"range": range}}  # fmt: skip
    for recipe in recipes:
        rows = eval(recipe, names)  # the docs' own text, run as written
        assert rows and not held_out_lines(rows), recipe
        data = jsonl(tmp_path / "recipe.jsonl", rows)
        validated = cli(daemon.env(), "training", "validate", "--method", "sft", "--dataset", str(data))
        assert validated.code == 0, validated.stderr
        with tenant(daemon, rita) as api:
            plan = api.post("/v1/training/plan", json=training_request(tiny, data))
        assert plan.status_code == 200 and plan.json()["ready"], plan.json()["reasons"]


LEGACY = "legacy"  # runs recorded as a daemon from before the check recorded them, in a project of their own


def legacy_run(daemon: RunningDaemon, data: Path) -> str:
    """A completed-looking SFT run whose record is what a launch before this check wrote: the data's path and
    sha256, and no judged_task_check."""
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    context = tracking_context(
        project_id=LEGACY,
        project_display_name="Runs from before the check",
        dataset_version_id=f"old-{digest[:12]}",
        dataset_content_digest=digest,
    )
    body = {
        "method": "sft",
        "tracking_context": context,
        "config": {"dataset_path": str(data), "dataset_sha256": digest},
    }
    with daemon.client() as admin:
        registered = admin.post("/v1/runs", json=body)
    assert registered.status_code == 201, registered.text
    return str(registered.json()["record"]["run_id"])


def blockers_of(daemon: RunningDaemon, run_id: str) -> dict[str, dict[str, Any]]:
    with daemon.client() as admin:
        gate = admin.get(f"/v1/projects/{LEGACY}/runs/{run_id}/gate")
    assert gate.status_code == 200, gate.text
    return {b["code"]: b for b in gate.json()["blockers"]}


def test_a_run_trained_before_the_check_on_judged_tasks_is_blocked_by_the_gate(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    rows = old_recipe()
    data = jsonl(tmp_path / "old-recipe.jsonl", rows)
    run_id = legacy_run(daemon, data)
    first_line, family = min(held_out_lines(rows).items())
    blocker = blockers_of(daemon, run_id)["trained_on_judged_tasks"]
    assert f"old-recipe.jsonl:{first_line}:" in blocker["message"] and family in blocker["message"], blocker
    assert f"trained on {len(held_out_lines(rows))} rows" in blocker["message"], blocker
    assert "bashgym training validate --method sft" in blocker["next_action"], blocker
    gated = cli(daemon.env(), "promote", "gate", "--project", LEGACY, "--run", run_id)
    assert gated.code == 7 and "trained_on_judged_tasks" in gated.stdout + gated.stderr, gated

    data.write_text("")  # other bytes: what it trained on is gone, and the gate says it cannot tell
    changed = blockers_of(daemon, run_id)["training_data_unchecked"]
    assert "not the" in changed["message"] and "Put the exact file back" in changed["next_action"], changed
    data.unlink()
    gone = blockers_of(daemon, run_id)["training_data_unchecked"]
    assert "no longer on this host" in gone["message"], gone


def test_a_run_trained_before_the_check_on_clean_data_and_a_launched_run_pass_it(
    daemon: RunningDaemon, tiny: Path, tmp_path: Path
) -> None:
    clean = jsonl(
        tmp_path / "clean.jsonl",
        gold_sft_rows(range(1, 3), families=training_families(), exclude=default_suite().tasks),
    )
    assert not {"trained_on_judged_tasks", "training_data_unchecked"} & set(
        blockers_of(daemon, legacy_run(daemon, clean))
    )
    # A run the daemon launches records that its launch refused judged rows: the gate does not read its data again.
    context = tracking_context(project_id=LEGACY, project_display_name="Runs from before the check")
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=training_request(tiny, clean, tracking_context=context))
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        admin.post(f"/v1/projects/{LEGACY}/runs/{run_id}/stop")
        run = admin.get(f"/v1/projects/{LEGACY}/runs/{run_id}").json()
    assert run["config"]["judged_task_check"] == "launch", run["config"]
