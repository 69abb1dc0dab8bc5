"""Tags and notes over HTTP: set, search and show them on runs, model versions and campaigns, and every refusal
(a viewer, a token lacking ledger.annotate, another workspace's token, hostile keys) leaves the ledger unchanged."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.trust_boundaries.tenants import issue_token
from tests.support.factories import campaign_spec, tracking_context
from tests.support.helpers import RunningDaemon, running_daemon

PROJECT = "nightly"


@contextlib.contextmanager
def daemon_with_runs(root: Path) -> Iterator[RunningDaemon]:
    """A daemon whose project nightly holds two runs (model version tiny-v1) and campaign c1."""
    with running_daemon(root / "home") as running:
        with running.client() as admin:
            for n in (1, 2):
                context = tracking_context(project_id=PROJECT, dataset_version_id=f"traces-v{n}")
                assert admin.post("/v1/runs", json={"method": "sft", "tracking_context": context}).status_code == 201
            spec = campaign_spec(campaign_id="c1")
            assert admin.post(f"/v1/projects/{PROJECT}/campaigns", json=spec).status_code == 201
        yield running


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_with_runs(tmp_path_factory.mktemp("tags")) as running:
        yield running


def _runs(daemon: RunningDaemon) -> list[str]:
    with daemon.client() as admin:
        return sorted(r["run_id"] for r in admin.get(f"/v1/projects/{PROJECT}/runs").json())


def _paths(daemon: RunningDaemon) -> dict[str, str]:
    base = f"/v1/projects/{PROJECT}"
    return {
        "run": f"{base}/runs/{_runs(daemon)[0]}",
        "model_version": f"{base}/model-versions/tiny-v1",
        "campaign": f"{base}/campaigns/c1",
    }


def _last_event(daemon: RunningDaemon) -> Any:
    with daemon.client() as admin:
        page = admin.get("/v1/events", params={"after_cursor": 0, "limit": 1000}).json()
    return page["events"][-1]["cursor"]


@pytest.mark.parametrize("kind", ["run", "model_version", "campaign"])
def test_a_researcher_tags_and_notes_an_entity_and_its_show_and_list_read_them(
    daemon: RunningDaemon, kind: str
) -> None:
    path = _paths(daemon)[kind]
    token = issue_token(daemon, f"rita-{kind}", "researcher", project=PROJECT)
    with daemon.client(token) as rita:
        tagged = rita.put(f"{path}/tags", json={"tags": {"team": "nlp", "stage": "eval"}})
        assert tagged.status_code == 201, tagged.text
        assert tagged.json()["record"]["tags"] == {"stage": "eval", "team": "nlp"}
        assert rita.put(f"{path}/tags", json={"tags": {"team": "nlp"}}).status_code == 200  # a replay
        noted = rita.put(f"{path}/note", json={"text": "lr too high at step 40"})
        assert noted.status_code == 201, noted.text
        removed = rita.delete(f"{path}/tags", params={"key": "stage"})
        assert removed.status_code == 201 and removed.json()["record"]["removed"] == ["stage"], removed.text
        shown = rita.get(path).json()
        assert shown["tags"] == {"team": "nlp"}
        assert shown["note"]["text"] == "lr too high at step 40" and shown["note"]["set_by"] == f"rita-{kind}"
        listing = {"run": "runs", "model_version": "model-versions", "campaign": "campaigns"}[kind]
        found = rita.get(f"/v1/projects/{PROJECT}/{listing}", params={"tag": "team=nlp"}).json()
        rows = found if isinstance(found, list) else next(iter(found.values()))
        assert len(rows) == 1 and rows[0]["tags"] == {"team": "nlp"}, found
        none = rita.get(f"/v1/projects/{PROJECT}/{listing}", params=[("tag", "team=nlp"), ("tag", "stage")]).json()
        assert (none if isinstance(none, list) else next(iter(none.values()))) == []
        if kind == "run":  # the runs table's grammar reads the same tags, and tag= joins its filter
            run_id = path.rsplit("/", 1)[1]
            for query in ({"filter": "tags.team = 'nlp'"}, {"tag": "team=nlp", "sort": "created_at"},
                          {"tag": "team", "columns": "tags.team"}):  # fmt: skip
                page = rita.get(f"/v1/projects/{PROJECT}/runs", params=query).json()
                assert [r["run_id"] for r in page["runs"]] == [run_id], (query, page)
            odd = rita.get(f"/v1/projects/{PROJECT}/runs", params={"tag": "team=x'y", "sort": "created_at"}).json()
            assert odd["runs"] == []
        # Clean up so each kind's test starts bare.
        assert rita.delete(f"{path}/tags", params={"key": "team"}).status_code == 201
        assert rita.put(f"{path}/note", json={"text": ""}).json()["record"]["note"] is None


@pytest.mark.parametrize(
    ("who", "status", "names"),
    [
        ("viewer", 403, "ledger.annotate"),
        ("lacking", 403, "ledger.annotate"),
        ("other-workspace", 404, "No project"),  # its own workspace holds no such project
        ("other-project", 403, ""),
    ],
)
def test_writes_without_ledger_annotate_in_the_project_are_refused_and_change_nothing(
    daemon: RunningDaemon, who: str, status: int, names: str
) -> None:
    token = {
        "viewer": lambda: issue_token(daemon, "vic", "viewer", project=PROJECT),
        # Everything a researcher holds but the new capability: ledger.write alone does not tag.
        "lacking": lambda: issue_token(
            daemon,
            "lacy",
            "",
            capabilities=("ledger.read", "ledger.write", "training.launch", "campaign.control"),
        ),
        "other-workspace": lambda: issue_token(daemon, "mallory", "admin", workspace="theirs"),
        "other-project": lambda: issue_token(daemon, "otto", "researcher", project="elsewhere"),
    }[who]()
    before = _last_event(daemon)
    with daemon.client(token) as caller:
        for path in _paths(daemon).values():
            for answer in (
                caller.put(f"{path}/tags", json={"tags": {"team": "x"}}),
                caller.delete(f"{path}/tags", params={"key": "team"}),
                caller.put(f"{path}/note", json={"text": "x"}),
            ):
                assert answer.status_code == status, (who, path, answer.text)
                assert names in answer.text
    assert _last_event(daemon) == before


@pytest.mark.parametrize(
    "body",
    [
        {"tags": {"a'; DROP TABLE runs; --": "x"}},
        {"tags": {f"k{i}": "v" for i in range(10_000)}},
        {"tags": {"team": "v" * 501}},
        {"tags": {"access_token": "x"}},
        {"tags": {}},
        {"tags": {"team": "x"}, "extra": 1},
    ],
)
def test_hostile_tags_are_refused_with_422_and_change_nothing(daemon: RunningDaemon, body: dict[str, Any]) -> None:
    path = _paths(daemon)["run"]
    before = _last_event(daemon)
    with daemon.client() as admin:
        answer = admin.put(f"{path}/tags", json=body)
        assert answer.status_code == 422, answer.text
        assert admin.get(path).json()["tags"] == {}
    assert _last_event(daemon) == before


def test_a_note_over_2000_characters_an_odd_key_filter_and_a_missing_entity_are_refused(
    daemon: RunningDaemon,
) -> None:
    base = f"/v1/projects/{PROJECT}"
    with daemon.client() as admin:
        assert admin.put(f"{_paths(daemon)['run']}/note", json={"text": "x" * 2001}).status_code == 422
        assert admin.get(f"{base}/runs", params={"tag": "a'; DROP=1"}).status_code == 422
        assert admin.delete(f"{_paths(daemon)['run']}/tags", params={"key": "a b"}).status_code == 422
        missing = admin.put(f"{base}/runs/run-nope/tags", json={"tags": {"team": "x"}})
        assert missing.status_code == 404 and "bashgym run list" in missing.json()["error"]["hint"], missing.text
