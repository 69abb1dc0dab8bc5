"""What every request passes before a handler: correlation ids, body size and nesting limits (EdgeMiddleware),
and the stored answers of idempotency keys (IdempotencyMiddleware)."""

import asyncio
import hashlib
import json
import logging
import re
import secrets
from itertools import accumulate
from typing import Any

from bashgym.client.errors import BashGymError
from bashgym.client.redaction import REDACTED, contains_secret, redact_text
from bashgym.client.validation import IDENTIFIER_RE
from bashgym.daemon.api import replays
from bashgym.daemon.api.responses import CORRELATION_HEADER, MUTATING, error_response
from bashgym.ledger.access import REQUEST_CLAIM, UNANSWERED, IdempotencyClaim
from bashgym.ledger.store import Ledger
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("bashgym.daemon")

IDEMPOTENCY_KEY_MAX = 200
# How deep arrays and objects may nest in a request body. Our own bodies nest a handful of levels; the
# parsers recurse once a level and fail far below what 8 MB can nest (json.loads near 1,000: a 500).
MAX_JSON_DEPTH = 64


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


# The routes whose body is a file (up to BASHGYM_MAX_UPLOAD_BYTES), not JSON: blobs and a tracked run's artifacts.
UPLOAD_PATH = re.compile(r"^/v1/(blobs|projects/[^/]+/tracked-runs/[^/]+/artifacts$)")


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
        is_upload = UPLOAD_PATH.match(scope["path"]) is not None
        limit = self.max_upload_bytes if is_upload else self.max_body_bytes

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
        # Uploads are any bytes, streamed to disk.
        await self.app(scope, _limited(receive, limit, is_json=not is_upload), send_with_id)


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


class RefusedBody(BashGymError):
    """A body refused as the app reads it: raised from receive(), and answered as itself wherever it surfaces."""


class _BodyTooLarge(RefusedBody):
    code = "payload_too_large"
    status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body is over the limit of {limit} bytes.", hint="Send smaller batches.")


class _NestedTooDeep(RefusedBody):
    code = "invalid_json"
    status = 422

    def __init__(self) -> None:
        super().__init__(
            f"Request body nests arrays and objects too deep; the limit is {MAX_JSON_DEPTH} levels.",
            hint="Send a flatter JSON document; nothing was recorded.",
        )


class IdempotencyMiddleware:
    """Same Idempotency-Key and body: the stored answer is replayed. Same key, other body: 409. Either only to a
    caller who passes the route's authorisation now, as the principal the key belongs to (replays.py)."""

    def __init__(self, app: ASGIApp, *, ledger: Ledger) -> None:
        self.app = app
        self.ledger = ledger
        # One request per (principal, key) at a time: a second one in flight waits, then replays the first's
        # answer, instead of both being carried out.
        self._in_flight: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}  # the lock and its users

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        key = headers.get(b"idempotency-key", b"").decode("latin-1")
        # An upload is idempotent by its content (a blob is stored once by its digest; an artifact's name holds one
        # digest), and replaying it by key would hold the whole file in memory: its body streams past.
        if scope["type"] != "http" or scope["method"] not in MUTATING or not key or UPLOAD_PATH.match(scope["path"]):
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
        except RefusedBody as exc:
            await error_response(exc.code, exc.message, exc.status, hint=exc.hint)(scope, receive, send)
            return
        principal = replays.principal_digest(scope)
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
            # Through the route's authorisation first: it hands the stored answer out, or refuses the caller.
            with replays.pending(_stored_answer(stored, digest, key)):
                await self.app(scope, _replay_body(body), send)
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


def _stored_answer(stored: dict[str, Any], digest: str, key: str) -> Response:
    """What a key's stored record answers a request with the same key: its answer, or a 409 (another body, or a
    request carried out but never answered)."""
    if stored["request_digest"] != digest:
        return error_response(
            "idempotency_key_reused",
            f"Idempotency-Key {key!r} was used with a different request ({stored['method']} {stored['path']}).",
            409,
            hint="Use a new key for a new request.",
        )
    if stored["status_code"] == UNANSWERED:
        cursor = json.loads(stored["response_json"]).get("cursor")
        return error_response(
            "idempotent_request_unanswered",
            f"The request with Idempotency-Key {key!r} ({stored['method']} {stored['path']}) was carried out, "
            f"but the daemon stopped before it answered; its writes are in the ledger (up to event {cursor}).",
            409,
            hint="Read the result instead of resending (bashgym ledger events, or the resource's GET route); "
            "it will not be carried out twice.",
        )
    return Response(
        _said_replayed(stored["response_json"]),
        status_code=stored["status_code"],
        media_type="application/json",
        headers={"Idempotent-Replayed": "true"},
    )


def _said_replayed(response_json: str) -> str:
    """The stored answer, saying `replayed: true` where it has that field: a retried call is told it changed
    nothing, not the first call's `false` (a launch's answer then reads its run's state anew: it may have ended)."""
    try:
        answer = json.loads(response_json)
    except ValueError:
        return response_json
    if not isinstance(answer, dict) or "replayed" not in answer:
        return response_json
    return json.dumps({**answer, "replayed": True})


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
