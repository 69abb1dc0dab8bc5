"""Attacks through what the API accepts (issue 34, findings 10 and 11), each sent by the least-privileged
token that can send it: metric points at the float and integer extremes leave every trend readable (valid
JSON, a slope of the right sign or null, never a 500); a body nested past the limit gets a 422 that says
so on every route that takes JSON; a report manifest naming a file the daemon cannot serve is refused or
answered 404, naming the file."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.client.specs import Actor
from bashgym.ledger.store import Ledger

from tests.e2e.trust_boundaries.tenants import issue_token, tenant
from tests.support.factories import tracking_context
from tests.support.helpers import RunningDaemon, running_daemon

PROJECT = "inputs"
ENV = {"BASHGYM_RATE_LIMIT_BURST": "10000", "BASHGYM_RATE_LIMIT_PER_MINUTE": "10000"}
LARGEST = sys.float_info.max
NESTING_LIMIT = 64  # daemon/api/app.py MAX_JSON_DEPTH, restated: the limit is part of the API's promise


@dataclass
class World:
    daemon: RunningDaemon
    writer: httpx.Client  # a project researcher: ledger.write in PROJECT only
    reader: httpx.Client  # a project viewer: ledger.read in PROJECT only
    launcher: httpx.Client  # a workspace researcher: training routes name no project in their path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    home = tmp_path_factory.mktemp("inputs") / "home"
    with running_daemon(home, env=ENV) as daemon:
        with daemon.client() as admin:
            admin.post("/v1/projects", json={"project_id": PROJECT, "name": "Inputs"}).raise_for_status()
        writer = issue_token(daemon, "rhea", "researcher", project=PROJECT)
        reader = issue_token(daemon, "vic", "viewer", project=PROJECT)
        launcher = issue_token(daemon, "lena", "researcher")
        with tenant(daemon, writer) as w, tenant(daemon, reader) as r, tenant(daemon, launcher) as la:
            yield World(daemon, w, r, la)


def new_run(daemon: RunningDaemon) -> str:
    """A run in PROJECT; registering needs workspace scope, so the admin does it (the attack is what follows)."""
    context = tracking_context(project_id=PROJECT, project_display_name="Inputs")
    with daemon.client() as admin:
        answer = admin.post("/v1/runs", json={"method": "sft", "tracking_context": context})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["record"]["run_id"])


def send_points(writer: httpx.Client, run_id: str, metric: str, points: list[tuple[int, float]]) -> None:
    body = {
        "run_id": run_id,
        "attempt_id": f"{run_id}.a1",
        "points": [{"metric": metric, "step": step, "value": value} for step, value in points],
    }
    answer = writer.post(f"/v1/projects/{PROJECT}/metrics", json=body)
    assert answer.status_code == 201, answer.text


def strict_json(answer: httpx.Response) -> Any:
    """The body as a strict client reads it: NaN, Infinity or a number past the largest double fail."""

    def no_constant(token: str) -> Any:
        raise AssertionError(f"{token} is not JSON: {answer.text[:300]}")

    def finite(text: str) -> float:
        value = float(text)
        assert math.isfinite(value), f"{text} reads back as {value}"
        return value

    return json.loads(answer.text, parse_constant=no_constant, parse_float=finite)


def trend(world: World, metric: str, run_id: str | None = None) -> dict[str, Any]:
    params = {"metric": metric, **({"run": run_id} if run_id else {})}
    answer = world.reader.get(f"/v1/projects/{PROJECT}/trend", params=params)
    assert answer.status_code == 200, answer.text
    return dict(strict_json(answer))


# -- finding 10: metric points at the extremes -------------------------------------------------------


@dataclass(frozen=True)
class Extreme:
    id: str
    points: list[tuple[int, float]]
    delta: float | None  # None: the true delta is past the largest double
    slope: float | None  # None: one point, or the true slope is past the largest double


def rising_near(start: int) -> list[tuple[int, float]]:
    return [(start + i, float(i)) for i in range(200)]


EXTREMES = [
    Extreme("1e308-twice", [(0, 1e308), (1, 1e308)], 0.0, 0.0),
    Extreme("-1e308-twice", [(0, -1e308), (1, -1e308)], 0.0, 0.0),
    Extreme("-1e308-then-0", [(0, -1e308), (1, 0.0)], 1e308, 1e308),
    Extreme("-1e308-to-1e308", [(0, -1e308), (1, 1e308)], None, None),
    Extreme("largest-doubles", [(0, LARGEST), (1, -LARGEST), (2, LARGEST)], 0.0, 0.0),
    Extreme("step-2^63-1-beside-step-1", [(1, 1.0), (2**63 - 1, 2.0)], 1.0, 1 / (2**63 - 2)),
    Extreme("steps-near-3e9-rising", rising_near(3_000_000_000), 199.0, 1.0),
    Extreme("steps-near-2^62-rising", rising_near(2**62), 199.0, 1.0),
    Extreme("single-point", [(7, 0.5)], 0.0, None),
]


@pytest.mark.parametrize("case", EXTREMES, ids=[c.id for c in EXTREMES])
def test_a_trend_over_extreme_points_answers_valid_json_with_a_slope_of_the_right_sign(
    world: World, case: Extreme
) -> None:
    run_id = new_run(world.daemon)
    metric = f"attack.{case.id.replace('^', '').replace('-', '_')}"
    send_points(world.writer, run_id, metric, case.points)

    answer = trend(world, metric, run_id)

    ordered = sorted(case.points)
    assert answer["steps"] == [step for step, _ in ordered]
    assert answer["values"] == [value for _, value in ordered], "every value reads back exactly"
    values = [value for _, value in ordered]
    summary = answer["summary"]
    assert (summary["count"], summary["first"], summary["latest"]) == (len(values), values[0], values[-1])
    assert (summary["min"], summary["max"]) == (min(values), max(values))
    assert summary["delta"] == case.delta
    if case.slope is None:
        assert summary["slope"] is None
    else:
        assert summary["slope"] == pytest.approx(case.slope, rel=1e-9, abs=1e-300)
        assert case.slope == 0 or (summary["slope"] > 0) == (case.slope > 0), "the sign, however small the slope"
    run = world.reader.get(f"/v1/projects/{PROJECT}/runs/{run_id}")
    assert run.status_code == 200, run.text
    assert strict_json(run)["metric_summary"][metric]["latest"] == values[-1]


def test_a_trend_across_runs_over_extreme_latest_values_answers_valid_json(world: World) -> None:
    for latest in (-1e308, 0.0, 1e308):
        send_points(world.writer, new_run(world.daemon), "attack.across", [(0, 1.0), (2**63 - 1, latest)])

    answer = trend(world, "attack.across")

    assert answer["values"] == [-1e308, 0.0, 1e308]
    summary = answer["summary"]
    assert (summary["count"], summary["min"], summary["max"]) == (3, -1e308, 1e308)
    assert summary["delta"] is None, "2e308 is past the largest double"
    assert summary["slope"] == pytest.approx(1e308)


def test_a_trend_across_runs_of_equal_huge_values_is_flat(world: World) -> None:
    for _ in range(3):
        send_points(world.writer, new_run(world.daemon), "attack.flat", [(1, 1e308), (2, LARGEST)])

    summary = trend(world, "attack.flat")["summary"]

    assert (summary["count"], summary["delta"], summary["slope"]) == (3, 0.0, 0.0)


def test_a_campaign_report_over_a_run_of_extreme_points_is_made(tmp_path: Path) -> None:
    """The campaign report reads the same points (each iteration's loss curve) and charts them."""
    home = tmp_path / "home"
    campaign = {
        "campaign_id": "c1",
        "title": "Extremes",
        "objective": "Chart what the API accepts.",
        "suite_id": "s1",
        "starting_model_version_id": "m1",
        "dataset_version_ids": ["d1"],
    }
    with running_daemon(home, env=ENV) as daemon:
        with daemon.client() as admin:
            admin.post("/v1/projects", json={"project_id": PROJECT, "name": "Inputs"}).raise_for_status()
            admin.post(f"/v1/projects/{PROJECT}/campaigns", json=campaign).raise_for_status()
        run_id = new_run(daemon)
        with tenant(daemon, issue_token(daemon, "rhea", "researcher", project=PROJECT)) as writer:
            send_points(writer, run_id, "train.loss", [(0, -1e308), (1, 1e308), (2**63 - 1, -LARGEST)])
    # Only the campaign runner gives an iteration its run: done here in the ledger, the daemon stopped.
    asyncio.run(_iteration_ran(home / "ledger.sqlite3", "c1", run_id))

    with running_daemon(home, env=ENV) as daemon:
        researcher = issue_token(daemon, "rhea2", "researcher", project=PROJECT)
        with tenant(daemon, researcher) as client:
            made = client.post(f"/v1/projects/{PROJECT}/campaigns/c1/reports", json={"formats": ["png", "json"]})
            assert made.status_code == 201, made.text
            chart = client.get(f"/v1/projects/{PROJECT}/reports/{made.json()['report_id']}/loss.png")
        assert chart.status_code == 200 and chart.content[:8] == b"\x89PNG\r\n\x1a\n", chart.text[:300]
        assert "Internal error" not in daemon.log


async def _iteration_ran(path: Path, campaign_id: str, run_id: str) -> None:
    actor = Actor(actor_id="system:test")
    async with await Ledger.open(path) as ledger:
        proposal = {"primary_variable": "learning_rate", "value": 0.001, "rationale": "extremes"}
        await ledger.add_iterations(actor, "default", PROJECT, campaign_id, [proposal])
        await ledger.update_iteration(
            actor, "default", PROJECT, campaign_id, f"{campaign_id}.i1", "training", run_id=run_id
        )


# -- finding 11: bodies nested past the limit ---------------------------------------------------------


def arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def objects(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def in_a_field(depth: int) -> bytes:
    return b'{"text": ' + arrays(depth - 1) + b"}"


def unclosed(depth: int) -> bytes:
    return b"[" * depth


SHAPES = {"arrays": arrays, "objects": objects, "in-a-field": in_a_field, "unclosed": unclosed}
ROUTES = {  # a route of each way a body is parsed: FastAPI's model, the metrics route's own, the training routes'
    "annotations": ("writer", f"/v1/projects/{PROJECT}/annotations"),
    "reports": ("writer", f"/v1/projects/{PROJECT}/reports"),
    "metrics": ("writer", f"/v1/projects/{PROJECT}/metrics"),
    "training-plan": ("launcher", "/v1/training/plan"),
}


@pytest.mark.parametrize("depth", [1_000, 50_000])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("route", ROUTES)
def test_a_body_nested_past_the_limit_is_a_422_that_says_so(world: World, route: str, shape: str, depth: int) -> None:
    who, path = ROUTES[route]
    client: httpx.Client = getattr(world, who)

    answer = client.post(path, content=SHAPES[shape](depth), headers={"Content-Type": "application/json"})

    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_json", error
    assert f"nests arrays and objects too deep; the limit is {NESTING_LIMIT} levels" in error["message"], error


def test_nesting_at_the_limit_passes_and_brackets_in_strings_do_not_count(world: World) -> None:
    at_limit = {"report_id": "deep64", "kind": "k", "title": "T", "manifest": {"a": json.loads(arrays(62))}}
    stored = world.writer.post(f"/v1/projects/{PROJECT}/reports", json=at_limit)
    assert stored.status_code == 201, stored.text

    past = {**at_limit, "report_id": "deep65", "manifest": {"a": json.loads(arrays(63))}}
    refused = world.writer.post(f"/v1/projects/{PROJECT}/reports", json=past)
    assert refused.status_code == 422 and "too deep" in refused.json()["error"]["message"], refused.text

    text = '\\"[{' * 900 + '"\\\\' + "[" * 100  # escaped quotes and backslashes around brackets, all in a string
    noted = world.writer.post(f"/v1/projects/{PROJECT}/annotations", json={"text": text})
    assert noted.status_code == 201, noted.text


def in_pieces(body: bytes, size: int) -> Iterator[bytes]:
    """The body streamed (chunked, no Content-Length) in pieces that cut through escapes and strings."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.parametrize("route", ROUTES)
def test_a_body_streamed_in_pieces_is_checked_whole(world: World, route: str) -> None:
    who, path = ROUTES[route]
    client: httpx.Client = getattr(world, who)
    body = b'{"text": "a \\\\\\" [[[ {{{", "a": ' + arrays(999) + b"}"
    headers = {"Content-Type": "application/json"}

    answer = client.post(path, content=in_pieces(body, 7), headers=headers)

    assert answer.status_code == 422, answer.text
    assert f"the limit is {NESTING_LIMIT} levels" in answer.json()["error"]["message"], answer.text
    keyed = client.post(path, content=body, headers={**headers, "Idempotency-Key": f"deep-{route}"})
    assert keyed.status_code == 422 and "too deep" in keyed.text, "the idempotency layer reads bodies too"
    oversized = client.post(
        path, content=in_pieces(b'{"text": "' + b"x" * (9 * 1024**2) + b'"}', 1024**2), headers=headers
    )
    assert oversized.status_code == 413, "said as too large, not as text that is not UTF-8: " + oversized.text


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_nesting_is_found_in_the_other_json_encodings(world: World, encoding: str) -> None:
    # U+2200 is the bytes 00 22 in UTF-16-LE: a quote to a scan of the raw bytes, which would then read the
    # brackets after it as the inside of a string.
    body = ('{"text": "\u2200", "a": ' + arrays(1_000).decode() + "}").encode(encoding)
    answer = world.writer.post(
        f"/v1/projects/{PROJECT}/annotations", content=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    assert f"limit is {NESTING_LIMIT} levels" in answer.json()["error"]["message"], answer.text


# -- finding 11: report manifests naming files the daemon cannot serve ----------------------------------


@dataclass(frozen=True)
class BadManifest:
    id: str
    manifest: Any
    says: list[str] = field(default_factory=list)


BAD_MANIFESTS = [
    BadManifest("unknown-extension", {"files": [{"name": "report.md"}, {"name": "payload.exe"}]},
                ["'payload.exe'", ".md, .json or .png"]),
    BadManifest("no-extension", {"files": [{"name": "README"}]}, ["'README'", ".md, .json or .png"]),
    BadManifest("a-path-not-a-name", {"files": [{"name": "../../ledger.sqlite3.json"}]},
                ["'../../ledger.sqlite3.json'", "bare file name"]),
    BadManifest("dot-dot", {"files": [{"name": ".."}]}, ["'..'"]),
    BadManifest("files-not-a-list", {"files": "report.md"}, ["`files` is a list"]),
    BadManifest("entry-without-a-name", {"files": [{"sha256": "0" * 64}]}, ["files[0]", "`name`"]),
]  # fmt: skip


@pytest.mark.parametrize("case", BAD_MANIFESTS, ids=[c.id for c in BAD_MANIFESTS])
def test_a_report_manifest_naming_a_file_the_daemon_cannot_serve_is_refused(world: World, case: BadManifest) -> None:
    body = {"report_id": f"bad-{case.id}", "kind": "campaign", "title": "T", "manifest": case.manifest}

    answer = world.writer.post(f"/v1/projects/{PROJECT}/reports", json=body)

    assert answer.status_code == 422, answer.text
    for fragment in case.says:
        assert fragment in answer.json()["error"]["message"], answer.text
    gone = world.reader.get(f"/v1/projects/{PROJECT}/reports/bad-{case.id}/manifest.json")
    assert gone.status_code == 404 and "No report" in gone.json()["error"]["message"], "nothing was recorded"


def test_a_listed_file_the_daemon_does_not_hold_is_a_404_naming_it(world: World) -> None:
    body = {"report_id": "by-reference", "kind": "campaign", "title": "T", "manifest": {"files": [{"name": "a.md"}]}}
    assert world.writer.post(f"/v1/projects/{PROJECT}/reports", json=body).status_code == 201

    for name in ("a.md", "manifest.json"):
        answer = world.reader.get(f"/v1/projects/{PROJECT}/reports/by-reference/{name}")
        assert answer.status_code == 404, answer.text
        assert f"{name!r}" in answer.json()["error"]["message"], answer.text
    unlisted = world.reader.get(f"/v1/projects/{PROJECT}/reports/by-reference/payload.exe")
    assert unlisted.status_code == 404 and "'payload.exe'" in unlisted.json()["error"]["message"], unlisted.text
    assert "Internal error" not in world.daemon.log
