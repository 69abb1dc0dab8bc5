"""How a tool reaches the daemon: one request as the token's principal, and a refusal turned into the tool error an
agent reads (the daemon's message, every problem, and what to do next), never a crash of the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bashgym.client.errors import ApiError
from bashgym.client.http import DaemonClient
from mcp.server.mcpserver.exceptions import ToolError


@dataclass
class Daemon:
    client: DaemonClient
    workspace: str | None = None

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        try:
            return await self.client.request(
                method,
                path,
                body=body,
                params={"workspace": self.workspace, **(params or {})},
                idempotency_key=idempotency_key,
                timeout_s=timeout_s,
            )
        except ApiError as exc:
            raise ToolError(refusal(exc)) from exc


def refusal(exc: ApiError) -> str:
    """The daemon's answer as one message: what happened (code and status), each problem, and the next step."""
    problems = [str(p) for p in exc.details.get("problems") or []]
    text = exc.message
    if len(problems) > 1:
        text = f"{text.split(':', 1)[0].rstrip('.')}: " + " ".join(f"({n}) {p}" for n, p in enumerate(problems, 1))
    where = f" [{exc.code}, HTTP {exc.status}]" if exc.status else f" [{exc.code}]"
    return f"{text}{where}" + (f" Next: {exc.hint}" if exc.hint else "")
