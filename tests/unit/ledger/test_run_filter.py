"""The runs search grammar: what parses, what is refused (with its position), hostile keys and values kept out of
the SQL text, and the runs table's sort, filter and cursor over a real ledger."""

from __future__ import annotations

import pytest
from bashgym.client.errors import InvalidInput
from bashgym.client.specs import Actor, MetricBatch, MetricPoint, RunRegistration, RunTransition
from bashgym.ledger.run_filter import Column, compile_filter, parse_columns, parse_filter, parse_sort
from bashgym.ledger.store import Ledger

from tests.support.factories import tracking_context

pytestmark = pytest.mark.anyio
WS = "default"


def test_mlflow_grammar_parses_to_columns_ops_and_values() -> None:
    clauses = parse_filter(
        "metrics.pass@1 > 0.5 and params.learning_rate < 1e-4 AND tags.team = 'x' and status IN ('failed', \"running\")"
    )
    assert [(c.column.name, c.op, c.values) for c in clauses] == [
        ("metrics.pass@1", ">", (0.5,)),
        ("params.learning_rate", "<", (1e-4,)),
        ("tags.team", "=", ("x",)),
        ("status", "in", ("failed", "running")),
    ]
    assert parse_filter("metrics.train.loss:best <= -3")[0].column == Column("metric", "train.loss", "best")
    assert parse_filter("attributes.method != 'sft'")[0].column == Column("attribute", "method")
    assert parse_filter("params.`my key.x` like 'a%' and tags.t not in ('it''s')")[1].values == ("it's",)
    assert parse_filter("params.`my key.x` = 'a'")[0].column.key == "my key.x"
    assert parse_filter("eval.pass@1:ci_low > 0.2")[0].column.name == "eval.pass@1:ci_low"
    assert parse_filter("") == []


def test_columns_and_sort_parse() -> None:
    assert [c.name for c in parse_columns("metrics.train.loss:best, params.lr,duration_s, eval.pass@1")] == [
        "metrics.train.loss:best", "params.lr", "duration_s", "eval.pass@1",
    ]  # fmt: skip
    assert parse_sort("metrics.train.loss asc") == (Column("metric", "train.loss", "latest"), False)
    assert parse_sort("created_at") == (Column("attribute", "created_at"), True)


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("metrics.loss >", 15, "a value after metrics.loss >"),
        ("metrics.loss > 0.5 or status = 'failed'", 20, "`and` between two conditions"),
        ("status = 'complete'", 10, "a run status"),
        ("created_at >= 'yesterday'", 15, "an ISO time for created_at"),
        ("colour = 'red'", 1, "a run attribute"),
        ("metrics.loss > 'low'", 16, "a number for metrics.loss"),
        ("params.x = 'open", 12, "a closing quote"),
        ("metrics.loss:worst < 1", 1, "one of latest, best, final, min, max"),
        ("status in 'failed'", 11, "`(` opening the list"),
        ("metrics.loss ~ 1", 14, "a column, a comparison or a value"),
    ],
)
def test_invalid_filters_name_the_position_and_what_was_expected(text: str, position: int, expected: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_filter(text)
    assert refused.value.details["position"] == position
    assert expected in refused.value.details["expected"]
    assert f"character {position}" in refused.value.message or "at its end" in refused.value.message


def test_hostile_keys_and_values_are_bound_never_compiled_into_the_sql() -> None:
    hostile = "x'; DROP TABLE runs;--"
    where, args = compile_filter(parse_filter(f"params.`{hostile}` = '{hostile.replace(chr(39), chr(39) * 2)}'"))
    assert hostile not in " ".join(where) and "DROP" not in " ".join(where)
    assert f'$.params."{hostile}"' in args and hostile in args
    with pytest.raises(InvalidInput):
        parse_filter('params.`a"b` = 1')  # a double quote would end the JSON path's key


async def _run(ledger: Ledger, actor: Actor, config: dict[str, object], loss: list[float] | None) -> str:
    registration = RunRegistration(method="sft", tracking_context=tracking_context(), config=config)
    run_id = str((await ledger.register_run(actor, WS, registration)).record["run_id"])
    if loss:
        points = [MetricPoint(metric="train.loss", step=i, value=v) for i, v in enumerate(loss)]
        await ledger.ingest_metrics(actor, WS, "nightly", MetricBatch(run_id=run_id, attempt_id=f"{run_id}.a1",
                                                                    points=points))  # fmt: skip
    return run_id


async def test_runs_table_filters_sorts_and_pages_by_the_row_value_cursor(ledger: Ledger, actor: Actor) -> None:
    a = await _run(ledger, actor, {"learning_rate": 1e-5}, [3.0, 1.0, 2.0])  # latest 2.0, best 1.0
    b = await _run(ledger, actor, {"params": {"learning_rate": "5e-4"}}, [0.5])
    c = await _run(ledger, actor, {"learning_rate": 2e-5}, [1.5, 1.2])
    d = await _run(ledger, actor, {}, None)  # no loss: sorts last either way
    # Tags are entity_tags whoever sets them (a tracked run's set_tags, `run tag`); a config's `tags` is not read.
    await ledger.set_tags(actor, WS, "nightly", "run", b, {"team": "x"})
    await ledger.set_tags(actor, WS, "nightly", "run", c, {"team": "x"})
    await ledger.append_run_event(actor, WS, "nightly", d, f"{d}.a1", "run.tracked", {"tags": {"team": "x"}})
    await ledger.transition_run(actor, WS, "nightly", a, RunTransition(status="running"))
    await ledger.transition_run(actor, WS, "nightly", a, RunTransition(status="completed"))

    async def page(**kw: object) -> dict:
        return await ledger.runs_table_page(WS, "nightly", **kw)

    ordered = await page(sort="metrics.train.loss desc", columns="metrics.train.loss, metrics.train.loss:best, "
                         "metrics.train.loss:final, params.learning_rate, tags.team")  # fmt: skip
    assert [r["run_id"] for r in ordered["runs"]] == [a, c, b, d]
    assert ordered["runs"][0]["values"] == {
        "metrics.train.loss": 2.0, "metrics.train.loss:best": 1.0, "metrics.train.loss:final": 2.0,
        "params.learning_rate": 1e-5, "tags.team": None,
    }  # fmt: skip
    assert ordered["runs"][1]["values"]["metrics.train.loss:final"] is None  # not ended: no final value yet
    assert ordered["runs"][1]["values"]["tags.team"] == "x"  # set after it opened
    ascending = await page(sort="metrics.train.loss asc")
    assert [r["run_id"] for r in ascending["runs"]] == [b, c, a, d]
    # Two at a time: the cursor carries the last run, the next page starts after its sort key.
    first = await page(sort="metrics.train.loss asc", limit=2)
    second = await page(sort="metrics.train.loss asc", limit=2, after=first["next"])
    assert [r["run_id"] for r in first["runs"] + second["runs"]] == [b, c, a, d] and second["next"] is None
    newest = await page(limit=3)
    rest = await page(limit=3, after=newest["next"])
    assert [r["run_id"] for r in newest["runs"] + rest["runs"]] == [d, c, b, a]

    small_lr = await page(filter_text="params.learning_rate < 1e-4 and metrics.train.loss > 1")
    assert {r["run_id"] for r in small_lr["runs"]} == {a, c}  # b's "5e-4" is text, read as the number it is
    assert {r["run_id"] for r in (await page(filter_text="tags.team = 'x'"))["runs"]} == {b, c}
    assert [r["run_id"] for r in (await page(filter_text="status = 'completed'"))["runs"]] == [a]
    assert (await page(filter_text="params.`x'; DROP TABLE runs;--` = 'x'"))["runs"] == []
    assert len((await page())["runs"]) == 4  # the table is still there
    with pytest.raises(InvalidInput, match="does not hold"):
        await page(after="run-nope")
