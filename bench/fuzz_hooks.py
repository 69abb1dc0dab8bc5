"""Schemathesis hooks of bench/fuzz_api.py: written paths land under the fuzzer's home; its token survives.

`POST /v1/ledger/backup?to=` and a model export's `to` name files on the daemon's host. The daemon confines
them to its operator's roots (README "Security model"); as a second guard, each generated target is rebased
under $FUZZ_HOME/targets (its shape is kept: relative stays relative, absolute becomes absolute under that
folder), and the daemon's own checks still meet it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import schemathesis

ROOT = Path(os.environ.get("FUZZ_HOME", "/nonexistent")) / "targets"
# The fuzzer's own token: revoking it would turn every later case into a 401 and test nothing more.
PROTECTED_TOKEN = os.environ.get("FUZZ_TOKEN_ID", "tok-admin")


def _rebased(value: Any) -> Any:
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    return str(ROOT / (re.sub(r"[^A-Za-z0-9_.-]", "_", value.lstrip("/"))[:100] or "root"))


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    path = case.operation.path
    if path.endswith("/ledger/backup") and isinstance(case.query, dict):
        case.query["to"] = _rebased(case.query.get("to"))
    if path.endswith("/export") and isinstance(case.body, dict):
        case.body["to"] = _rebased(case.body.get("to"))
    if path == "/v1/auth/tokens/{token_id}/revoke" and case.path_parameters.get("token_id") == PROTECTED_TOKEN:
        case.path_parameters["token_id"] = "tok-not-the-fuzzers"
