"""SkyPilot and dstack plans, rendered from the launch recipes of the skill bundle users send.

The recipes are read out of skills/training/references/launch-recipes.md: each fenced JSON block and each inline
JSON object of request fields (on an SFT base request), and each `bashgym training start` command (through the
CLI's own parser). The engines' own schema checks run where skypilot or dstack is importable and skip, saying so,
where it is not; launching is tested only where it must refuse (nothing configured here), never for real.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import itertools
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from bashgym.cli.main import build_parser
from bashgym.cli.training import build_request
from bashgym.client.errors import InvalidInput, RuleRejected
from bashgym.daemon.external.engines import checked_plan, launch_plan, validate
from bashgym.daemon.external.plans import (
    CONSTRAINTS_REMOTE,
    REQUEST_REMOTE,
    Engine,
    PlanOptions,
    RenderedPlan,
    default_install_spec,
    render_plan,
    write_plan,
)
from bashgym.trainers.contracts.fields import request_from_recipe
from bashgym.trainers.contracts.request import TrainingRequest
from bashgym.trainers.external_job import _canonical, _digest_text

ROOT = Path(__file__).resolve().parents[3]
RECIPES = ROOT / "skills" / "training" / "references" / "launch-recipes.md"
ENGINES: tuple[Engine, ...] = ("skypilot", "dstack")
LIBRARIES = {"skypilot": "sky", "dstack": "dstack"}
SECRET = "hf_secret_planted_by_the_test"
RUN = "-m bashgym.trainers.external_job --request /bashgym/request.json --workdir /bashgym/out"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
PLACEHOLDERS = {"<model-id>": MODEL, "<device-id>": "gpu1"}
ROWS: dict[str, list[dict[str, Any]]] = {
    "sft": [{"messages": [{"role": "user", "content": "list files"}, {"role": "assistant", "content": "ls -la"}]}],
    "dpo": [{"prompt": "list files", "chosen": "ls -la", "rejected": "rm -rf /"}],
}
# What a recipe's --config file holds: the method fields launch-recipes.md gives for it.
METHOD_FIELDS: dict[str, dict[str, Any]] = {
    "sft": {"num_epochs": 1, "learning_rate": 2e-5, "sft_backend": "auto"},
    "dpo": {"learning_rate": 1e-5, "dpo_beta": 0.1, "dpo_backend": "auto"},
}
TRACKING = {"workspace_id": "team", "project_id": "terminal-agent", "experiment_id": "exp-1"}


def _recipes() -> list[tuple[str, str, str]]:
    """(id, kind, text) of every request recipe in the document: JSON blocks, inline JSON objects, CLI commands."""
    text = RECIPES.read_text()
    found = []
    for index, (lang, body) in enumerate(re.findall(r"```(\w*)\n(.*?)```", text, flags=re.DOTALL)):
        if lang == "json":
            found.append((f"json-block-{index}", "json", body))
        elif lang == "bash" and "bashgym training start" in body:
            found.append((f"cli-{index}", "cli", body))
    fields = set(TrainingRequest.model_fields)
    for index, span in enumerate(re.findall(r"`(\{[^`]*\})`", text)):
        try:
            body = json.loads(span)
        except ValueError:
            continue
        if isinstance(body, dict) and set(body) <= fields:
            found.append((f"inline-{index}", "json", span))
    return found


RECIPE_CASES = _recipes()


def test_the_recipes_are_found_in_the_skill_bundle() -> None:
    kinds = {kind for _, kind, _ in RECIPE_CASES}
    assert kinds == {"json", "cli"}, f"launch-recipes.md changed shape; found {RECIPE_CASES}"


def _jsonl(path: Path, method: str) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS[method]))
    return path


def _from_json(body: str, tmp_path: Path) -> TrainingRequest:
    base = {"method": "sft", "base_model": MODEL, "dataset_path": str(_jsonl(tmp_path / "train.jsonl", "sft"))}
    return request_from_recipe({**base, **json.loads(body)})


def _from_cli(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrainingRequest:
    for placeholder, value in PLACEHOLDERS.items():
        body = body.replace(placeholder, value)
    words = shlex.split(body.replace("\\\n", " "))
    assert words[:3] == ["bashgym", "training", "start"], words
    method = words[words.index("--method") + 1]
    monkeypatch.chdir(tmp_path)  # the recipe names its files relative to where it runs
    for flag, value in itertools.pairwise(words):
        if value.endswith(".jsonl"):
            _jsonl(tmp_path / value, method)
        elif flag == "--config":
            (tmp_path / value).write_text(json.dumps(METHOD_FIELDS[method]))
        elif flag == "--tracking-context":
            (tmp_path / value).write_text(json.dumps(TRACKING))
    args = build_parser().parse_args(words[1:])
    body_fields = build_request(args)
    body_fields["dataset_path"] = str(Path(args.dataset_path).resolve())  # the CLI uploads it; a plan mounts it
    return request_from_recipe(body_fields)


def _request(kind: str, body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrainingRequest:
    return _from_cli(body, tmp_path, monkeypatch) if kind == "cli" else _from_json(body, tmp_path)


def _options(engine: Engine, request: TrainingRequest, tmp_path: Path, **overrides: Any) -> PlanOptions:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    values: dict[str, Any] = {
        "accelerators": f"H100:{request.num_processes}",
        "cpus": "8+",
        "memory": "32+",
        "disk_size_gb": 200,
        "use_spot": True,
        "cloud": "aws",
        "region": "us-east-1",
        "constraints_path": constraints,
        "checkpoint_store": "s3://team-ckpts/run-x" if engine == "skypilot" else "team-ckpts",
        "max_price_per_hour": 4.5,
        "timeout_minutes": 120,
        "plan_dir": tmp_path / "plan",
    }
    return PlanOptions(**{**values, **overrides})


def _render(engine: Engine, request: TrainingRequest, options: PlanOptions) -> RenderedPlan:
    return render_plan(engine, request, options)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("recipe", "kind", "body"), RECIPE_CASES, ids=[case[0] for case in RECIPE_CASES])
def test_each_recipe_renders_a_plan_that_mounts_its_data_and_writes_no_secret(
    engine: Engine, recipe: str, kind: str, body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    request = _request(kind, body, tmp_path, monkeypatch)
    options = _options(engine, request, tmp_path)
    plan = _render(engine, request, options)

    data = Path(request.dataset_path).resolve()
    assert plan.files[str(data)] == f"/bashgym/data/train/{data.name}"
    assert plan.files[str(tmp_path / "plan" / "request.json")] == REQUEST_REMOTE
    assert plan.files[str(tmp_path / "constraints.txt")] == CONSTRAINTS_REMOTE
    if engine == "skypilot":
        _assert_skypilot_task(plan, options)
    else:
        _assert_dstack_task(plan, options)
    _assert_shipped_request(plan, request)
    assert yaml.safe_load(plan.text) == plan.document, "the YAML the engine's CLI reads is the document"
    for shown in (plan.text, json.dumps(plan.document), json.dumps(plan.request), plan.command):
        assert SECRET not in shown
    assert not plan.warnings, "a plan with a checkpoint store keeps its outputs"


def _assert_skypilot_task(plan: RenderedPlan, options: PlanOptions) -> None:
    task = plan.document
    assert task["resources"] == {
        "accelerators": options.accelerators,
        "cpus": "8+",
        "memory": "32+",
        "disk_size": 200,
        "use_spot": True,
        "infra": "aws/us-east-1",
        "max_hourly_cost": 4.5,
    }
    assert task["num_nodes"] == 1
    assert task["secrets"] == {"HF_TOKEN": None}, "named for the engine to inject, never valued"
    assert task["envs"]["BASHGYM_REQUEST_SHA256"] == plan.request_digest
    mounts = task["file_mounts"]
    assert {remote: local for local, remote in plan.files.items()}.items() <= mounts.items()
    assert mounts["/bashgym/out"] == {"source": "s3://team-ckpts/run-x", "mode": "MOUNT_CACHED"}
    assert f"install -c {CONSTRAINTS_REMOTE} '{options.install_spec}'" in task["setup"]
    assert task["run"].startswith("timeout --kill-after=300 7200 ") and RUN in task["run"]
    assert plan.command.endswith(f"sky launch -c {plan.name} --down --secret HF_TOKEN task.yaml")


def _assert_dstack_task(plan: RenderedPlan, options: PlanOptions) -> None:
    task = plan.document
    assert task["type"] == "task" and task["python"] == "3.12"
    gpus = options.accelerators.partition(":")[2] if options.accelerators else ""
    assert task["resources"] == {"gpu": f"H100:{gpus}", "cpu": "8..", "memory": "32GB..", "disk": "200GB"}
    assert (task["spot_policy"], task["max_price"], task["max_duration"]) == ("spot", 4.5, "120m")
    assert (task["backends"], task["regions"], task["nodes"]) == (["aws"], ["us-east-1"], 1)
    assert "HF_TOKEN" in task["env"], "a bare name: dstack takes the value from whoever applies the plan"
    assert f"BASHGYM_REQUEST_SHA256={plan.request_digest}" in task["env"]
    assert task["files"] == [{"local_path": local, "path": remote} for local, remote in plan.files.items()]
    assert task["volumes"] == [{"name": "team-ckpts", "path": "/bashgym/out"}]
    assert task["commands"] == [f"pip install -c {CONSTRAINTS_REMOTE} '{options.install_spec}'", f"python {RUN}"]
    assert plan.command.endswith("dstack apply -f bashgym.dstack.yml")


def _assert_shipped_request(plan: RenderedPlan, request: TrainingRequest) -> None:
    shipped = TrainingRequest.model_validate(plan.request)  # the job validates it again as it was shipped
    assert shipped.compute_target == "local" and shipped.device_id is None and not shipped.use_remote_ssh
    assert shipped.dataset_path == plan.files[str(Path(request.dataset_path).resolve())]
    assert (shipped.method, shipped.base_model, shipped.num_processes) == (
        request.method,
        request.base_model,
        request.num_processes,
    )
    assert plan.request_digest == _digest_text(_canonical(plan.request)), "the job digests its request alike"


@pytest.mark.parametrize("engine", ENGINES)
def test_write_plan_puts_the_request_where_the_plan_mounts_it(engine: Engine, tmp_path: Path) -> None:
    request = _from_json("{}", tmp_path)
    plan = _render(engine, request, _options(engine, request, tmp_path))
    path = write_plan(plan, tmp_path / "plan")
    assert path.read_text() == plan.text
    for local in plan.files:
        assert Path(local).is_file(), local
    assert json.loads((tmp_path / "plan" / "request.json").read_text()) == plan.request


@pytest.mark.parametrize("engine", ENGINES)
def test_the_digest_is_stable_and_follows_every_field(engine: Engine, tmp_path: Path) -> None:
    request = _from_json("{}", tmp_path)
    options = _options(engine, request, tmp_path)
    first, again = _render(engine, request, options), _render(engine, request, options)
    assert (first.digest, first.text) == (again.digest, again.text)

    faster = _render(engine, request.model_copy(update={"learning_rate": 1e-4}), options)
    assert faster.digest != first.digest and faster.request_digest != first.request_digest
    on_demand = _render(engine, request, dataclasses.replace(options, use_spot=False))
    assert on_demand.digest != first.digest and on_demand.request_digest == first.request_digest


@pytest.mark.parametrize("engine", ENGINES)
def test_without_a_checkpoint_store_the_plan_warns_its_outputs_stay_behind(engine: Engine, tmp_path: Path) -> None:
    request = _from_json("{}", tmp_path)
    options = _options(engine, request, tmp_path, checkpoint_store=None, constraints_path=None)
    plan = _render(engine, request, options)
    assert plan.warnings and "No checkpoint_store" in plan.warnings[0]
    assert "--down" not in plan.command, "tearing the cluster down would delete the only copy"
    install = plan.document["setup"] if engine == "skypilot" else plan.document["commands"][0]
    assert "-c " not in install and f"install '{default_install_spec()}'" in install


def _refusal(engine: Engine, request: TrainingRequest, options: PlanOptions) -> str:
    with pytest.raises(InvalidInput) as caught:
        _render(engine, request, options)
    return caught.value.message


@pytest.mark.parametrize("engine", ENGINES)
def test_what_the_engine_cannot_take_is_refused_with_what_to_send(engine: Engine, tmp_path: Path) -> None:
    request = _from_json("{}", tmp_path)
    options = _options(engine, request, tmp_path)
    folder = request.model_copy(update={"dataset_path": str(tmp_path)})
    assert "is not a file" in _refusal(engine, folder, options)
    local_model = request.model_copy(update={"base_model": str(tmp_path)})
    assert "push the model to the Hub" in _refusal(engine, local_model, options)
    uneven = request.model_copy(update={"num_processes": 3, "num_machines": 2})
    assert "does not split evenly" in _refusal(engine, uneven, options)
    two_machines = TrainingRequest(
        method="sft", base_model=MODEL, dataset_path=request.dataset_path, compute_target="ssh-group:pair",
        num_machines=2, num_processes=2,
    )  # fmt: skip
    assert "trains on one machine" in _refusal(engine, two_machines, options)
    two_ranks = request.model_copy(update={"num_processes": 2})
    assert "ask for H100:2" in _refusal(engine, two_ranks, dataclasses.replace(options, accelerators="H100:1"))
    wrong_store = "team-ckpts" if engine == "skypilot" else "s3://team-ckpts/run-x"
    assert "checkpoint_store" in _refusal(engine, request, dataclasses.replace(options, checkpoint_store=wrong_store))
    missing = dataclasses.replace(options, constraints_path=tmp_path / "absent.txt")
    assert "constraints_path" in _refusal(engine, request, missing)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_held_out_file_is_mounted_beside_the_training_file(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "held").mkdir()
    held_out = _jsonl(tmp_path / "held" / "train.jsonl", "sft")  # the same name as the training file, elsewhere
    request = _from_json(json.dumps({"eval_dataset_path": str(held_out)}), tmp_path)
    plan = _render(engine, request, _options(engine, request, tmp_path))
    assert plan.files[str(held_out)] == "/bashgym/data/eval/train.jsonl"
    assert plan.request["eval_dataset_path"] == "/bashgym/data/eval/train.jsonl"
    assert plan.request["dataset_path"] == "/bashgym/data/train/train.jsonl"
    same = request.model_copy(update={"eval_dataset_path": request.dataset_path})
    assert "held out of training" in _refusal(engine, same, _options(engine, request, tmp_path))


def test_dstack_reads_skypilot_resource_syntax_in_its_own(tmp_path: Path) -> None:
    request = _from_json("{}", tmp_path)
    options = _options("dstack", request, tmp_path, accelerators="A100-80GB", cpus="16", memory="64")
    assert _render("dstack", request, options).document["resources"] == {
        "gpu": "A100:80GB:1",
        "cpu": "16",
        "memory": "64GB",
        "disk": "200GB",
    }


# Why an engine's library is not in the test environment (pyproject's dev extra installs dstack).
NOT_INSTALLED = {
    "skypilot": "skypilot 0.14 pins click<8.2 and uvicorn<0.36, which conflict with BashGym's, so the suite does not "
    "install it",
}


def _skip_unless_installed(engine: Engine, plan: RenderedPlan) -> None:
    if importlib.util.find_spec(LIBRARIES[engine]) is None:
        assert plan.validation == {
            "checked": False,
            "valid": None,
            "library": None,
            "reason": f"{engine} is not installed; the schema check was skipped",
        }
        why = NOT_INSTALLED.get(engine, "it is not installed here")
        pytest.skip(f"the {engine} schema check was skipped: {why} ({plan.validation['reason']})")


@pytest.mark.parametrize("engine", ENGINES)
def test_the_engines_own_library_accepts_the_plan_and_refuses_a_broken_one(engine: Engine, tmp_path: Path) -> None:
    request = _from_json("{}", tmp_path)
    plan = checked_plan(engine, request, _options(engine, request, tmp_path))
    _skip_unless_installed(engine, plan)
    assert plan.validation["checked"] and plan.validation["valid"], plan.validation["reason"]
    assert plan.validation["library"].startswith(f"{engine} ")

    broken = copy.deepcopy(plan.document)
    broken["resources"]["acelerators"] = "H100:1"  # a typo the engine's schema must catch
    checked = validate(dataclasses.replace(plan, document=broken)).validation
    assert checked["checked"] and checked["valid"] is False and "acelerators" in checked["reason"]


@pytest.mark.parametrize("engine", ENGINES)
def test_launch_where_the_engine_is_not_configured_says_nothing_ran(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where SkyPilot is installed, point its client at a port nothing listens on: a test never reaches a real server.
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", "http://127.0.0.1:9")
    request = _from_json("{}", tmp_path)
    plan = checked_plan(engine, request, _options(engine, request, tmp_path))
    path = write_plan(plan, tmp_path / "plan")
    with pytest.raises(RuleRejected) as caught:
        launch_plan(plan, plan_path=path, secrets={"HF_TOKEN": SECRET}, home=tmp_path)
    refused = caught.value
    assert "was rendered and nothing ran" in refused.message and plan.name in refused.message
    assert plan.command in refused.hint
    assert SECRET not in refused.message + refused.hint
    if engine == "skypilot":  # launched only through the operator's own `sky`, never an import here
        assert "BASHGYM_SKYPILOT_BIN" in refused.message
    elif importlib.util.find_spec(LIBRARIES[engine]) is None:
        assert f"{engine} is not installed" in refused.message
    else:
        assert "no dstack project is configured" in refused.message
