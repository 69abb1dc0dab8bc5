"""`bashgym run|model|campaign tag|untag|note` and the lists' `--tag`, as a user types them (text and --json), and
what a viewer's token gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.daemon.test_tags_api import PROJECT, daemon_with_runs
from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.helpers import RunningDaemon, cli


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_runs(tmp_path_factory.mktemp("tags-cli")) as running:
        yield running


def _run_ids(daemon: RunningDaemon) -> list[str]:
    listed = cli(daemon.env(), "run", "list", "--project", PROJECT, "--json")
    return sorted(r["run_id"] for r in listed.json())


def test_a_run_is_tagged_noted_found_by_tag_and_untagged(daemon: RunningDaemon) -> None:
    env = daemon.env()
    tagged, other = _run_ids(daemon)
    done = cli(env, "run", "tag", tagged, "team=nlp", "stage=eval", "--project", PROJECT)
    assert done.code == 0, done.stderr
    assert f"Tagged {tagged}." in done.stdout and "stage=eval team=nlp" in done.stdout
    noted = cli(env, "run", "note", tagged, "lr too high at step 40", "--project", PROJECT, "--json")
    assert noted.code == 0, noted.stderr
    assert noted.json()["record"]["note"]["text"] == "lr too high at step 40"
    found = cli(env, "run", "list", "--project", PROJECT, "--tag", "team=nlp", "--json").json()
    assert [(r["run_id"], r["tags"]) for r in found] == [(tagged, {"stage": "eval", "team": "nlp"})]
    assert cli(env, "run", "list", "--project", PROJECT, "--tag", "team=vision", "--json").json() == []
    text = cli(env, "run", "list", "--project", PROJECT, "--tag", "team")
    assert tagged in text.stdout and other not in text.stdout, text.stdout
    shown = cli(env, "run", "show", tagged, "--project", PROJECT)
    assert "stage=eval team=nlp" in shown.stdout and "lr too high at step 40" in shown.stdout, shown.stdout
    removed = cli(env, "run", "untag", tagged, "stage", "--project", PROJECT, "--json")
    assert removed.json()["record"]["removed"] == ["stage"] and removed.json()["record"]["tags"] == {"team": "nlp"}


def test_model_versions_and_campaigns_take_tags_and_their_lists_search_them(daemon: RunningDaemon) -> None:
    env = daemon.env()
    assert cli(env, "model", "tag", "tiny-v1", "release=candidate", "--project", PROJECT).code == 0
    assert cli(env, "model", "note", "tiny-v1", "first candidate", "--project", PROJECT).code == 0
    listed = cli(env, "model", "list", "--project", PROJECT, "--tag", "release=candidate", "--json").json()
    assert [(v["model_version_id"], v["tags"]) for v in listed["model_versions"]] == [
        ("tiny-v1", {"release": "candidate"})
    ]
    missing = cli(env, "campaign", "tag", "c-nope", "team=nlp", "--project", PROJECT)
    assert missing.code == 5 and "No campaign 'c-nope'" in missing.stderr, missing.stderr
    assert cli(env, "campaign", "list", "--project", PROJECT, "--tag", "team", "--json").json()["campaigns"] == []


def test_bad_words_and_a_viewer_are_refused_with_what_to_do(daemon: RunningDaemon) -> None:
    env = daemon.env()
    run_id = _run_ids(daemon)[0]
    no_value = cli(env, "run", "tag", run_id, "team", "--project", PROJECT)
    assert no_value.code != 0 and "team=VALUE" in no_value.stderr, no_value.stderr
    hostile = cli(env, "run", "tag", run_id, "a';DROP=1", "--project", PROJECT)
    assert hostile.code != 0 and "is not a tag key" in hostile.stderr, hostile.stderr
    viewer = issue_token(daemon, "vic", "viewer", project=PROJECT)
    refused = cli({**env, "BASHGYM_TOKEN": viewer}, "run", "tag", run_id, "team=x", "--project", PROJECT)
    assert refused.code != 0 and "ledger.annotate" in refused.stderr, refused.stderr
