"""The error shape in the cases a live daemon rarely shows: an unexpected exception."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from bashgym.daemon.app import Services, create_app
from bashgym.daemon.blobs import BlobStore
from bashgym.daemon.settings import load_settings
from bashgym.ledger import Ledger

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
