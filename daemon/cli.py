"""`bashgym`: the terminal and agent adapter over the daemon client. One place turns errors into exit codes."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bashgym.daemon.api_models import BLOB_URI
from bashgym.daemon.cli_output import emit, error
from bashgym.daemon.settings import DEFAULT_PORT, Settings, load_settings, secret_values
from bashgym.daemon.wire_errors import (
    EXIT_OK,
    EXIT_RULE,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    ApiError,
    exit_code_for_status,
)
from bashgym.ledger.errors import BashGymError, InvalidInput
from bashgym.ledger.redaction import register_secret_values
from pydantic import ValidationError

if TYPE_CHECKING:
    from bashgym.daemon.client import DaemonClient

log = logging.getLogger("bashgym.cli")


@dataclass
class Ctx:
    """What a command handler gets: parsed args, settings, and a client when it needs the daemon."""

    args: argparse.Namespace
    settings: Settings
    environ: dict[str, str]
    _client: DaemonClient | None = None

    @property
    def as_json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @property
    def workspace(self) -> str | None:
        return getattr(self.args, "workspace", None)

    @property
    def client(self) -> DaemonClient:
        # Imported here: httpx costs ~0.2 s to import, and `bashgym daemon` never needs the client.
        from bashgym.daemon.client import DaemonClient, resolve_api

        if self._client is None:
            api = resolve_api(
                getattr(self.args, "api", None) or self.settings.api, self.settings.endpoint_path, DEFAULT_PORT
            )
            self._client = DaemonClient(api, self._token())
        return self._client

    def _token(self) -> str | None:
        token = getattr(self.args, "token", None) or self.settings.token
        if token:
            return str(token)
        path = self.settings.admin_token_path
        try:
            return path.read_text().strip()
        except OSError:
            return None


Handler = Callable[[Ctx], Awaitable[int]]
COMMANDS: dict[tuple[str, ...], tuple[Handler, Callable[[argparse.ArgumentParser], None], str]] = {}
GROUP_HELP: dict[tuple[str, ...], str] = {}


def command(
    *path: str, help: str
) -> Callable[[Callable[[argparse.ArgumentParser], None]], Callable[[Handler], Handler]]:
    """Register `bashgym <path...>`; the decorated pair is (arguments, handler)."""

    def with_args(add_args: Callable[[argparse.ArgumentParser], None]) -> Callable[[Handler], Handler]:
        def with_handler(handler: Handler) -> Handler:
            COMMANDS[path] = (handler, add_args, help)
            return handler

        return with_handler

    return with_args


def command_group(*path: str, help: str) -> None:
    """Describe `bashgym <path...>`, a word that only groups commands (`device group`), in the help."""
    GROUP_HELP[path] = help


def no_args(parser: argparse.ArgumentParser) -> None:
    """A command without arguments of its own."""


def _common() -> argparse.ArgumentParser:
    # SUPPRESS keeps a value given before the subcommand from being reset by the subcommand's default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document on stdout"
    )
    common.add_argument("--api", default=argparse.SUPPRESS, help="daemon URL (env BASHGYM_API)")
    common.add_argument("--token", default=argparse.SUPPRESS, help="API token (env BASHGYM_TOKEN)")
    common.add_argument("--workspace", default=argparse.SUPPRESS, help="workspace id (default from settings)")
    return common


def build_parser() -> argparse.ArgumentParser:
    from bashgym.daemon import (  # noqa: F401
        cli_auth,
        cli_budget,
        cli_campaigns,
        cli_commands,
        cli_demo,
        cli_devices,
        cli_evidence,
        cli_ledger,
        cli_operator,
        cli_skills,
        cli_training,
    )
    from bashgym.daemon.version import bashgym_version

    common = _common()
    parser = argparse.ArgumentParser(
        prog="bashgym", parents=[common], description="BashGym: the shared ML workspace (ledger, training, evidence)."
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
        leaf = groups[path[:-1]].add_parser(path[-1], parents=[common], help=help_text, description=help_text)
        add_args(leaf)
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        settings = load_settings(environ)
        register_secret_values(secret_values(settings, environ))
        return asyncio.run(_dispatch(Ctx(args=args, settings=settings, environ=environ)))
    except ApiError as exc:
        _report(args, exc.code, exc.message, exc.hint, exc.reference)
        return exc.exit_code
    except BashGymError as exc:
        _report(args, exc.code, exc.message, exc.hint, None)
        return exit_code_for_status(exc.status)
    except OSError as exc:  # the machine refused (a read-only or full disk, a missing file): said, not traced
        where = f" ({exc.filename})" if exc.filename else ""
        _report(args, "os_error", f"{exc.strerror or exc}{where}.", "Check that path and its disk, then retry.", None)
        return EXIT_UNAVAILABLE
    except ValidationError as exc:  # a request model built here, from flags, before anything is sent
        _report(args, "invalid_request", _first_problem(exc), "Fix the named value and run the command again.", None)
        return EXIT_RULE
    except KeyboardInterrupt:
        return 130


async def _dispatch(ctx: Ctx) -> int:
    try:
        handler: Handler = ctx.args.handler
        return await handler(ctx)
    finally:
        if ctx._client is not None:
            await ctx._client.__aexit__(None, None, None)


def _report(args: argparse.Namespace, code: str, message: str, hint: str, reference: str | None) -> None:
    if getattr(args, "json", False):
        body: dict[str, Any] = {"code": code, "message": message, "hint": hint}
        if reference:
            body["reference"] = reference
        sys.stdout.write(json.dumps({"error": body}) + "\n")
    error(message, hint)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "value"
    message = str(error["msg"]).removeprefix("Value error, ")
    return (
        f"`{where}`: {message}"
        if len(exc.errors()) == 1
        else f"{exc.error_count()} problems; first: `{where}`: {message}"
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


async def upload_for(ctx: Ctx, path: Path, project: str) -> str:
    """Upload a local file for `project` and answer how a request names it: the daemon reads no path of ours."""
    if not path.is_file():
        raise InvalidInput(f"{path} is not a file.", hint="Name a file on this machine; the CLI uploads it.")
    stored = await ctx.client.blob_upload(path, project=project, workspace=ctx.workspace)
    return f"{BLOB_URI}{stored['sha256']}"


def read_json_file(path: Path, *, what: str) -> Any:
    """Load a JSON file a user named, with an error that says which file and where it broke."""
    try:
        return json.loads(path.read_text(), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} {path} is not UTF-8 text: {exc.reason} at byte {exc.start}.") from exc
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise InvalidInput(
                f"{what} {path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
                hint="Fix the file and run the command again.",
            ) from exc
        # Python reads NaN and Infinity, which no JSON peer (the daemon included) accepts back.
        raise InvalidInput(
            f"{what} {path} holds {exc}; write a finite number.", hint="Fix the file and run the command again."
        ) from exc
    except OSError as exc:
        raise InvalidInput(f"Cannot read {what} {path}: {exc.strerror}.") from exc


def done(ctx: Ctx, result: Any, **render: Any) -> int:
    emit(result, as_json=ctx.as_json, **render)
    return EXIT_OK
