"""The FastAPI application: error shape, correlation ids, body limits and idempotency keys."""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from bashgym.daemon.authority import RateLimiter, WaitSlots
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.evaluations import EvaluationService
from bashgym.daemon.scheduler import ReportScheduler
from bashgym.daemon.settings import Settings
from bashgym.daemon.sinks import SinkForwarder
from bashgym.daemon.training import TrainingService
from bashgym.ledger import Ledger
from bashgym.ledger.access import REQUEST_CLAIM, UNANSWERED, IdempotencyClaim
from bashgym.ledger.errors import BashGymError, RateLimited
from bashgym.ledger.redaction import REDACTED, contains_secret, redact_text, redact_values
from bashgym.ledger.validation import IDENTIFIER_RE
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("bashgym.daemon")

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CORRELATION_HEADER = "x-correlation-id"
IDEMPOTENCY_KEY_MAX = 200
# How deep arrays and objects may nest in a request body. Our own bodies nest a handful of levels; the
# parsers recurse once a level and fail far below what 8 MB can nest (json.loads near 1,000: a 500).
MAX_JSON_DEPTH = 64


@dataclass
class Services:
    """What handlers reach through request.app.state.services."""

    settings: Settings
    ledger: Ledger
    blobs: BlobStore
    version: str
    started_monotonic: float
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter(600, 120))
    training: TrainingService | None = None
    evaluations: EvaluationService | None = None
    scheduler: ReportScheduler | None = None
    sinks: SinkForwarder | None = None
    # When a principal holding delegate.discord (the bot) last asked for notices: the bot is connected
    # while it keeps long-polling them.
    bot_polled_at: float | None = None
    discord_configured: bool = False  # a bot token is set in the daemon's environment
    nemo_key_set: bool = False  # the variable nemo_api_key_env names is set
    read_limiter: RateLimiter = field(default_factory=lambda: RateLimiter(6000, 600, what="reads"))
    # Keyed by client address: requests whose token is unknown, revoked, expired or malformed.
    bad_token_limiter: RateLimiter = field(default_factory=lambda: RateLimiter(60, 20, what="failed sign-ins"))
    waits: WaitSlots = field(default_factory=lambda: WaitSlots(8))

    @property
    def evaluator(self) -> EvaluationService:
        """The evaluation service; made on first use where the caller (a test harness) supplied none."""
        if self.evaluations is None:
            self.evaluations = EvaluationService(self.settings, self.ledger, self.blobs)
        return self.evaluations


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialise with the C json encoder: jsonable_encoder costs ~1 us per value on 100k-point trends."""
    if isinstance(body, BaseModel):
        content = body.model_dump_json()
    else:
        content = json.dumps(body, separators=(",", ":"), allow_nan=False)
    return Response(content=content, status_code=status, media_type="application/json", headers=headers)


def error_response(
    code: str,
    message: str,
    status: int,
    *,
    hint: str = "",
    reference: str | None = None,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    error: dict[str, Any] = {"code": code, "message": redact_text(message), "hint": redact_text(hint)}
    if reference:
        error["reference"] = reference
    if details:
        error["details"] = redact_values(details)  # they may quote the request back, as the message does
    return json_response({"error": error}, status, headers)


def create_app(services: Services) -> FastAPI:
    from bashgym.daemon.api import register_routes

    app = FastAPI(
        title="BashGym daemon",
        version=services.version,
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
    )
    app.state.services = services
    _install_error_handlers(app)
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
    from bashgym.daemon.api_models import ErrorResponse

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
            if isinstance(cause, _RefusedBody):  # EdgeMiddleware's limits, raised as the body arrived
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


def _validation_answer(request: Request, errors: list[dict[str, Any]]) -> Response:
    # An unknown field first: `titel` explains the missing `title`, and its suggestion is the fix.
    errors = sorted(errors, key=lambda err: err.get("type") != "extra_forbidden")
    problems = [_describe(request, err) for err in errors[:10]]
    first = problems[0]
    if errors[0].get("type") == "json_invalid":
        return error_response("invalid_json", first, 422, hint="Send a valid JSON document.")
    message = first if len(problems) == 1 else f"{len(errors)} problems in the request; first: {first}"
    return error_response(
        "invalid_request", message, 422, hint="Fix the named fields and resend.", details={"problems": problems}
    )


def _describe(request: Request, err: dict[str, Any]) -> str:
    loc = [str(part) for part in err.get("loc", ()) if part != "body"]
    where = ".".join(loc) or "body"
    if err.get("type") == "json_invalid":
        return f"Request body is not valid JSON: {err.get('ctx', {}).get('error', err.get('msg'))}."
    if err.get("type") == "extra_forbidden":
        suggestion = _suggest(request, loc[-1] if loc else "")
        return f"`{where}` is not a field{suggestion}."
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
    return f"; did you mean `{close[0]}`?" if close else ""


# For the nesting scan: brackets become ( and ), every other byte but a quote goes.
_AS_PARENS = bytes.maketrans(b"[{]}", b"(())")
_NOT_QUOTE_OR_BRACKET = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_DEPTH_STEP = tuple(1 if byte == ord("(") else -1 if byte == ord(")") else 0 for byte in range(256))
_SCAN_CHUNK = 65_536
_UTF8 = frozenset({"utf-8", "utf-8-sig"})


def json_nesting(body: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep arrays and objects nest in a JSON body, read from its bytes without parsing it.

    Exact for valid JSON up to `limit`; past it, some depth past `limit` (the count stops there, so a
    hostile 8 MB body costs milliseconds). For broken JSON, at least the depth a parser reaches before it
    fails. UTF-16 and UTF-32, which json.loads also reads, are scanned as UTF-8: their raw bytes can hold
    stray quotes (U+2200 is 00 22).
    """
    encoding = json.detect_encoding(body)
    if encoding not in _UTF8:
        try:
            body = body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return 0  # no parser reads it either
    return _depth_of(_marks_of(body), limit)


def _marks_of(text: bytes) -> bytes:
    """The quotes and brackets of UTF-8 JSON text, escaped quotes and backslashes dropped first (C loops only:
    ~3 ms for 8 MB)."""
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    return text.translate(_AS_PARENS, _NOT_QUOTE_OR_BRACKET)


def _depth_of(marks: bytes, limit: int) -> int:
    """The depth the brackets of _marks_of give, strings (what lies between quotes) left out."""
    marks = marks.replace(b'""', b"")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])  # odd pieces lie inside strings (the last, if unterminated)
    if len(marks) > limit and b"(" * (limit + 1) in marks:
        return limit + 1
    inner = marks.replace(b"()", b"")  # the innermost pairs, counted back as one level: few brackets remain
    innermost = int(len(inner) < len(marks))
    deepest = running = 0
    for start in range(0, len(inner), _SCAN_CHUNK):
        sums = list(accumulate(map(_DEPTH_STEP.__getitem__, inner[start : start + _SCAN_CHUNK]), initial=running))
        deepest, running = max(deepest, max(sums)), sums[-1]
        if deepest + innermost > limit:
            break
    return deepest + innermost


class _NestingScan:
    """json_nesting of a body read in pieces: each piece is cut down to its quotes and brackets as it arrives
    (no second copy of an 8 MB body is held), and the depth is counted once all is in."""

    def __init__(self) -> None:
        self._marks: list[bytes] = []
        self._carry = b""  # a backslash whose escaped byte opens the next piece
        self._whole: list[bytes] | None = None  # a body read whole: UTF-16 or UTF-32, or a first piece too short

    def add(self, piece: bytes) -> None:
        if not piece:
            return
        is_first = self._whole is None and not self._marks and not self._carry
        if is_first and (len(piece) < 4 or json.detect_encoding(piece) not in _UTF8):
            self._whole = []
        if self._whole is not None:
            self._whole.append(piece)
            return
        piece = self._carry + piece
        trailing = len(piece) - len(piece.rstrip(b"\\")) if piece.endswith(b"\\") else 0
        self._carry = b"\\" if trailing % 2 else b""
        self._marks.append(_marks_of(piece[: len(piece) - len(self._carry)]))

    def depth(self, limit: int = MAX_JSON_DEPTH) -> int:
        if self._whole is not None:
            return json_nesting(b"".join(self._whole), limit)
        return _depth_of(b"".join(self._marks), limit)


class EdgeMiddleware:
    """Correlation ids on every answer, and body size and nesting limits before anything parses the body."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_upload_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        correlation = headers.get(CORRELATION_HEADER.encode(), b"").decode("latin-1")
        # A correlation id is recorded on every event of the request: one shaped like a credential is not kept.
        if (
            not correlation
            or len(correlation) > 160
            or not IDENTIFIER_RE.match(correlation)
            or contains_secret(correlation)
        ):
            correlation = f"cor-{secrets.token_hex(8)}"
        scope.setdefault("state", {})["correlation_id"] = correlation
        limit = self.max_upload_bytes if scope["path"].startswith("/v1/blobs") else self.max_body_bytes

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-correlation-id", correlation.encode())]
            await send(message)

        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            response = error_response(
                "payload_too_large",
                f"The request body is {int(declared)} bytes; the limit is {limit}.",
                413,
                hint="Send smaller batches.",
            )
            await response(scope, receive, send_with_id)
            return
        is_json = not scope["path"].startswith("/v1/blobs")  # blobs are any bytes, streamed to disk
        await self.app(scope, _limited(receive, limit, is_json=is_json), send_with_id)


def _limited(receive: Receive, limit: int, *, is_json: bool) -> Receive:
    """The body counted against `limit` and, a JSON body, its nesting checked, both as the app reads it: no
    request waits for its whole body sooner than its handler would (the metrics route reads it last)."""
    seen = 0
    scan = _NestingScan() if is_json else None

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            piece = message.get("body", b"")
            seen += len(piece)
            if seen > limit:
                raise _BodyTooLarge(limit)
            if scan is not None:
                scan.add(piece)
                if not message.get("more_body") and scan.depth() > MAX_JSON_DEPTH:
                    raise _NestedTooDeep()
        return message

    return wrapped


class _RefusedBody(BashGymError):
    """A body refused as the app reads it: raised from receive(), and answered as itself wherever it surfaces."""


class _BodyTooLarge(_RefusedBody):
    code = "payload_too_large"
    status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body is over the limit of {limit} bytes.", hint="Send smaller batches.")


class _NestedTooDeep(_RefusedBody):
    code = "invalid_json"
    status = 422

    def __init__(self) -> None:
        super().__init__(
            f"Request body nests arrays and objects too deep; the limit is {MAX_JSON_DEPTH} levels.",
            hint="Send a flatter JSON document; nothing was recorded.",
        )


class IdempotencyMiddleware:
    """Same Idempotency-Key and body: the stored answer is replayed. Same key, other body: 409."""

    def __init__(self, app: ASGIApp, *, ledger: Ledger) -> None:
        self.app = app
        self.ledger = ledger
        # One request per (principal, key) at a time: a second one in flight waits, then replays the first's
        # answer, instead of both being carried out.
        self._in_flight: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}  # the lock and its users

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        key = headers.get(b"idempotency-key", b"").decode("latin-1")
        if scope["type"] != "http" or scope["method"] not in MUTATING or not key:
            await self.app(scope, receive, send)
            return
        if len(key) > IDEMPOTENCY_KEY_MAX or not key.isprintable() or not key.isascii():
            response = error_response(
                "invalid_request",
                f"The Idempotency-Key header must be 1..{IDEMPOTENCY_KEY_MAX} printable ASCII characters; "
                f"this one is {len(key)} characters long.",
                422,
                hint="Send a short random key, e.g. a UUID; nothing was recorded.",
            )
            await response(scope, receive, send)
            return
        try:
            body = await _read_body(receive)
        except _RefusedBody as exc:
            await error_response(exc.code, exc.message, exc.status, hint=exc.hint)(scope, receive, send)
            return
        principal = hashlib.sha256(headers.get(b"authorization", b"")).hexdigest()
        stored_key = key_digest(key)
        digest = hashlib.sha256(
            b"\n".join([scope["method"].encode(), scope["path"].encode(), scope.get("query_string", b""), body])
        ).hexdigest()
        slot = (principal, stored_key)
        lock, users = self._in_flight.get(slot, (asyncio.Lock(), 0))
        self._in_flight[slot] = (lock, users + 1)
        try:
            async with lock:
                await self._once(scope, receive, send, principal, key, stored_key, digest, body)
        finally:
            lock, users = self._in_flight[slot]
            if users == 1:
                del self._in_flight[slot]
            else:
                self._in_flight[slot] = (lock, users - 1)

    async def _once(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: str,
        key: str,
        stored_key: str,
        digest: str,
        body: bytes,
    ) -> None:
        stored = await self.ledger.find_idempotent(principal, stored_key)
        if stored is not None:
            await self._replay(stored, digest, key, scope, receive, send)
            return
        captured = _Capture()
        # The request's first committing write records the key in its own transaction (ledger.access).
        claim = IdempotencyClaim(principal, stored_key, scope["method"], scope["path"], digest)
        token = REQUEST_CLAIM.set(claim)
        try:
            await self.app(scope, _replay_body(body), captured.send)
        finally:
            claim.is_closed = True
            REQUEST_CLAIM.reset(token)
        # Stored before the answer leaves, so a retry that follows at once already finds it. An error
        # answer is kept too when the request wrote before failing: a retry must not write again.
        if captured.status is not None and (captured.status < 400 or claim.is_recorded):
            await self.ledger.store_idempotent(
                principal=principal,
                key=stored_key,
                method=scope["method"],
                path=scope["path"],
                request_digest=digest,
                status_code=captured.status,
                response_json=replayable_answer(captured.body.decode() or "null"),
            )
        for message in captured.messages:
            await send(message)

    async def _replay(
        self, stored: dict[str, Any], digest: str, key: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if stored["request_digest"] != digest:
            response = error_response(
                "idempotency_key_reused",
                f"Idempotency-Key {key!r} was used with a different request ({stored['method']} {stored['path']}).",
                409,
                hint="Use a new key for a new request.",
            )
        elif stored["status_code"] == UNANSWERED:
            cursor = json.loads(stored["response_json"]).get("cursor")
            response = error_response(
                "idempotent_request_unanswered",
                f"The request with Idempotency-Key {key!r} ({stored['method']} {stored['path']}) was carried out, "
                f"but the daemon stopped before it answered; its writes are in the ledger (up to event {cursor}).",
                409,
                hint="Read the result instead of resending (bashgym ledger events, or the resource's GET route); "
                "it will not be carried out twice.",
            )
        else:
            response = Response(
                stored["response_json"],
                status_code=stored["status_code"],
                media_type="application/json",
                headers={"Idempotent-Replayed": "true"},
            )
        await response(scope, receive, send)


def key_digest(key: str) -> str:
    """What the ledger keeps of an Idempotency-Key: its digest, so a key that is (or holds) a secret is never stored."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


SECRET_NOT_REPLAYED = (
    "This answer held a secret, shown once when the request was carried out. It cannot be shown again."
)


def replayable_answer(text: str) -> str:
    """The answer as stored for replay: a secret in it (an issued token) is shown once, never stored.

    A value that is a credential as a whole becomes null, and the answer says why; credentials inside
    other text are redacted."""
    try:
        answer = json.loads(text)
    except ValueError:
        return redact_text(text)
    cleaned, removed = _without_secrets(answer)
    if removed and isinstance(cleaned, dict):
        cleaned["notice"] = SECRET_NOT_REPLAYED
    return json.dumps(cleaned, separators=(",", ":"), allow_nan=False)


def _without_secrets(value: Any) -> tuple[Any, bool]:
    if isinstance(value, str):
        redacted = redact_text(value)
        if redacted == value:
            return value, False
        return (None if redacted == REDACTED else redacted), True
    if isinstance(value, dict):
        items = {k: _without_secrets(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, any(gone for _, gone in items.values())
    if isinstance(value, list):
        cleaned = [_without_secrets(v) for v in value]
        return [v for v, _ in cleaned], any(gone for _, gone in cleaned)
    return value, False


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay_body(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


class _Capture:
    """Holds a response back until its idempotency record is stored."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.status: int | None = None
        self.body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")
        self.messages.append(message)


def uptime_s(services: Services) -> float:
    return round(time.monotonic() - services.started_monotonic, 3)
