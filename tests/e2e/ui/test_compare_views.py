"""Issue 54's compare and campaign pages over HTTP: the compare page's scatter and parallel coordinates carry each
run's chosen param and metric (read through the runs table's columns), its curves carry each run's start for the
time-since-start alignment, and a campaign's iterations table shows the primary metric, the delta against the
incumbent and its CI."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.client.specs import Actor, ComparisonSpec, EvalResultSpec, EvalSuiteSpec
from bashgym.ledger.store import Ledger

from tests.e2e.ui.test_web_view import researcher, signed_in
from tests.support.factories import campaign_spec, suite, tracking_context
from tests.support.helpers import inprocess_daemon

pytestmark = pytest.mark.anyio
RATES = (1e-5, 3e-4, 2e-3)


@pytest.fixture
async def api(ledger: Ledger, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with inprocess_daemon(ledger, tmp_path / "home") as client:
        yield client


async def run_with(
    api: httpx.AsyncClient, config: dict[str, Any], losses: list[float], project: str = "nightly"
) -> str:
    body = {"method": "sft", "tracking_context": tracking_context(project_id=project), "config": config}
    run_id = str((await api.post("/v1/runs", json=body)).json()["record"]["run_id"])
    points = [{"metric": "train.loss", "step": s, "value": v} for s, v in enumerate(losses)]
    stored = await api.post(
        f"/v1/projects/{project}/metrics", json={"run_id": run_id, "attempt_id": f"{run_id}.a1", "points": points}
    )
    assert stored.status_code in {200, 201}, stored.text
    return run_id


def figure_data(page: str, kind: str) -> dict[str, Any]:
    found = re.search(rf'<figure class="{kind}" data-{kind}="([^"]*)"', page)
    assert found, f"no {kind} figure in the page"
    return dict(json.loads(html.unescape(found.group(1))))


async def test_compare_plots_the_chosen_param_against_the_chosen_metric_one_value_a_run(
    api: httpx.AsyncClient,
) -> None:
    runs = [await run_with(api, {"learning_rate": r, "lora_rank": 8}, [2.0, 1.0 + i]) for i, r in enumerate(RATES)]
    query = [("run", r) for r in runs]
    async with signed_in(api) as browser:
        page = (await browser.get("/ui/p/nightly/compare", params=query)).text
        scatter = figure_data(page, "scatter")
        # By default: the first param that differs between the runs, against the series' latest value.
        assert (scatter["param"], scatter["metric"]) == ("params.learning_rate", "metrics.train.loss")
        assert scatter["runs"] == runs
        assert scatter["values"]["params.learning_rate"] == list(RATES)
        assert scatter["values"]["metrics.train.loss"] == [1.0, 2.0, 3.0]
        parallel = figure_data(page, "parallel")
        assert parallel["axes"] == ["params.learning_rate", "metrics.train.loss"]  # lora_rank is the same for all
        assert '<option value="params.lora_rank">' in page and '<option value="metrics.train.loss" selected>' in page

        chosen = await browser.get("/ui/p/nightly/compare", params=[*query, ("param", "params.lora_rank")])
        scatter = figure_data(chosen.text, "scatter")
        assert scatter["param"] == "params.lora_rank" and scatter["values"]["params.lora_rank"] == [8, 8, 8]
        assert figure_data(chosen.text, "parallel")["axes"][0] == "params.lora_rank"
        # A name the page does not offer falls back to the default; nothing of it reaches the SQL or the page.
        odd = await browser.get(
            "/ui/p/nightly/compare", params=[*query, ("param", "params.x') or 1=1 --"), ("metric", "<script>")]
        )
        assert odd.status_code == 200 and "<script>" not in odd.text.replace("<script src", "")
        assert figure_data(odd.text, "scatter")["param"] == "params.learning_rate"

        chart = re.search(r'<figure class="chart" data-chart="([^"]*)"', page)
        assert chart and set(json.loads(html.unescape(chart.group(1))).get("starts", {})) <= set(runs)
        assert '<select name="align">' in page


async def test_a_param_with_markup_in_its_name_is_plotted_as_text(api: httpx.AsyncClient) -> None:
    key = "<img src=x onerror=alert(1)>"
    runs = [await run_with(api, {key: i}, [1.0 / (i + 1)]) for i in range(2)]
    async with signed_in(api) as browser:
        page = (await browser.get("/ui/p/nightly/compare", params=[("run", r) for r in runs])).text
    assert key not in page
    scatter = figure_data(page, "scatter")
    assert scatter["param"] == f"params.`{key}`" and scatter["values"][scatter["param"]] == [0, 1]


async def test_compare_of_another_projects_runs_shows_none_of_their_values(api: httpx.AsyncClient) -> None:
    runs = [await run_with(api, {"learning_rate": r}, [1.0], project="secret") for r in RATES[:2]]
    await api.post("/v1/projects", json={"project_id": "elsewhere", "name": "Elsewhere"})
    async with signed_in(api, await researcher(api, "elsewhere")) as stranger:
        answer = await stranger.get("/ui/p/secret/compare", params=[("run", r) for r in runs])
    assert answer.status_code == 403 and "data-scatter" not in answer.text and runs[0] not in answer.text


async def test_a_campaigns_iterations_show_their_metric_delta_against_the_incumbent_and_ci(
    api: httpx.AsyncClient, ledger: Ledger
) -> None:
    owner, ws, project = Actor(actor_id="alice"), "default", "nightly"
    await api.post("/v1/projects", json={"project_id": project, "name": "Nightly"})
    spec = campaign_spec(campaign_id="c1", report_schedule=None, primary_metric="pass@1")
    assert (await api.post(f"/v1/projects/{project}/campaigns", json=spec)).status_code == 201, spec
    await ledger.register_eval_suite(owner, ws, project, EvalSuiteSpec.model_validate(suite(spec["suite_id"])))

    async def result(value: float) -> str:
        made = await ledger.record_eval_result(
            owner, ws, project, EvalResultSpec(suite_id=spec["suite_id"], metrics={"pass@1": value}, sample_count=88)
        )
        return str(made.record["result_id"])

    base, cand = await result(0.5), await result(0.5625)
    compared = ComparisonSpec(baseline_result_id=base, candidate_result_id=cand, primary_metric="pass@1",
                              delta=0.0625, ci_low=0.0114, ci_high=0.1136)  # fmt: skip
    comparison_id = (await ledger.record_comparison(owner, ws, project, compared)).record["comparison_id"]
    baseline = (await ledger.add_baseline(owner, ws, project, "c1")).record["iteration_id"]
    await ledger.update_iteration(owner, ws, project, "c1", baseline, "decided", result_id=base, decision="baseline")
    proposal = {"primary_variable": "learning_rate", "value": 1e-4, "rationale": "a smaller step"}
    (candidate,) = (await ledger.add_iterations(owner, ws, project, "c1", [proposal])).record["added"]
    await ledger.update_iteration(
        owner, ws, project, "c1", candidate, "decided", result_id=cand, comparison_id=comparison_id, decision="keep"
    )
    async with signed_in(api) as browser:
        page = (await browser.get(f"/ui/p/{project}/campaigns/c1")).text
    table = page[page.index("Iterations and their decisions") :]
    head = re.findall(r'<th scope="col">([^<]*)</th>', table[: table.index("</thead>")])
    assert head[head.index("run_id") + 1 : head.index("run_id") + 4] == ["pass@1", "Δ vs incumbent", "95% CI"]
    body = table[: table.index("</table>")]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", body)]
    cells = {r[0]: r for r in rows if r}
    at = head.index("pass@1")
    assert cells["0"][at : at + 3] == ["0.5", "—", "—"]
    assert cells["1"][at : at + 3] == ["0.5625", "+0.0625", "[+0.0114, +0.1136]"]
