"""`bashgym ui`: a one-time link that signs this token's holder in to the web view (and opens it where it can)."""

from __future__ import annotations

import argparse
import sys

from bashgym.cli.registry import Ctx, command, done
from bashgym.client.errors import EXIT_OK


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-open", action="store_true", help="only print the link (it opens in a browser where one is available)"
    )


@command("ui", help="sign in to the web view: print (and open) a one-time link, good for two minutes")(_args)
async def ui(ctx: Ctx) -> int:
    link = await ctx.client.request("POST", "/v1/ui/links", params={"workspace": ctx.workspace})
    if ctx.as_json:
        return done(ctx, link)
    print(link["url"])
    seconds = int(link["expires_in_s"])
    print(f"(good once, for {seconds} s; it signs the browser in as this token's holder)", file=sys.stderr)
    if not ctx.args.no_open and _has_display(ctx.environ):
        import webbrowser

        webbrowser.open(link["url"])
    return EXIT_OK


def _has_display(environ: dict[str, str]) -> bool:
    """A browser can be opened: a desktop session (macOS always has one)."""
    return sys.platform == "darwin" or bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))
