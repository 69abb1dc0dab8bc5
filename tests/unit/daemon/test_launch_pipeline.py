"""Every launch goes through the one pipeline (daemon/launch/pipeline.py): each route that starts or plans a run
reaches its entry, and nothing else asks the training service to start a run.

Plan and launch disagreed while each path composed its own stages (the API, external jobs and campaigns each
authorised and confined in their own code); the pipeline makes them one, and this file keeps it so.
"""

from __future__ import annotations

import ast
import types
from collections.abc import Callable
from typing import Any

import pytest
from bashgym.daemon.api.app import register_routes
from bashgym.daemon.campaigns.runner import CampaignRunner
from bashgym.daemon.launch import pipeline
from fastapi import FastAPI
from fastapi.routing import APIRoute

from tests.support.import_map import ROOT

# Each route that launches or plans a run, and the pipeline entry it must reach.
LAUNCH_ROUTES = {
    ("POST", "/v1/training/plan"): (pipeline.prepare, pipeline.plan),
    ("POST", "/v1/training/start"): (pipeline.prepare, pipeline.launch),
    ("POST", "/v1/jobs/hf"): (pipeline.prepare_job,),
    ("POST", "/v1/jobs/providers/{provider}"): (pipeline.prepare_job,),
    ("POST", "/v1/compute/plans"): (pipeline.prepare_job,),
}


def reached(function: Callable[..., Any], seen: set[int] | None = None) -> set[int]:
    """The ids of every function `function` names, through the module-level functions of the product it calls."""
    seen = set() if seen is None else seen
    code = getattr(function, "__code__", None)
    if code is None or id(function) in seen:
        return seen
    seen.add(id(function))
    names = set(code.co_names)
    for const in code.co_consts:  # nested functions and lambdas
        if isinstance(const, types.CodeType):
            names.update(const.co_names)
    for name in names:
        target = function.__globals__.get(name)  # type: ignore[attr-defined]
        if isinstance(target, types.FunctionType) and target.__module__.startswith("bashgym."):
            reached(target, seen)
    return seen


def routes() -> dict[tuple[str, str], Callable[..., Any]]:
    app = FastAPI()
    register_routes(app)
    return {
        (method, route.path): route.endpoint
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }


@pytest.mark.parametrize(("key", "entries"), LAUNCH_ROUTES.items(), ids=[" ".join(k) for k in LAUNCH_ROUTES])
def test_each_launch_route_goes_through_the_pipeline(key: tuple[str, str], entries: tuple[Any, ...]) -> None:
    endpoint = routes()[key]
    found = reached(endpoint)
    missing = [entry.__name__ for entry in entries if id(entry) not in found]
    assert not missing, f"{' '.join(key)} does not reach launch.pipeline.{', '.join(missing)}"


def test_a_campaign_launches_through_the_pipeline() -> None:
    found = reached(CampaignRunner._stage_queued)
    assert id(pipeline.prepare_owned) in found and id(pipeline.launch) in found


def _starts_a_run(node: ast.AST) -> bool:
    """`<...>.training.start(...)`, `training.start(...)` or `_service(call).start(...)`: the training service."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "start"):
        return False
    receiver = node.func.value
    named = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
    called = receiver.func.id if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) else None
    return named in {"training", "service"} or called == "_service"


def test_only_the_pipeline_asks_the_training_service_to_start_a_run() -> None:
    allowed = ROOT / "daemon" / "launch" / "pipeline.py"
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for folder in ("daemon", "bot", "cli", "agents")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != allowed
        for node in ast.walk(ast.parse(path.read_text()))
        if _starts_a_run(node)
    ]
    assert found == [], f"these start a run beside the launch pipeline: {found}"
    assert any(_starts_a_run(node) for node in ast.walk(ast.parse(allowed.read_text())))
