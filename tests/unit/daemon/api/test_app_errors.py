"""The error shape in the cases a live daemon rarely shows: an unexpected exception."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from bashgym.daemon.api.app import create_app
from bashgym.daemon.api.middleware import MAX_JSON_DEPTH, _NestingScan, json_nesting
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.services import Services
from bashgym.daemon.settings import load_settings
from bashgym.ledger.store import Ledger

pytestmark = pytest.mark.anyio


async def test_an_unexpected_exception_is_500_with_a_reference_and_no_traceback(
    ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings({}, home=str(tmp_path))
    app = create_app(Services(settings, ledger, BlobStore(tmp_path / "artifacts"), "test", 0.0))

    @app.get("/v1/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals at /srv/x")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="bashgym.daemon"):
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answer = await client.get("/v1/boom")
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["code"] == "internal_error"
    assert error["reference"] in error["message"]
    assert "Traceback" not in answer.text and "secret internals" not in answer.text
    assert f"ref {error['reference']}" in caplog.text
    assert "RuntimeError" in caplog.text


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"", 0),
        (b'{"a": 1}', 1),
        (b'{"a": [[1], {"b": []}], "c": {}}', 4),
        (b"[" * 1000 + b"]" * 1000, 1000),
        (b"[" * 50_000, 50_000),  # never closed: a parser still recurses that deep before it fails
        (b"[" + b"[[]]," * 1_000 + b"[[]]]", 3),
        (b"[" + b",".join([b"[" * 63 + b"]" * 63] * 100) + b"]", 64),
        (b'{"a": "[[[{{{", "b": "]]]"}', 1),  # brackets in strings do not count
        (b'{"a": "\\"[[[", "b": "\\\\", "c": [[]]}', 3),  # nor after an escaped quote; an escaped backslash ends
        (b'{"a": "\\\\\\"[[["}', 1),  # an escaped backslash, then an escaped quote: still inside the string
        (b'{"a": "\\\\\\\\", "b": [[]], "c": "\\\\\\"]]"}', 3),  # runs of backslashes, however cut
        (b'["unterminated [[[[', 1),  # what follows an unterminated string's quote is inside it
        ('{"a": "\u2200", "b": [[]]}'.encode("utf-16-le"), 3),  # U+2200 is the bytes 00 22: a quote
        ('{"a": "\u2200", "b": [[]]}'.encode("utf-32"), 3),
        ('{"a": "\u00e9[", "b": "\u4e16"}'.encode(), 1),
    ],
)
def test_json_nesting_counts_the_brackets_outside_strings(body: bytes, depth: int) -> None:
    assert json_nesting(body, limit=10**9) == depth
    assert json_nesting(body) == depth if depth <= MAX_JSON_DEPTH else json_nesting(body) > MAX_JSON_DEPTH
    for size in (1, 4, 5, 7, 64):  # as the body arrives, in pieces that cut through escapes and strings
        scan = _NestingScan()
        for start in range(0, len(body), size):
            scan.add(body[start : start + size])
        assert scan.depth(limit=10**9) == depth, f"in pieces of {size}"


HOSTILE_8MB: dict[str, tuple[Callable[[], bytes], int]] = {
    "openers": (lambda: b"[" * 8_000_000, MAX_JSON_DEPTH + 1),  # json.loads gives up at once: so must the scan
    "empty-arrays-at-the-limit": (lambda: b"[" * 63 + b"[]," * 2_666_000 + b"[]" + b"]" * 63, MAX_JSON_DEPTH),
    "brackets-in-a-string": (lambda: b'{"a": ' * 65 + b'"' + b"[" * 8_000_000 + b'"' + b"}" * 65, MAX_JSON_DEPTH + 1),
}


@pytest.mark.parametrize("shape", HOSTILE_8MB)
def test_json_nesting_of_a_hostile_8mb_body_stops_past_the_limit(shape: str) -> None:
    # How long it takes is bench/json_nesting.py's to measure (~0.03 s here): a unit test asserts no wall-clock time.
    make, depth = HOSTILE_8MB[shape]
    found = json_nesting(make())
    assert found == depth if depth <= MAX_JSON_DEPTH else found > MAX_JSON_DEPTH
