"""The comparison that ships a run is against the model version it started from (and the holder of the alias it
is to take); a card claims no more than its evidence supports.

Issue 51, finding 3: a run that scored exactly its start shipped on a comparison against an older, weaker model.
Finding 8: `runcard create --claim-tier narrow` on an 8-step run was accepted and the gate never said so.
One 2-step tiny SFT run trained from a registered model version (`tiny-start`, its files in a data root), evaluated
by the daemon's own evaluator on a held-out rows file: a whole suite of its own kind, cheap on the CPU.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bashgym.trainers.tiny import build_tiny

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import sft_data, tracking_context, training_request
from tests.support.helpers import RunningDaemon, cli, daemon_with_project, wait_for_run

PROJECT = "nightly"
P = f"/v1/projects/{PROJECT}"
START = "tiny-start"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_project(tmp_path_factory.mktemp("baselines") / "home", PROJECT) as running:
        yield running


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Held-out rows: every model here is evaluated on the whole of them."""
    return sft_data(tmp_path_factory.mktemp("heldout"), rows=6)


@pytest.fixture(scope="module")
def trained(daemon: RunningDaemon, tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-step tiny SFT run from model version tiny-start (the tiny model's directory)."""
    return train_from_start(daemon, tiny, tmp_path_factory.mktemp("train"))


@pytest.fixture(scope="module")
def compared_with_start(
    daemon: RunningDaemon, tiny: Path, rita: str, rows: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str]:
    """A run of its own (the gate reads every comparison of a run, so the other tests' do not reach it), with its
    measured result compared with tiny-start's: the run id and the result id."""
    run_id = train_from_start(daemon, tiny, tmp_path_factory.mktemp("again"))
    result = str(evaluate(daemon, rita, rows, "--run", run_id)["result_id"])
    start = evaluate(daemon, rita, rows, "--model-version", START)
    compare(daemon, rita, start["result_id"], result)
    return run_id, result


def train_from_start(daemon: RunningDaemon, tiny: Path, tmp: Path) -> str:
    context = tracking_context(
        model_version_id=START,
        model_source_uri=f"file://{tiny}",
        model_config_digest=hashlib.sha256((tiny / "config.json").read_bytes()).hexdigest(),
    )
    request = training_request(tiny, sft_data(tmp), max_steps=2, save_steps=2, tracking_context=context)
    with daemon.client() as admin:
        started = admin.post("/v1/training/start", json=request)
        assert started.status_code == 201, started.text
        run = wait_for_run(admin, PROJECT, str(started.json()["run_id"]), {"completed", "failed"}, timeout_s=240)
    assert run["status"] == "completed" and run["model_version_id"] == START, run
    return str(run["run_id"])


@pytest.fixture(scope="module")
def rita(daemon: RunningDaemon) -> str:
    """A researcher of the project: evaluates, compares, cards and asks the gate; never promotes."""
    return issue_token(daemon, "rita", "researcher", project=PROJECT)


def as_token(daemon: RunningDaemon, token: str) -> dict[str, str]:
    return {**daemon.env(), "BASHGYM_TOKEN": token}


def evaluate(daemon: RunningDaemon, token: str, rows: Path, *subject: str) -> dict[str, Any]:
    args = ("eval", "run", "--project", PROJECT, *subject, "--dataset-path", str(rows), "--device", "cpu", "--json")
    result = cli(as_token(daemon, token), *args, timeout_s=300)
    assert result.code == 0, result.stdout + result.stderr
    return dict(result.json())


def compare(daemon: RunningDaemon, token: str, baseline: str, candidate: str) -> None:
    args = ("eval", "compare", "--project", PROJECT, "--baseline", baseline, "--candidate", candidate, "--json")
    result = cli(as_token(daemon, token), *args)
    assert result.code == 0, result.stdout + result.stderr
    assert result.json()["provenance"] == "measured"


def register(daemon: RunningDaemon, tiny: Path, version: str) -> None:
    """Another model version of the same files: an older model the run never started from."""
    args = ("model", "register", "--project", PROJECT, "--model", "tiny", "--version", version, "--dir", str(tiny))
    registered = cli(daemon.env(), *args)
    assert registered.code == 0, registered.stderr


@pytest.fixture(scope="module")
def candidate(daemon: RunningDaemon, trained: str, rita: str, rows: Path) -> str:
    """The run's measured result on the held-out rows."""
    return str(evaluate(daemon, rita, rows, "--run", trained)["result_id"])


def blockers(daemon: RunningDaemon, token: str, run_id: str) -> dict[str, dict[str, str]]:
    """The gate's blockers by code, asked through the CLI and the API (which must agree)."""
    shown = cli(as_token(daemon, token), "promote", "gate", "--project", PROJECT, "--run", run_id, "--json")
    assert shown.code == 7, shown.stdout + shown.stderr
    with tenant(daemon, token) as client:
        answer = client.get(f"{P}/runs/{run_id}/gate")
    assert answer.status_code == 200, answer.text
    assert [b["code"] for b in answer.json()["blockers"]] == [b["code"] for b in shown.json()["blockers"]]
    return {b["code"]: b for b in shown.json()["blockers"]}


def test_a_comparison_against_another_model_is_context_and_the_start_comparison_is_asked_for(
    daemon: RunningDaemon, tiny: Path, trained: str, candidate: str, rita: str, rows: Path
) -> None:
    register(daemon, tiny, "old-model")
    older = evaluate(daemon, rita, rows, "--model-version", "old-model")
    compare(daemon, rita, older["result_id"], candidate)

    blocker = blockers(daemon, rita, trained).get("start_baseline_missing")
    assert blocker is not None, "a comparison against a model the run never started from was taken as its evidence"
    assert f"against the model version it started from ({START})" in blocker["message"], blocker
    assert "model version old-model are context" in blocker["message"], blocker
    assert f"bashgym eval run --project {PROJECT} --model-version {START}" in blocker["next_action"]
    assert (
        f"bashgym eval compare --project {PROJECT} --baseline THAT_RESULT --candidate {candidate}"
        in (blocker["next_action"])
    )

    start = evaluate(daemon, rita, rows, "--model-version", START)
    compare(daemon, rita, start["result_id"], candidate)
    assert "start_baseline_missing" not in blockers(daemon, rita, trained)


@pytest.mark.slow  # a run of its own; the gate's unit tests keep the alias-holder rule in the default suite
def test_an_alias_moves_only_to_a_run_compared_with_the_alias_holder(
    daemon: RunningDaemon, tiny: Path, compared_with_start: tuple[str, str], rita: str, rows: Path
) -> None:
    trained, candidate = compared_with_start
    register(daemon, tiny, "champ-v0")
    # A lead who decides promotions and may set an alias by hand (promotion.override).
    lead = issue_token(daemon, "lead", "researcher", project=PROJECT,
                       capabilities=("promotion.decide", "promotion.override"))  # fmt: skip
    with tenant(daemon, lead) as client:
        moved = client.post(f"{P}/aliases", json={"alias": "champion", "model_version_id": "champ-v0"})
        assert moved.status_code in {200, 201}, moved.text
        refused = client.post(f"{P}/runs/{trained}/promote", json={"alias": "champion"})
    assert refused.status_code == 422 and "alias_holder_baseline_missing" in refused.text, refused.text
    blocker = next(b for b in refused.json()["error"]["details"]["blockers"]
                   if b["code"] == "alias_holder_baseline_missing")  # fmt: skip
    assert "model version champ-v0, which holds alias champion" in blocker["message"], blocker
    assert "--model-version champ-v0" in blocker["next_action"]
    decide = ("promote", "decide", "--project", PROJECT, "--run", trained, "--alias", "champion")
    shown = cli(as_token(daemon, lead), *decide)
    assert shown.code == 7 and "alias_holder_baseline_missing" in shown.stderr, shown.stderr
    # The plain gate (no alias to move) does not ask for it.
    assert "alias_holder_baseline_missing" not in blockers(daemon, rita, trained)

    holder = evaluate(daemon, rita, rows, "--model-version", "champ-v0")
    compare(daemon, rita, holder["result_id"], candidate)
    again = cli(as_token(daemon, lead), *decide)
    assert again.code == 7 and "alias_holder_baseline_missing" not in again.stderr, again.stderr


def test_a_card_claiming_more_than_its_evidence_is_refused_with_the_tier_it_supports(
    daemon: RunningDaemon, trained: str, rita: str
) -> None:
    env = as_token(daemon, rita)
    create = ("runcard", "create", "--project", PROJECT, "--run", trained, "--limitation", "tiny")
    refused = cli(env, *create, "--claim-tier", "narrow")
    assert refused.code == 7, f"a narrow card on a 2-step run was accepted: {refused.stdout}"
    assert "claims narrow, but the evidence supports local_smoke: it trained 2 steps, below sft's minimum of 100" in (
        refused.stderr
    ), refused.stderr
    assert "--claim-tier local_smoke" in refused.stderr
    with tenant(daemon, rita) as researcher:
        api = researcher.post(f"{P}/runs/{trained}/runcards", json={"claim_tier": "broad", "known_limitations": ["x"]})
        listed = researcher.get(f"{P}/runs/{trained}/runcards").json()["runcards"]
    assert api.status_code == 422 and "claims broad, but the evidence supports local_smoke" in api.text, api.text
    assert not [card for card in listed if card["claim_tier"] != "local_smoke"], "an overclaiming card was written"

    made = cli(env, *create, "--json")  # left out, the tier is the evidence's
    assert made.code == 0, made.stderr
    assert made.json()["card"]["claim_tier"] == "local_smoke"
    assert "smoke_claim" in blockers(daemon, rita, trained)
