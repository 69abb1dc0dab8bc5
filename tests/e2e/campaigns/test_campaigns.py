"""Campaign records through the CLI: a draft validated to ready, versioned state changes, terminal states."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from tests.support.factories import campaign_spec, digest
from tests.support.helpers import RunningDaemon, cli

spec = campaign_spec


def write(tmp: Path, body: dict[str, Any]) -> str:
    path = tmp / f"{body['campaign_id']}.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_a_draft_is_validated_to_ready_then_moves_only_by_its_current_version(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = daemon.env()
    assert cli(env, "project", "create", "--id", "nightly", "--name", "Nightly").code == 0
    created = cli(env, "campaign", "create", "--project", "nightly", "--spec", write(tmp_path, spec()), "--json")
    assert created.code == 0, created.stderr
    assert (created.json()["status"], created.json()["version"]) == ("draft", 1)

    blocked = cli(env, "campaign", "validate", "bash-q4", "--project", "nightly", "--json")
    assert blocked.code == 7
    assert {f["code"] for f in blocked.json()["findings"]} == {"model_missing", "dataset_missing"}
    assert all(f["next_action"] for f in blocked.json()["findings"])

    with daemon.client() as client:
        model = {"model_version_id": "tiny-v1", "model_id": "tiny", "source_uri": "hf://org/tiny"}
        client.post("/v1/projects/nightly/model-versions", json=model)
        data = {"dataset_version_id": "traces-v1", "dataset_id": "traces", "source_uri": "file:///d.jsonl"}
        client.post("/v1/projects/nightly/dataset-versions", json={**data, "content_digest": digest("d")})
    ready = cli(env, "campaign", "validate", "bash-q4", "--project", "nightly", "--json")
    assert ready.code == 0, ready.stdout
    assert ready.json()["campaign"]["status"] == "ready"

    assert cli(env, "campaign", "start", "bash-q4", "--project", "nightly").code == 0
    stale = cli(env, "campaign", "pause", "bash-q4", "--project", "nightly", "--expected-version", "2")
    assert stale.code == 6 and "version" in stale.stderr
    assert cli(env, "campaign", "pause", "bash-q4", "--project", "nightly", "--reason", "GPU maintenance").code == 0
    assert cli(env, "campaign", "resume", "bash-q4", "--project", "nightly").code == 0
    done = cli(env, "campaign", "conclude", "bash-q4", "--project", "nightly", "--json")
    assert done.code == 0 and done.json()["status"] == "completed"
    again = cli(env, "campaign", "resume", "bash-q4", "--project", "nightly")
    assert again.code == 6 and "completed" in again.stderr

    with daemon.client() as client:
        events = client.get("/v1/projects/nightly/events", params={"limit": 500}).json()["events"]
        budget = client.get("/v1/projects/nightly/budget", params={"scope": "campaign-bash-q4"})
    moves = [e["payload"]["status"] for e in events if e["event_type"] == "campaign.transitioned"]
    assert moves == ["ready", "active", "paused", "active", "completed"]
    assert budget.status_code == 200


def test_a_bad_schedule_lane_or_recipe_is_named_before_anything_runs(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = daemon.env()
    cli(env, "project", "create", "--id", "nightly", "--name", "Nightly")
    bad = spec(
        campaign_id="bad",
        compute_target="ssh:nowhere",
        base_recipe={"strategy": "sft", "epochs": 2},
        budget={"runs": 0, "gpu_hours": 0},
        report_schedule={"cron": "61 9 * * 1", "timezone": "Mars/Base"},
    )
    assert cli(env, "campaign", "create", "--project", "nightly", "--spec", write(tmp_path, bad)).code == 0
    result = cli(env, "campaign", "validate", "bad", "--project", "nightly", "--json")
    codes = {f["code"] for f in result.json()["findings"]}
    assert {"lane_not_ready", "recipe_invalid", "budget_missing", "schedule_invalid"} <= codes
    recipe = next(f for f in result.json()["findings"] if f["code"] == "recipe_invalid")
    assert "num_epochs" in recipe["message"]


def test_candidates_change_exactly_one_variable_and_queue_in_order(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = daemon.env()
    cli(env, "project", "create", "--id", "nightly", "--name", "Nightly")
    assert cli(env, "campaign", "create", "--project", "nightly", "--spec", write(tmp_path, spec())).code == 0
    change = tmp_path / "lr.json"
    change.write_text(json.dumps({"primary_variable": "learning_rate", "value": 1e-3, "rationale": "5e-3 overshoots"}))
    proposed = cli(
        env, "campaign", "propose", "bash-q4", "--project", "nightly", "--recipe-change", str(change), "--json"
    )
    assert proposed.code == 0, proposed.stderr
    hypotheses = tmp_path / "queue.json"
    hypotheses.write_text(
        json.dumps(
            [
                {"primary_variable": "lora_rank", "value": 8, "rationale": "smaller adapter generalises"},
                {"primary_variable": "dataset_version_id", "value": "traces-v1", "rationale": "the approved data"},
            ]
        )
    )
    queued = cli(env, "campaign", "queue", "bash-q4", "--project", "nightly", "--hypotheses", str(hypotheses), "--json")
    assert queued.code == 0, queued.stderr
    iterations = queued.json()
    assert [(i["number"], i["primary_variable"], i["stage"]) for i in iterations] == [
        (1, "learning_rate", "queued"),
        (2, "lora_rank", "queued"),
        (3, "dataset_version_id", "queued"),
    ]
    assert iterations[0]["recipe_change"] == {"learning_rate": 1e-3}
    shown = cli({**env, "COLUMNS": "80"}, "campaign", "show", "bash-q4", "--project", "nightly")
    assert shown.code == 0, shown.stderr
    words = " ".join(shown.stdout.split())
    assert "Campaign bash-q4 draft" in words and re.search(r"metric maximize \S+ on bash-tasks-v1", words), words
    for number, variable in ((1, "learning_rate"), (2, "lora_rank"), (3, "dataset_version_id")):
        assert f"bash-q4.i{number} candidate: {variable} -> queued" in words

    for bad, why in (
        ({"primary_variable": "base_model", "value": "other", "rationale": "r"}, "cannot be a candidate"),
        ({"primary_variable": "learning_rate", "value": 5e-3, "rationale": "r"}, "must change it"),
        ({"primary_variable": "dataset_version_id", "value": "secret-v9", "rationale": "r"}, "not approved"),
        ({"primary_variable": "num_epochs", "value": -1, "rationale": "r"}, "recipe is invalid"),
    ):
        change.write_text(json.dumps(bad))
        refused = cli(env, "campaign", "propose", "bash-q4", "--project", "nightly", "--recipe-change", str(change))
        assert refused.code == 7 and why in refused.stderr, refused.stderr


def test_a_report_is_markdown_charts_and_json_under_a_manifest_without_local_paths(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = daemon.env()
    cli(env, "project", "create", "--id", "nightly", "--name", "Nightly")
    cli(env, "campaign", "create", "--project", "nightly", "--spec", write(tmp_path, spec()))
    out = tmp_path / "report"
    made = cli(env, "campaign", "report", "bash-q4", "--project", "nightly", "--out", str(out), "--json")
    assert made.code == 0, made.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    names = {f["name"] for f in manifest["files"]}
    assert names == {"report.md", "snapshot.json", "metric.png", "loss.png", "budget.png"}
    for entry in manifest["files"]:
        data = (out / entry["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["size_bytes"]
        assert str(daemon.home).encode() not in data and str(tmp_path).encode() not in data
    assert (out / "metric.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "report.md").read_text()
    assert "Engineering evidence only" in markdown and "validate" in markdown
    with daemon.client() as client:
        events = client.get("/v1/projects/nightly/events", params={"limit": 500}).json()["events"]
    assert any(e["event_type"] == "report.recorded" for e in events)


def test_research_state_and_wait_follow_the_campaign_without_skipping_a_change(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    env = daemon.env()
    cli(env, "project", "create", "--id", "nightly", "--name", "Nightly")
    cli(env, "campaign", "create", "--project", "nightly", "--spec", write(tmp_path, spec()))
    where = ["--campaign", "bash-q4", "--project", "nightly"]
    state = cli(env, "research", "state", *where, "--json").json()
    assert (state["phase"], state["next_action"]["code"]) == ("draft", "validate")
    # The next action names the campaign and its project: pasted, it runs (test_next_actions_paste pastes them all).
    assert state["next_action"]["detail"].endswith("bashgym campaign validate bash-q4 --project nightly")
    assert state["incumbent"] is None and state["budget"]["limit"] is not None

    quiet = cli(env, "research", "wait", *where, "--after-cursor", str(state["cursor"]), "--timeout", "0.5", "--json")
    assert quiet.json() == {"outcome": "timeout", "next_cursor": state["cursor"]}
    cli(env, "campaign", "cancel", "bash-q4", "--project", "nightly", "--reason", "superseded")
    changed = cli(env, "research", "wait", *where, "--after-cursor", str(state["cursor"]), "--timeout", "5", "--json")
    assert changed.json()["outcome"] == "terminal" and changed.json()["next_cursor"] > state["cursor"]
    after = cli(
        env, "research", "wait", *where, "--after-cursor", str(changed.json()["next_cursor"]), "--timeout", "0.5"
    )
    assert after.code == 0 and "timeout" in after.stdout


def test_doctor_names_each_check_and_the_schedule_can_be_set_and_shown(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = daemon.env()
    cli(env, "project", "create", "--id", "nightly", "--name", "Nightly")
    cli(env, "campaign", "create", "--project", "nightly", "--spec", write(tmp_path, spec(report_schedule=None)))
    where = ["bash-q4", "--project", "nightly"]
    doctor = cli(env, "campaign", "doctor", *where, "--json")
    assert doctor.code == 7
    checks = {c["check"]: c for c in doctor.json()["checks"]}
    assert not checks["model_missing"]["ok"] and checks["model_missing"]["next_action"]
    assert checks["scheduler"]["ok"] and checks["authority:campaign.control"]["ok"] and checks["budget_remaining"]["ok"]

    assert cli(env, "campaign", "schedule", "show", *where, "--json").json()["schedules"] == []
    bad = cli(env, "campaign", "schedule", "set", *where, "--cron", "0 25 * * *")
    assert bad.code == 7 and "cron" in bad.stderr
    made = cli(env, "campaign", "schedule", "set", *where, "--cron", "0 9 * * 1", "--timezone", "Europe/Paris")
    assert made.code == 0, made.stderr
    (shown,) = cli(env, "campaign", "schedule", "show", *where, "--json").json()["schedules"]
    assert shown["cron"] == "0 9 * * 1" and shown["next_fire_time"] is not None
