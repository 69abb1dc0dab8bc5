"""The table of write routes and what each asks of its caller (docs/security.md, "Authority"), made from the rules
the routes declare.

`python -m bashgym.daemon.api.route_table` prints it; tests/unit/daemon/api/test_route_table.py fails when the
docs' copy differs, or when a write route declares no rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from bashgym.daemon.api.responses import MUTATING
from bashgym.daemon.api.routing import AUTHENTICATED, Rule
from fastapi import FastAPI
from fastapi.routing import APIRoute

SESSION_PREFIX = "/ui"  # the web view's own routes: a session cookie, judged per page (api/ui.py)
BEGIN = "<!-- route table: python -m bashgym.daemon.api.route_table -->"
END = "<!-- end of route table -->"


@dataclass(frozen=True)
class WriteRoute:
    method: str
    path: str
    rule: Rule | None


def declared_rule(route: APIRoute) -> Rule | None:
    """The rule a route's dependency declares (routing.declare), or None."""
    for dependency in route.dependant.dependencies:
        rule = getattr(dependency.call, "rule", None)
        if isinstance(rule, Rule):
            return rule
    return None


def write_routes(app: FastAPI) -> list[WriteRoute]:
    """Every route that changes something, but the web view's session routes, with its declared rule."""
    found = [
        WriteRoute(method, route.path, declared_rule(route))
        for route in app.routes
        if isinstance(route, APIRoute) and not route.path.startswith(SESSION_PREFIX + "/")
        for method in sorted(route.methods or ())
        if method in MUTATING
    ]
    return sorted(found, key=lambda r: (r.path, r.method))


def statement(route: WriteRoute) -> str:
    """The rule in words: its own statement, or its capabilities where the route acts."""
    rule = route.rule
    if rule is None:
        return "(none declared)"
    if rule.statement:
        return rule.statement
    if rule.capability == AUTHENTICATED:
        return "any valid token"
    needed = " and ".join(f"`{c}`" for c in (rule.capability, *rule.also))
    return f"{needed} in the {'project' if '{project}' in route.path else 'workspace'}"


def render(app: FastAPI) -> str:
    """The Markdown table between its markers, as docs/security.md holds it."""
    rows = [f"| `{r.method} {r.path}` | {statement(r)} |" for r in write_routes(app)]
    return "\n".join([BEGIN, "| route | what the caller needs |", "|---|---|", *rows, END])


def _app() -> FastAPI:
    from bashgym.daemon.api.app import register_routes

    app = FastAPI()
    register_routes(app)
    return app


if __name__ == "__main__":
    print(render(_app()))
