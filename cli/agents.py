"""`bashgym mcp`: the agent tool surface, an MCP server over stdio, as the principal of this CLI's token."""

from __future__ import annotations

import argparse

from bashgym.cli.registry import Ctx, command
from bashgym.client.errors import EXIT_OK


def _mcp_args(parser: argparse.ArgumentParser) -> None:
    """No options of its own: the daemon (--api) and the token (--token, BASHGYM_TOKEN) are the CLI's."""


@command(
    "mcp",
    help="serve the workspace to coding agents as MCP tools over stdio, with this token's authority (docs/mcp.md)",
)(_mcp_args)
async def mcp(ctx: Ctx) -> int:
    from bashgym.agents.server import serve

    await serve(ctx.client, ctx.workspace)
    return EXIT_OK
