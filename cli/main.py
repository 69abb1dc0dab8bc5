"""`bashgym`: the terminal and agent adapter over the daemon client. One place turns errors into exit codes."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from typing import Any

from bashgym.cli import command_index
from bashgym.cli.command_index import apply_default_project, default_project
from bashgym.cli.completion_walk import complete
from bashgym.cli.ids import resolve_prefixes
from bashgym.cli.output import error
from bashgym.cli.registry import COMMANDS, GROUP_HELP, MODULE_OF, Ctx, Handler
from bashgym.cli.usage import Parser, UsageError, check_words
from bashgym.cli.usage import report as report_usage
from bashgym.client.errors import EXIT_RULE, EXIT_UNAVAILABLE, EXIT_USAGE, ApiError, BashGymError, exit_code_for_status
from bashgym.client.redaction import register_secret_values
from bashgym.daemon.settings import load_settings, secret_values
from bashgym.daemon.version import bashgym_version
from pydantic import ValidationError

# Each command module registers its commands when imported; a command line imports only its own (import_commands).
COMMAND_MODULES = tuple(
    f"bashgym.cli.{name}"
    for name in (
        "agents",
        "auth",
        "budget",
        "campaigns",
        "clusters",
        "completion",
        "demo",
        "devices",
        "downloads",
        "evidence",
        "imports",
        "jobs",
        "ledger",
        "lineage",
        "operator",
        "processes",
        "runs",
        "skills",
        "tags",
        "training",
        "ui",
    )
)
EPILOG = """\
first steps:
  bashgym demo                          the whole loop on a tiny model
  bashgym up                            the daemon (and the bot, if configured)
  bashgym logs --follow                 the daemon's log
  bashgym ledger context --project P    a project at a glance
  bashgym COMMAND --help                its options; docs/cli.md has every command

exit codes: 0 ok, 2 usage, 3 not authenticated, 4 forbidden, 5 not found,
  6 conflict, 7 refused by a rule (validation, gate, budget), 8 unavailable"""


def _common() -> argparse.ArgumentParser:
    # SUPPRESS keeps a value given before the subcommand from being reset by the subcommand's default.
    common = Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document on stdout"
    )
    common.add_argument("--api", default=argparse.SUPPRESS, help="daemon URL (env BASHGYM_API)")
    common.add_argument("--token", default=argparse.SUPPRESS, help="API token (env BASHGYM_TOKEN)")
    common.add_argument("--workspace", default=argparse.SUPPRESS, help="workspace id (default from settings)")
    return common


def import_commands(argv: list[str] | None = None) -> None:
    """Import the module that registers the command `argv` runs, as the command index names it (0.2-0.3 s of
    imports fewer than all of them), or every command module: for no `argv`, a line that names no command (its usage
    error lists them all), no index, or an index that names a module which does not register that command (a stale
    index costs time, never a wrong command)."""
    index = None if argv is None else command_index.load()
    wanted = None if index is None or argv is None else command_index.command_modules(index, argv)
    if wanted is not None and set(wanted.values()) <= set(COMMAND_MODULES):
        for module in sorted(set(wanted.values())):
            importlib.import_module(module)
        if all(MODULE_OF.get(path) == module for path, module in wanted.items()):
            return
    for module in COMMAND_MODULES:
        importlib.import_module(module)


def build_parser(default_project: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with `default_project`, a command that needs --project takes it when none is named."""
    import_commands()
    return registered_parser(default_project)


def registered_parser(default_project: str | None = None) -> argparse.ArgumentParser:
    """The parser of the commands registered so far (build_parser imports them all first)."""
    common = _common()
    parser = Parser(
        prog="bashgym",
        parents=[common],
        description="BashGym: the shared ML workspace (ledger, training, evidence).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"bashgym {bashgym_version()}")
    groups: dict[tuple[str, ...], Any] = {(): parser.add_subparsers(dest="command", metavar="COMMAND")}
    leaves: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for path, (handler, add_args, help_text) in sorted(COMMANDS.items()):
        for depth in range(1, len(path)):
            prefix = path[:depth]
            if prefix in groups:
                continue
            if prefix in leaves:  # a command that also has subcommands (`curate` and `curate receipt`)
                groups[prefix] = leaves[prefix].add_subparsers(dest=f"cmd_{depth}", metavar="COMMAND", required=False)
                continue
            group_parser = groups[path[: depth - 1]].add_parser(
                path[depth - 1],
                help=GROUP_HELP.get(prefix, f"{path[depth - 1]} commands"),
                description=GROUP_HELP.get(prefix),
            )
            groups[prefix] = group_parser.add_subparsers(dest=f"cmd_{depth}", metavar="COMMAND", required=True)
        # argparse formats a command's help with %: `95% CI` would crash the group's --help (a description is not).
        leaf = groups[path[:-1]].add_parser(
            path[-1], parents=[common], help=help_text.replace("%", "%%"), description=help_text
        )
        add_args(leaf)
        if default_project:
            apply_default_project(leaf, default_project)
        leaf.set_defaults(handler=handler)
        leaves[path] = leaf
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the exit code."""
    code = run(sys.argv[1:] if argv is None else argv, dict(os.environ))
    if argv is None:
        sys.exit(code)
    return code


def run(argv: list[str], environ: dict[str, str]) -> int:
    if argv[:1] == ["__complete"]:  # hidden: what the completion scripts ask (cli/completion.py)
        return complete(argv[1:], environ, build_parser(default_project(environ)))
    import_commands(argv)
    parser = registered_parser(default_project(environ))
    try:
        check_words(parser, argv)
        args = parser.parse_args(argv)
    except UsageError as exc:
        return report_usage(exc, argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        settings = load_settings(environ)
        register_secret_values(secret_values(settings, environ))
        return asyncio.run(_dispatch(Ctx(args=args, settings=settings, environ=environ)))
    except UsageError as exc:  # found once the command ran: a file it names is missing
        return report_usage(exc, argv)
    except ApiError as exc:
        _report(args, exc.code, exc.message, exc.hint, exc.reference, exc.details)
        return exc.exit_code
    except BashGymError as exc:
        _report(args, exc.code, exc.message, exc.hint, None, exc.details)
        return exit_code_for_status(exc.status)
    except OSError as exc:  # the machine refused (a read-only or full disk, a missing file): said, not traced
        where = f" ({exc.filename})" if exc.filename else ""
        _report(args, "os_error", f"{exc.strerror or exc}{where}.", "Check that path and its disk, then retry.", None)
        return EXIT_UNAVAILABLE
    except ValidationError as exc:  # a request model built here, from flags, before anything is sent
        problems = _problems(exc)
        message = problems[0] if len(problems) == 1 else f"{len(problems)} problems in the request."
        hint = "Fix the named values and run the command again."
        _report(args, "invalid_request", message, hint, None, {"problems": problems} if len(problems) > 1 else None)
        return EXIT_RULE
    except KeyboardInterrupt:
        return 130


async def _dispatch(ctx: Ctx) -> int:
    try:
        handler: Handler = ctx.args.handler
        await resolve_prefixes(ctx)
        return await handler(ctx)
    finally:
        if ctx._client is not None:
            await ctx._client.__aexit__(None, None, None)


def _report(
    args: argparse.Namespace,
    code: str,
    message: str,
    hint: str,
    reference: str | None,
    details: dict[str, Any] | None = None,
) -> None:
    """An error on stderr (and as one JSON document with --json): every problem of a request, not the first."""
    problems = [str(p) for p in (details or {}).get("problems") or []]
    if getattr(args, "json", False):
        body: dict[str, Any] = {"code": code, "message": message, "hint": hint}
        if reference:
            body["reference"] = reference
        if details:
            body["details"] = details
        sys.stdout.write(json.dumps({"error": body}) + "\n")
    if len(problems) > 1:
        message = f"{message.split(':', 1)[0].rstrip('.')}:\n" + "\n".join(f"  - {p}" for p in problems)
    error(message, hint)


def _problems(exc: ValidationError) -> list[str]:
    """Each problem of a request model, named by its field."""
    found = []
    for problem in exc.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "value"
        found.append(f"`{where}`: {str(problem['msg']).removeprefix('Value error, ')}")
    return found
