"""`bashgym doctor` reports each external surface, informationally: Hugging Face Jobs (the token variable set or not;
when set, who the Hub says it is and its role, the allowed images and the job token's identity, or what stops every
submission) and each configured provider (its key variable set or not). An unconfigured surface is no fault of the
daemon, and no secret is ever shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from bashgym.ledger.store import Ledger

from tests.support.helpers import inprocess_daemon
from tests.support.hub_standin import HubStandIn, TokenInfo

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
TOKEN, JOB_TOKEN, KEY = "hf_doctor_secret_token", "hf_doctor_job_token", "sk-doctor-secret-key"
IMAGE = "ghcr.io/acme/bashgym-job@sha256:" + "0" * 64
GRANTS = (("acme", ("repo.content.read", "repo.write")),)
HUB_TOKENS = {
    TOKEN: TokenInfo(user="alice", role="write", orgs=("acme",)),
    JOB_TOKEN: TokenInfo("acme-bot", "fineGrained", ("acme",), scoped=GRANTS),
}
PROVIDERS = {
    "acme": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "ACME_KEY"},
    "other": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "OTHER_KEY"},
}


async def surface_checks(api: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    answer = await api.get("/v1/doctor")
    assert answer.status_code == 200, answer.text
    assert TOKEN not in answer.text and KEY not in answer.text and JOB_TOKEN not in answer.text
    return {c["check"]: c for c in answer.json()["checks"] if c["check"].startswith("surface ")}


async def test_doctor_shows_the_hub_identity_and_which_provider_keys_are_set(ledger: Ledger, tmp_path: Path) -> None:
    with HubStandIn(tokens=HUB_TOKENS) as hub:
        environ = {"HF_TOKEN": TOKEN, "HF_JOB_TOKEN": JOB_TOKEN, "ACME_KEY": KEY}
        configured = {"hf_namespaces": ["acme"], "hf_job_images": [IMAGE], "providers": PROVIDERS}
        async with inprocess_daemon(ledger, tmp_path / "home", environ, hf_endpoint=hub.url, **configured) as api:
            checks = await surface_checks(api)
    assert set(checks) == {"surface hf-jobs", "surface managed:acme", "surface managed:other"}
    assert all(c["required"] is False for c in checks.values()), "informational: never a daemon fault"
    hf = checks["surface hf-jobs"]
    assert hf["ready"] and "verified as alice, role write" in hf["detail"], hf
    assert "$HF_JOB_TOKEN (verified as acme-bot, role fineGrained), 1 allowed image" in hf["detail"], hf
    assert (hf["facts"]["verified_as"], hf["facts"]["role"], hf["facts"]["orgs"]) == ("alice", "write", ["acme"])
    assert hf["facts"]["job_images"] == [IMAGE] and hf["facts"]["job_token_set"] is True
    assert checks["surface managed:acme"]["ready"] and checks["surface managed:acme"]["detail"] == "key set"
    other = checks["surface managed:other"]
    assert not other["ready"] and "$OTHER_KEY is not set" in other["detail"]
    assert json.dumps(other["facts"]).count("OTHER_KEY") == 1, "the variable's name, never a value"


async def test_doctor_says_an_unset_hub_token_is_not_configured_and_still_ready(ledger: Ledger, tmp_path: Path) -> None:
    async with inprocess_daemon(ledger, tmp_path / "home", {}) as api:
        checks = await surface_checks(api)
        answer = (await api.get("/v1/doctor")).json()
    hf = checks["surface hf-jobs"]
    assert hf["ready"] and not hf["required"] and hf["facts"]["token_set"] is False
    assert "not configured (optional): $HF_TOKEN is not set" in hf["detail"]
    assert not [c for c in checks if c.startswith("surface managed:")], "no provider configured, none listed"
    failing = [c["check"] for c in answer["checks"] if c["required"] and not c["ready"]]
    assert not [c for c in failing if c.startswith("surface ")]


@pytest.mark.parametrize(
    ("environ", "images", "expected"),
    [
        ({"HF_TOKEN": TOKEN, "HF_JOB_TOKEN": JOB_TOKEN}, [], "no job image is allowed (set BASHGYM_HF_JOB_IMAGES"),
        ({"HF_TOKEN": TOKEN}, [IMAGE], "no job token: $HF_JOB_TOKEN is not set"),
        ({"HF_TOKEN": TOKEN, "HF_JOB_TOKEN": TOKEN}, [IMAGE], "is the daemon's own token"),
    ],
)
async def test_doctor_says_what_stops_every_job_submission(
    ledger: Ledger, tmp_path: Path, environ: dict[str, str], images: list[str], expected: str
) -> None:
    with HubStandIn(tokens=HUB_TOKENS) as hub:
        configured = {"hf_namespaces": ["acme"], "hf_job_images": images}
        async with inprocess_daemon(ledger, tmp_path / "home", environ, hf_endpoint=hub.url, **configured) as api:
            hf = (await surface_checks(api))["surface hf-jobs"]
    assert not hf["ready"] and not hf["required"], hf
    assert "but no job can be submitted" in hf["detail"] and expected in hf["detail"], hf
