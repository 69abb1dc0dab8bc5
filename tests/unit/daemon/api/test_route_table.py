"""docs/security.md's route table is the one the routes declare, and every write route declares what its caller
needs."""

from __future__ import annotations

from pathlib import Path

from bashgym.daemon.api.app import register_routes
from bashgym.daemon.api.route_table import BEGIN, END, render, write_routes
from bashgym.daemon.api.routing import AUTHENTICATED
from bashgym.daemon.authority import CAPABILITIES
from fastapi import FastAPI

SECURITY = Path(__file__).resolve().parents[4] / "docs" / "security.md"


def _app() -> FastAPI:
    app = FastAPI()
    register_routes(app)
    return app


def test_every_write_route_declares_a_rule_of_known_capabilities() -> None:
    routes = write_routes(_app())
    assert routes, "the table would be empty"
    undeclared = [f"{r.method} {r.path}" for r in routes if r.rule is None]
    assert undeclared == [], "declare what these routes need (daemon/api/routing.py: requires, declare)"
    known = {*CAPABILITIES, AUTHENTICATED}
    unknown = {c for r in routes if r.rule for c in (r.rule.capability, *r.rule.also)} - known
    assert unknown == set()


def test_the_security_page_holds_the_route_table_the_routes_declare() -> None:
    text = SECURITY.read_text()
    assert BEGIN in text and END in text, "docs/security.md's Authority section holds the table between its markers"
    copy = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert copy == render(_app()), "regenerate it: python -m bashgym.daemon.api.route_table"
