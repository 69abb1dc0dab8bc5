"""The FastAPI application: its routes, the error shape of every refusal, and the OpenAPI document."""

import difflib
import json
import logging
import secrets
from typing import Any

from bashgym.client.errors import BashGymError, RateLimited
from bashgym.daemon.api import (
    artifacts,
    authority,
    campaigns,
    clusters,
    consumers,
    device_groups,
    devices,
    evaluations,
    exchange,
    external,
    ids,
    imports,
    lineage,
    notices,
    operator,
    queries,
    records,
    replays,
    runs,
    system,
    tags,
    tracking,
    training,
    ui,
)
from bashgym.daemon.api.middleware import EdgeMiddleware, IdempotencyMiddleware, RefusedBody
from bashgym.daemon.api.responses import error_response
from bashgym.daemon.services import Services
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger("bashgym.daemon")


# In the order they match: a route listed earlier wins a path both could take.
ROUTERS = (
    system,
    authority,
    lineage,
    runs,
    records,
    queries,
    ids,
    training,
    devices,
    device_groups,
    clusters,
    evaluations,
    exchange,
    campaigns,
    external,
    tracking,
    imports,
    notices,
    consumers,
    operator,
    artifacts,
    tags,
    ui,  # last: its catch-all answers any other /ui path with a page
)


def register_routes(app: FastAPI) -> None:
    # Each router's routes already carry its prefix; adding them to the app's own router keeps them
    # plain APIRoutes (include_router wraps them in lazily resolved branches).
    for module in ROUTERS:
        app.router.routes.extend(module.router.routes)


def create_app(services: Services) -> FastAPI:
    app = FastAPI(
        title="BashGym daemon",
        version=services.version,
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
    )
    app.state.services = services
    _install_error_handlers(app)
    app.add_exception_handler(replays.Replay, replays.answer)
    register_routes(app)
    _document_errors(app)
    app.add_middleware(IdempotencyMiddleware, ledger=services.ledger)
    app.add_middleware(
        EdgeMiddleware,
        max_body_bytes=services.settings.max_body_bytes,
        max_upload_bytes=services.settings.max_upload_bytes,
    )
    return app


ERROR_STATUSES = ("401", "403", "404", "409", "413", "422", "429", "500", "503")


def _document_errors(app: FastAPI) -> None:
    """Add the error shape to every operation when the OpenAPI document is first built.

    Declaring `responses=` on each route instead builds ~300 pydantic fields at start-up (0.5 s here).
    """
    from bashgym.client.models import ErrorResponse

    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        schema.setdefault("components", {}).setdefault("schemas", {})["ErrorResponse"] = (
            ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        )
        defs = schema["components"]["schemas"]["ErrorResponse"].pop("$defs", {})
        schema["components"]["schemas"].update(defs)
        ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                _hoist_body_defs(operation, schema["components"]["schemas"])
                responses = operation.setdefault("responses", {})
                _document_replay(responses)
                for status in ERROR_STATUSES:
                    responses.setdefault(status, {"description": "Error", **ref})
                responses["422"] = {"description": "Invalid request or rejected by a rule", **ref}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _hoist_body_defs(operation: dict[str, Any], components: dict[str, Any]) -> None:
    """A body schema given inline (the metrics route's) keeps its models under `$defs`, which no
    reference outside it resolves: move them to the components and point the references there."""
    for content in operation.get("requestBody", {}).get("content", {}).values():
        body = content.get("schema", {})
        defs = body.pop("$defs", None)
        if defs:
            components.update(defs)
            content["schema"] = json.loads(json.dumps(body).replace('"#/$defs/', '"#/components/schemas/'))


def _document_replay(responses: dict[str, Any]) -> None:
    """A ledger write answers 201 when it records and 200 when it replays one already recorded."""
    for recorded, other in (("201", "200"), ("200", "201")):
        if recorded in responses and other not in responses:
            described = "Replayed: the same write was already recorded" if other == "200" else "Recorded"
            responses[other] = {**responses[recorded], "description": described}
            return


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(BashGymError)
    async def _bashgym(request: Request, exc: BashGymError) -> Response:
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, RateLimited) else None
        return error_response(exc.code, exc.message, exc.status, hint=exc.hint, details=exc.details, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
        return _validation_answer(request, [_with_line(err, exc.body) for err in exc.errors()])

    @app.exception_handler(ValidationError)
    async def _invalid_model(request: Request, exc: ValidationError) -> Response:
        return _validation_answer(request, [dict(e) for e in exc.errors()])

    @app.exception_handler(OverflowError)
    async def _overflow(request: Request, exc: OverflowError) -> Response:
        # SQLite stores 64-bit integers; a larger one in a body or query fails where it is bound.
        return error_response(
            "invalid_request",
            f"A number in the request is too large ({exc}); integers must lie between -2**63 and 2**63-1.",
            422,
            hint="Fix the number and resend; nothing was recorded.",
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            # FastAPI's answer to whatever reading or parsing a body raised.
            cause = exc.__cause__
            if isinstance(cause, RefusedBody):  # EdgeMiddleware's limits, raised as the body arrived
                return error_response(cause.code, cause.message, cause.status, hint=cause.hint)
            return error_response(
                "invalid_json",
                f"Request body is not valid JSON: {_unreadable(cause)}.",
                422,
                hint="Send a valid JSON document.",
            )
        if exc.status_code == 404:
            return error_response(
                "route_not_found",
                f"No route {request.method} {request.url.path}.",
                404,
                hint="See the API at /v1/openapi.json.",
            )
        if exc.status_code == 405:
            return error_response(
                "method_not_allowed",
                f"{request.method} is not allowed on {request.url.path}.",
                405,
                hint="See the API at /v1/openapi.json.",
            )
        return error_response("http_error", str(exc.detail), exc.status_code)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> Response:
        reference = secrets.token_hex(3)
        log.exception("Internal error (ref %s) on %s %s", reference, request.method, request.url.path)
        return error_response(
            "internal_error",
            f"Internal error (ref {reference}); it has been logged.",
            500,
            reference=reference,
            hint="Quote the reference when you report it.",
        )


def _unreadable(cause: BaseException | None) -> str:
    if isinstance(cause, UnicodeDecodeError):
        return "it is not UTF-8 text"
    return f"it could not be read ({type(cause).__name__})"


def _with_line(reported: Any, document: Any) -> dict[str, Any]:
    """FastAPI reports malformed JSON at a character offset; say the line and column, as the parsers we call do."""
    err: dict[str, Any] = dict(reported)
    loc = err.get("loc", ())
    if err.get("type") == "json_invalid" and isinstance(document, str) and len(loc) == 2 and isinstance(loc[1], int):
        line = document.count("\n", 0, loc[1]) + 1
        column = loc[1] - (document.rfind("\n", 0, loc[1]) + 1) + 1
        reason = err.get("ctx", {}).get("error", "invalid")
        err["ctx"] = {"error": f"{reason} at line {line} column {column}"}
    return err


MAX_PROBLEMS = 50  # listed in one answer; a request with more is counted


def _validation_answer(request: Request, errors: list[dict[str, Any]]) -> Response:
    # An unknown field first: `titel` explains the missing `title`, and its suggestion is the fix.
    errors = sorted(errors, key=lambda err: err.get("type") != "extra_forbidden")
    problems = [_describe(request, err) for err in errors[:MAX_PROBLEMS]]
    first = problems[0]
    if errors[0].get("type") == "json_invalid":
        return error_response("invalid_json", first, 422, hint="Send a valid JSON document.")
    # Every problem at once: a request fixed one error per round trip takes seven round trips for seven.
    more = f" (and {len(errors) - MAX_PROBLEMS} more)" if len(errors) > MAX_PROBLEMS else ""
    message = first if len(problems) == 1 else f"{len(errors)} problems in the request: {' '.join(problems)}{more}"
    return error_response(
        "invalid_request", message, 422, hint="Fix the named fields and resend.", details={"problems": problems}
    )


def _describe(request: Request, err: dict[str, Any]) -> str:
    loc = [str(part) for part in err.get("loc", ()) if part != "body"]
    where = ".".join(loc) or "body"
    if err.get("type") == "json_invalid":
        return f"Request body is not valid JSON: {err.get('ctx', {}).get('error', err.get('msg'))}."
    if err.get("type") == "extra_forbidden":
        return f"`{where}` is not a field{_suggest(request, loc[-1] if loc else '')}"
    if err.get("type") == "missing":
        return f"`{where}` is required."
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"`{where}`: {message}"


def _suggest(request: Request, name: str) -> str:
    route = request.scope.get("route")
    body_field = getattr(route, "body_field", None)
    model = getattr(getattr(body_field, "field_info", None), "annotation", None)
    fields = list(getattr(model, "model_fields", {}) or {})
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else "."
