"""What every `bashgym` command module uses: the command registry, the context a handler gets, and the
helpers for files a user names and answers printed."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bashgym.cli.output import emit
from bashgym.cli.usage import UsageError
from bashgym.client.errors import (
    EXIT_OK,
    InvalidInput,
)
from bashgym.client.models import BLOB_URI
from bashgym.daemon.settings import DEFAULT_PORT, Settings

if TYPE_CHECKING:
    from bashgym.client.http import DaemonClient

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
        from bashgym.client.http import DaemonClient, resolve_api

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
# The module whose import registers each command: the one module the CLI imports to run it (cli/commands.json).
MODULE_OF: dict[tuple[str, ...], str] = {}


def command(
    *path: str, help: str
) -> Callable[[Callable[[argparse.ArgumentParser], None]], Callable[[Handler], Handler]]:
    """Register `bashgym <path...>`; the decorated pair is (arguments, handler)."""

    def with_args(add_args: Callable[[argparse.ArgumentParser], None]) -> Callable[[Handler], Handler]:
        def with_handler(handler: Handler) -> Handler:
            COMMANDS[path] = (handler, add_args, help)
            MODULE_OF[path] = handler.__module__
            return handler

        return with_handler

    return with_args


def alias(path: tuple[str, ...], source: tuple[str, ...], *, module: str, help: str | None = None) -> None:
    """Register `bashgym <path...>` as another name of the command at `source`, from `module` (the caller's
    `__name__`: the module the CLI imports to run it)."""
    handler, add_args, help_text = COMMANDS[source]
    COMMANDS[path] = (handler, add_args, help_text if help is None else help)
    MODULE_OF[path] = module


def command_group(*path: str, help: str) -> None:
    """Describe `bashgym <path...>`, a word that only groups commands (`device group`), in the help."""
    GROUP_HELP[path] = help


def no_args(parser: argparse.ArgumentParser) -> None:
    """A command without arguments of its own."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


async def upload_for(ctx: Ctx, path: Path, project: str) -> str:
    """Upload a local file for `project` and answer how a request names it: the daemon reads no path of ours."""
    if not path.is_file():
        raise UsageError(f"{path} is not a file.", hint="Name a file on this machine; the CLI uploads it.")
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
        raise UsageError(f"Cannot read {what} {path}: {exc.strerror}.") from exc


def done(ctx: Ctx, result: Any, **render: Any) -> int:
    emit(result, as_json=ctx.as_json, **render)
    return EXIT_OK
