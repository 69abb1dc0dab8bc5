"""`bashgym mcp`: the MCP server. It asks the daemon who its token acts as, offers the tools that principal's
capabilities allow, refuses an argument a tool does not take (with the closest one it does), serves the skill
bundle, RunCards and campaign reports as resources, and speaks MCP over stdio."""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import inspect
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bashgym.agents import external_jobs, hints, labels
from bashgym.agents.daemon import Daemon, refusal
from bashgym.agents.tools import Tool, build
from bashgym.client.errors import ApiError, DaemonUnreachable
from bashgym.client.http import DaemonClient
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

INSTRUCTIONS = """\
BashGym's experiment ledger, training and evidence, as tools. There is no implicit project: start with
list_experiment_projects, then get_experiment_context for the project you work on. Check a launch with
plan_training before start_training, and make the run official: name project, model_version and dataset_version
(create_project, register_model_version and register_dataset_version record them), or give a complete
tracking_context; without either the run is recorded under `unassigned`, which never ships. Give start_training an
idempotency_key. A loss curve or a smoke run is never a quality claim: promotion_gate
decides from evaluations against a pinned baseline. Destructive tools (stop_run, cancel_campaign,
conclude_campaign, promote_decide, amend_budget, cancel_external_job) ask for confirmation or need confirm: true.
The skills (resources under bashgym://skills/) say how the team works."""


async def serve(client: DaemonClient, workspace: str | None) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    server = await create(client, workspace)
    await server.run_stdio_async()


async def create(client: DaemonClient, workspace: str | None) -> MCPServer:
    try:
        principal = await client.whoami()
    except DaemonUnreachable as exc:
        return _without_daemon(exc)
    except ApiError as exc:
        raise SystemExit(f"bashgym mcp: the daemon refused this token: {refusal(exc)}") from exc
    # A token limited to one workspace works there: the daemon's default workspace is beyond it.
    daemon = Daemon(client, workspace or principal.workspace_id)
    held = set(principal.capabilities)
    every = [*build(daemon), *external_jobs.build(daemon), *labels.build(daemon)]
    offered = [tool for tool in every if tool.capability is None or tool.capability in held]
    server: MCPServer = MCPServer(
        name="bashgym",
        instructions=INSTRUCTIONS + f"\nThis server acts as {principal.actor_id}{_in(daemon.workspace)}.",
        log_level="WARNING",
        middleware=[StrictArguments({tool.name: tool for tool in offered})],
    )
    required = {tool.name: _required(tool) for tool in offered}
    for tool in offered:
        server.add_tool(
            _for_agents(tool, required),
            name=tool.name,
            description=tool.description,
            annotations=_annotations(tool),
            structured_output=True,
        )
        _publish_compact(server, tool.name)
    _skill_resources(server)
    if "ledger.read" in held:
        _ledger_resources(server, daemon)
    return server


def _without_daemon(exc: DaemonUnreachable) -> MCPServer:
    """No daemon answered at start: a server that says so, to the agent, rather than one that exits (its client sees
    only "Connection closed"). Its one tool answers how to start a daemon; restart this server once one runs."""
    said = f"{refusal(exc)} Then restart this MCP server (its tools are offered once it knows the token's rights)."
    server: MCPServer = MCPServer(name="bashgym", instructions=f"BashGym is not reachable: {said}", log_level="WARNING")

    async def daemon_status() -> dict[str, Any]:
        raise ToolError(said)

    server.add_tool(
        daemon_status,
        name="daemon_status",
        description="Why BashGym's tools are not offered: no daemon answered when this server started.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    return server


def _for_agents(tool: Tool, required: hints.Required) -> Any:
    """The tool, its answers' and refusals' next steps naming tools rather than CLI commands (agents/hints.py)."""

    @functools.wraps(tool.run)
    async def run(**arguments: Any) -> Any:
        known = {k: v for k, v in arguments.items() if isinstance(v, str)}
        try:
            answer = await tool.run(**arguments)
        except ToolError as exc:
            raise ToolError(hints.for_agents(str(exc), known, required)) from exc
        return hints.translate(answer, known, required)

    return run


def _annotations(tool: Tool) -> ToolAnnotations:
    """The hints that differ from MCP's defaults (not read-only, destructive, not idempotent, open world); a
    read-only tool's other hints mean nothing."""
    if tool.read_only:
        return ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return ToolAnnotations(
        destructive_hint=tool.destructive, idempotent_hint=tool.idempotent or None, open_world_hint=False
    )


def _publish_compact(server: MCPServer, name: str) -> None:
    """List the tool with a compact input schema and no output schema: an agent reads every tool's listing before
    its first call, so the listing says what to send (nothing the server checks anyway: lengths, titles, defaults
    of null). What a tool answers is still its model of agents/answers.py, checked by the SDK on every call; the
    answer carries its field names, and the description says what it holds."""
    registered = server._tool_manager.get_tool(name)  # the SDK has no public way to amend a registered tool
    assert registered is not None
    registered.parameters = _optional_omitted(compact_schema(registered.parameters))
    registered.__dict__["output_schema"] = None  # the listed schema only: answers stay structured


def compact_schema(node: Any) -> Any:
    """The JSON Schema without what is noise to an agent; `Optional[T]` as `"type": [T, "null"]`."""
    if isinstance(node, list):
        return [compact_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "$defs"):
            out[key] = {name: compact_schema(s) for name, s in value.items()}
        elif not _noise(key, value):
            out[key] = compact_schema(value)
    either = out.get("anyOf")
    if isinstance(either, list) and len(either) == 2 and {"type": "null"} in either:
        other = next(s for s in either if s != {"type": "null"})
        if isinstance(other.get("type"), str):
            out.pop("anyOf")
            out = {**other, "type": [other["type"], "null"], **out}
    return out


def _optional_omitted(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional argument whose default is null is listed by its type: an agent leaves it out (null is still
    taken, as the same)."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type")
        if name not in required and isinstance(kind, list) and "null" in kind and "default" not in prop:
            rest = [k for k in kind if k != "null"]
            prop["type"] = rest[0] if len(rest) == 1 else rest
    return schema


def _noise(key: str, value: Any) -> bool:
    return (
        (key in ("title", "maxLength", "minLength") and isinstance(value, str | int))
        or (key == "additionalProperties" and value is True)
        or (key == "default" and value is None)
    )


def _required(tool: Tool) -> tuple[str, ...]:
    parameters = inspect.signature(tool.run).parameters.values()
    return tuple(p.name for p in parameters if p.default is inspect.Parameter.empty and p.name != "ctx")


def _in(workspace: str | None) -> str:
    return f" in workspace {workspace}" if workspace else ""


class StrictArguments:
    """An argument a tool does not take is an error naming the closest one it does, not silently dropped: an
    agent that wrote `projct` must learn it before a default stands in for what it meant."""

    def __init__(self, tools: dict[str, Tool]) -> None:
        self.tools = tools
        self.known: dict[str, list[str]] = {}

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params if isinstance(getattr(ctx, "params", None), dict) else None
        if getattr(ctx, "method", "") == "tools/call" and params is not None:
            name = params.get("name")
            arguments = params.get("arguments") or {}
            known = self._known(ctx, str(name))
            if known is not None and isinstance(arguments, dict):
                unknown = [key for key in arguments if key not in known]
                if unknown:
                    said = " ".join(_not_an_argument(str(key), known) for key in unknown)
                    text = f"{said} {name} takes: {', '.join(sorted(known)) or 'no arguments'}. Nothing was done."
                    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await call_next(ctx)

    def _known(self, ctx: Any, name: str) -> list[str] | None:
        if name not in self.tools:
            return None
        if name not in self.known:
            signature = inspect.signature(self.tools[name].run)
            self.known[name] = [n for n in signature.parameters if n != "ctx"]
        return self.known[name]


def _not_an_argument(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"`{key}` is not an argument" + (f"; did you mean `{close[0]}`?" if close else ".")


def _skill_resources(server: MCPServer) -> None:
    """Each Markdown file of the skill bundle, as `bashgym://skills/<path>`."""
    root = Path(str(importlib.resources.files("bashgym.skills")))
    for path in sorted(root.rglob("*.md")):
        relative = path.relative_to(root).as_posix()
        if "/" not in relative:  # MAINTAINING.md is for the bundle's maintainers, not a skill
            continue
        server.resource(f"bashgym://skills/{relative}", name=relative, mime_type="text/markdown")(_reader(path))


def _reader(path: Path) -> Any:
    def read() -> str:
        return path.read_text(encoding="utf-8")

    return read


def _ledger_resources(server: MCPServer, daemon: Daemon) -> None:
    """RunCards and campaign report files, read through the daemon as the token's principal."""

    @server.resource(
        "bashgym://projects/{project}/runs/{run_id}/runcards",
        name="runcards",
        description="A run's RunCards (JSON), newest first, and what happened since.",
        mime_type="application/json",
    )
    async def runcards(project: str, run_id: str) -> str:
        try:
            listing = await daemon.client.request(
                "GET",
                f"/v1/projects/{quote(project, safe='')}/runs/{quote(run_id, safe='')}/runcards",
                params={"workspace": daemon.workspace},
            )
        except ApiError as exc:
            raise ResourceError(exc.message) from exc
        return json.dumps(listing, indent=2)

    async def report_file(project: str, report_id: str, name: str) -> bytes:
        try:
            return await daemon.client.raw(
                "GET",
                f"/v1/projects/{quote(project, safe='')}/reports/{quote(report_id, safe='')}/{quote(name, safe='')}",
                params={"workspace": daemon.workspace},
            )
        except ApiError as exc:
            raise ResourceError(exc.message) from exc

    @server.resource(
        "bashgym://projects/{project}/reports/{report_id}/charts/{name}",
        name="report-chart",
        description="A chart of a campaign report (PNG), e.g. metric.png, loss.png, budget.png.",
        mime_type="image/png",
    )
    async def report_chart(project: str, report_id: str, name: str) -> bytes:
        return await report_file(project, report_id, name)

    @server.resource(
        "bashgym://projects/{project}/reports/{report_id}/files/{name}",
        name="report-file",
        description="A text file of a campaign report: report.md, snapshot.json or manifest.json.",
        mime_type="text/plain",
    )
    async def report_text(project: str, report_id: str, name: str) -> str:
        return (await report_file(project, report_id, name)).decode("utf-8", errors="replace")
