"""Tenants for the attacks: tokens issued through the real API, each with the least privilege that might succeed."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.helpers import RunningDaemon


def issue_token(
    daemon: RunningDaemon,
    actor: str,
    profile: str,
    *,
    project: str | None = None,
    workspace: str | None = None,
    capabilities: tuple[str, ...] = (),
) -> str:
    """A bearer token issued by the admin: `profile` (plus explicit capabilities), scoped as given."""
    body: dict[str, Any] = {"actor_id": actor, "profile": profile, "capabilities": list(capabilities)}
    if project:
        body["project_id"] = project
    if workspace:
        body["workspace_id"] = workspace
    with daemon.client() as admin:
        answer = admin.post("/v1/auth/tokens", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["token"])


def tenant(daemon: RunningDaemon, token: str) -> httpx.Client:
    """An HTTP client holding `token` and nothing else."""
    return httpx.Client(base_url=daemon.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
