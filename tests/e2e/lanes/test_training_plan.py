"""`bashgym training plan`: the daemon validates a request completely, and decides publication authority."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from tests.support.factories import sft_data, tracking_context
from tests.support.helpers import BASHGYM, RunningDaemon, cli, running_daemon

PAIRS = '{"prompt": "List files", "chosen": "ls", "rejected": "rm -rf ."}\n'


def test_plan_shows_the_validated_request_with_defaults(daemon: RunningDaemon, tmp_path: Path) -> None:
    config = tmp_path / "dpo-config.json"
    config.write_text(json.dumps({"dpo_beta": 0.2, "learning_rate": 1e-5}))
    context = tmp_path / "tracking.json"
    # An official run names the exact data it trains on: the context's digest is the file's.
    digest = hashlib.sha256(PAIRS.encode()).hexdigest()
    context.write_text(json.dumps(tracking_context(dataset_content_digest=digest, dataset_version_id="pairs-v1")))
    (tmp_path / "pairs.jsonl").write_text(PAIRS)
    result = cli(
        daemon.env(),
        "training",
        "plan",
        "--strategy",
        "dpo",
        "--model",
        "org/model",
        "--dataset-path",
        str(tmp_path / "pairs.jsonl"),
        "--config",
        str(config),
        "--tracking-context",
        str(context),
        "--checkpoint-limit",
        "1",
        "--artifact-retention",
        "adapter_only",
        "--json",
    )
    assert result.code == 0, result.stderr
    plan = result.json()
    assert plan["request"]["dpo_beta"] == 0.2 and plan["request"]["num_epochs"] == 1.0
    assert (plan["lane"], plan["context_status"], plan["project_id"]) == ("local", "verified", "nightly")
    # The CLI uploaded the file for the run's project; the request names the upload, no path of this machine.
    assert plan["request"]["dataset_path"].startswith(str(daemon.home / "artifacts" / "sha256"))


def test_a_misspelt_config_field_is_refused_with_the_suggestion(daemon: RunningDaemon, tmp_path: Path) -> None:
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"epochs": 2}))
    result = cli(
        daemon.env(),
        "training",
        "plan",
        "--strategy",
        "sft",
        "--model",
        "m",
        "--dataset-path",
        str(sft_data(tmp_path)),
        "--config",
        str(config),
    )
    assert result.code == 7
    assert "did you mean `num_epochs`" in result.stderr


def test_a_refused_target_says_what_to_use(daemon: RunningDaemon, tmp_path: Path) -> None:
    result = cli(
        daemon.env(),
        "training",
        "plan",
        "--strategy",
        "sft",
        "--model",
        "m",
        "--dataset-path",
        str(sft_data(tmp_path)),
        "--compute-target",
        "hf-jobs",
    )
    assert result.code == 7
    assert "bashgym jobs hf submit" in result.stderr


def test_public_upload_needs_explicit_authority(tmp_path: Path) -> None:
    with running_daemon(tmp_path / "home", env={"BASHGYM_HF_NAMESPACES": "team"}) as daemon:
        researcher = cli(daemon.env(), "auth", "issue", "--actor", "res", "--profile", "researcher", "--json").json()
        env = {**daemon.env(), "BASHGYM_TOKEN": researcher["token"]}
        data = str(sft_data(tmp_path))
        args = [
            "training", "plan", "--strategy", "sft", "--model", "m", "--dataset-path", data,
            "--auto-push-hf", "--hf-repo-name", "team/model",
        ]  # fmt: skip
        assert cli(env, *args, "--json").json()["publication"] == "private"
        public = cli(env, *args, "--no-hf-private")
        assert public.code == 4
        assert "artifact.publish_public" in public.stderr
        releaser = cli(
            daemon.env(), "auth", "issue", "--actor", "rel", "--profile", "researcher",
            "--capability", "artifact.publish_public", "--json",
        ).json()  # fmt: skip
        allowed = cli({**daemon.env(), "BASHGYM_TOKEN": releaser["token"]}, *args, "--no-hf-private", "--json")
        assert allowed.code == 0, allowed.stderr
        assert allowed.json()["publication"] == "public"
        elsewhere = cli({**daemon.env(), "BASHGYM_TOKEN": releaser["token"]}, *args[:-1], "other/model")
        assert elsewhere.code == 4 and "BASHGYM_HF_NAMESPACES" in elsewhere.stderr


def test_a_registered_dataset_version_is_trained_on_from_the_store(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = daemon.env()
    data = tmp_path / "traces.jsonl"
    data.write_text('{"text": "wc -l notes.txt"}\n')
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
    registered = cli(
        env, "dataset", "register", "--project", "nightly", "--dataset", "traces", "--version", "traces-v1",
        "--file", str(data),
    )  # fmt: skip
    assert registered.code == 0, registered.stderr
    args = ["training", "plan", "--strategy", "sft", "--model", "org/model", "--json"]
    plan = cli(env, *args, "--dataset-version", "traces-v1", "--dataset-project", "nightly")
    assert plan.code == 0, plan.stderr
    stored = Path(plan.json()["request"]["dataset_path"])
    assert stored.is_relative_to(daemon.home / "artifacts") and stored.read_bytes() == data.read_bytes()

    unknown = cli(env, *args, "--dataset-version", "traces-v9", "--dataset-project", "nightly")
    assert unknown.code == 5 and "No dataset version 'traces-v9'" in unknown.stdout + unknown.stderr
    no_project = cli(env, *args, "--dataset-version", "traces-v1")
    assert no_project.code == 7 and "dataset_project" in no_project.stdout
    both = cli(env, *args, "--dataset-version", "traces-v1", "--dataset-path", str(data))
    assert both.code == 2 and "not allowed with argument" in both.stderr


def test_a_local_model_path_is_the_callers_not_the_daemons(daemon: RunningDaemon, tmp_path: Path) -> None:
    # The daemon runs elsewhere: `./tiny-model` means the directory next to the person who typed it.
    (tmp_path / "tiny-model").mkdir()
    (tmp_path / "tiny-model" / "config.json").write_text("{}")
    sft_data(tmp_path).rename(tmp_path / "rows.jsonl")
    args = ["training", "plan", "--strategy", "sft", "--model", "./tiny-model", "--dataset-path", "rows.jsonl"]
    proc = subprocess.run([*BASHGYM, *args, "--json"], cwd=tmp_path, env=daemon.env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["request"]["base_model"] == str(tmp_path / "tiny-model")
    hub = cli(daemon.env(), *args[:4], "--model", "org/model", "--dataset-path", str(tmp_path / "rows.jsonl"))
    assert hub.code == 0 and "org/model" in hub.stdout, "a hub id is left as it is"


def test_the_operator_form_names_its_ssh_target_in_the_config(daemon: RunningDaemon, tmp_path: Path) -> None:
    """`{"use_remote_ssh": true, "device_id": "gpu1"}` in --config: the CLI sent compute_target local beside it,
    and the request was refused for disagreeing with itself."""
    config = tmp_path / "remote.json"
    config.write_text(json.dumps({"use_remote_ssh": True, "device_id": "gpu1"}))
    data = str(sft_data(tmp_path))
    args = ["training", "plan", "--strategy", "sft", "--model", "org/model", "--dataset-path", data]
    planned = cli(daemon.env(), *args, "--config", str(config), "--json")
    assert planned.code == 7, planned.stderr  # no device gpu1 here: a launch would be refused, and plan says so
    plan = planned.json()
    assert (plan["lane"], plan["device_id"]) == ("ssh", "gpu1")
    assert plan["lane_preflight"]["ready"] is False and "gpu1" in plan["lane_preflight"]["reasons"][0]
    assert plan["ready"] is False and plan["reasons"] == plan["lane_preflight"]["reasons"]


def test_plan_finds_what_the_trainer_would_refuse_and_launch_refuses_the_same(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    """Each request here was answered ready by plan and accepted by launch, then refused by the trainer minutes
    later: the GRPO recipe as the launch recipes give it, 4-bit on a CPU lane, an SFT request on DPO pairs, a
    model path that does not exist, a teacher of another vocabulary."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(PAIRS)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "Count notes.txt", "verifier": {"kind": "exact_match", "expected": "wc"}}) + "\n"
    )
    student, teacher = tmp_path / "student", tmp_path / "teacher"
    for path, vocab in ((student, 512), (teacher, 1024)):
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    sft = str(sft_data(tmp_path))
    cases = {
        "multiple of grpo_num_generations (32, whole groups): raise gradient_accumulation_steps to 32": {
            "strategy": "grpo", "base_model": str(student), "dataset_path": str(prompts),
            "training_profile": "default", "grpo_group_size": 32, "grpo_num_generations": 32,
        },
        "load_in_4bit needs a CUDA GPU, and the lane has none": {
            "strategy": "sft", "base_model": str(student), "dataset_path": sft, "load_in_4bit": True,
        },
        "The dataset breaks the sft contract": {
            "strategy": "sft", "base_model": str(student), "dataset_path": str(pairs),
        },
        "does not exist on the machine that would train": {
            "strategy": "sft", "base_model": str(tmp_path / "nowhere"), "dataset_path": sft,
        },
        "teacher_model has a vocabulary of 1024 tokens and base_model 512": {
            "strategy": "distillation", "base_model": str(student), "teacher_model": str(teacher),
            "dataset_path": str(prompts),
        },
    }  # fmt: skip
    with daemon.client() as admin:
        for reason, request in cases.items():
            plan = admin.post("/v1/training/plan", json=request)
            assert plan.status_code == 200, plan.text
            assert not plan.json()["ready"] and any(reason in r for r in plan.json()["reasons"]), plan.json()["reasons"]
            started = admin.post("/v1/training/start", json=request)
            assert started.status_code == 422 and reason in started.text, started.text
        listed = admin.get("/v1/projects/unassigned/runs")  # no run registered: not even the project exists
        assert listed.status_code == 404 or listed.json() == [], listed.text
        # A credential pasted into a setting is refused by name, plan and launch alike, never quoted back.
        secret = "hf_" + "Zq4" * 12
        leaky = {**cases["does not exist on the machine that would train"], "base_model": str(tmp_path / secret)}
        for route in ("/v1/training/plan", "/v1/training/start"):
            refused = admin.post(route, json=leaky)
            assert refused.status_code == 422 and "credential-shaped" in refused.text, refused.text
            assert refused.json()["error"]["details"]["fields"] == ["base_model"] and secret not in refused.text
        # A setting the strategy would not read is refused as it is sent, plan and launch alike.
        for route in ("/v1/training/plan", "/v1/training/start"):
            answer = admin.post(route, json={**cases["The dataset breaks the sft contract"], "grpo_temperature": 0.9})
            assert answer.status_code == 422 and "`grpo_temperature` is read by grpo and rlvr only" in answer.text


def test_plan_and_start_judge_a_context_of_another_workspace_alike(daemon: RunningDaemon, tmp_path: Path) -> None:
    # The context names workspace ws3's nightly; the call is in `default`: the run would be unassigned, never
    # recorded in ws3's project or this workspace's namesake, and a researcher of `nightly` may launch neither.
    context = tmp_path / "tracking.json"
    context.write_text(json.dumps(tracking_context(workspace_id="ws3", project_id="nightly")))
    args = ["--strategy", "sft", "--model", "org/model", "--dataset-path", str(sft_data(tmp_path))]
    args += ["--tracking-context", str(context)]
    plan = cli(daemon.env(), "training", "plan", *args, "--json").json()
    assert (plan["project_id"], plan["context_status"]) == ("unassigned", "unassigned")
    assert plan["missing_context_fields"] == ["workspace_id"]
    issued = cli(daemon.env(), "auth", "issue", "--actor", "rin", "--profile", "researcher", "--project", "nightly",
                 "--json").json()  # fmt: skip
    env = {**daemon.env(), "BASHGYM_TOKEN": issued["token"]}
    planned, started = cli(env, "training", "plan", *args), cli(env, "training", "start", *args)
    assert planned.code == started.code == 4, (planned.stderr, started.stderr)
    assert "unassigned" in planned.stderr and "unassigned" in started.stderr


def test_a_field_the_trainer_would_ignore_is_refused_by_plan_and_launch_alike(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    """Issue 51, item 13: num_epochs beside a positive max_steps, and hf_* fields without auto_push_hf, were
    silently ignored; plan, the CLI's validation and launch now refuse them with the same sentence."""
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"num_epochs": 3, "max_steps": 10, "hf_private": False}))
    data = sft_data(tmp_path)
    for command in ("plan", "start"):
        result = cli(
            daemon.env(), "training", command, "--strategy", "sft", "--model", "org/model",
            "--dataset-path", str(data), "--config", str(config),
        )  # fmt: skip
        assert result.code == 7, (command, result.stdout, result.stderr)
        assert "`num_epochs` 3 is ignored: max_steps 10 overrides it" in result.stderr
        assert "`hf_private` is read only when auto_push_hf is true" in result.stderr
    request = {"strategy": "sft", "base_model": "org/model", "dataset_path": str(data), "num_epochs": 2,
               "max_steps": 5}  # fmt: skip
    with daemon.client() as admin:
        for route in ("/v1/training/plan", "/v1/training/start"):
            answer = admin.post(route, json=request)
            assert answer.status_code == 422, answer.text
            assert "`num_epochs` 2 is ignored" in answer.json()["error"]["message"]
        # Nothing was launched: no run was registered, so not even the `unassigned` project a run without a
        # context goes to exists.
        assert admin.get("/v1/projects/unassigned/runs").status_code == 404
