"""The commands of `bashgym`: each parses its flags, makes one client call and prints the answer."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bashgym.daemon.api_models import DatasetFromBlob, ExperimentSpec, ModelVersionSpec, ProjectSpec
from bashgym.daemon.blobs import file_digest
from bashgym.daemon.cli import Ctx, command, done, no_args, read_json_file
from bashgym.daemon.wire_errors import EXIT_OK, EXIT_UNAVAILABLE, ApiError
from bashgym.ledger.errors import InvalidInput
from bashgym.ledger.models import FileDigest
from bashgym.ledger.validation import check_identifier

if TYPE_CHECKING:
    from bashgym.daemon.client import DaemonClient
    from bashgym.daemon.settings import Settings

# -- the daemon itself --------------------------------------------------------------------------


def _daemon_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="TCP port (default 8321; 0 picks a free one and prints it)")
    parser.add_argument("--uds", type=Path, help="listen on this Unix socket instead of TCP")


def _daemon_settings(ctx: Ctx) -> Any:
    from bashgym.daemon.settings import load_settings

    overrides = {name: getattr(ctx.args, name) for name in ("host", "port", "uds")}
    return load_settings(ctx.environ, **overrides)


@command("daemon", help="run the daemon in the foreground (API, ledger, scheduler)")(_daemon_args)
async def daemon(ctx: Ctx) -> int:
    from bashgym.daemon.server import configure_logging, main

    settings = _daemon_settings(ctx)
    configure_logging(settings)
    return await main(settings, ctx.environ)


@command("up", help="run the daemon, plus the Discord bot when a bot token is configured")(_daemon_args)
async def up(ctx: Ctx) -> int:
    from bashgym.daemon.client import announced_by
    from bashgym.daemon.server import configure_logging, main

    settings = _daemon_settings(ctx)
    configure_logging(settings)
    if not ctx.environ.get(settings.discord_token_env):
        print(
            f"Discord is not configured: set {settings.discord_token_env} to the bot token to add the bot "
            "(see README, 'Connecting Discord'). Running the daemon alone; notices print here.",
            flush=True,
        )
        return await main(settings, ctx.environ)
    daemon = asyncio.create_task(main(settings, ctx.environ))
    bot: asyncio.subprocess.Process | None = None
    try:
        # The bot starts once this daemon (this process) has announced itself, not on a record a killed one left.
        while not daemon.done() and announced_by(settings.endpoint_path, os.getpid()) is None:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        if not daemon.done():
            bot = await asyncio.create_subprocess_exec(sys.executable, "-m", "bashgym.bot", env=_bot_env(ctx, settings))
            print(f"Discord bot started (pid {bot.pid}).", flush=True)
        return await daemon
    finally:
        if bot is not None and bot.returncode is None:
            await _stop_bot(bot, grace_s=settings.grace_s)


def _bot_env(ctx: Ctx, settings: Settings) -> dict[str, str]:
    """The bot's environment under `up`: it ends with this process (BASHGYM_BOT_PARENT_PID), even one killed
    outright, and holds its notice cursor's lease under this home's name. One `up` runs per home (the daemon's
    lock), so the bot of the next `up` takes that lease over at once instead of waiting out its TTL."""
    return {
        **ctx.environ,
        "BASHGYM_HOME": str(settings.home),
        "BASHGYM_DISCORD_TOKEN_ENV": ctx.environ.get("BASHGYM_DISCORD_TOKEN_ENV", settings.discord_token_env),
        "BASHGYM_BOT_PARENT_PID": str(os.getpid()),
        "BASHGYM_BOT_LEASE_HOLDER": f"bashgym up {settings.home}",
    }


async def _stop_bot(bot: asyncio.subprocess.Process, *, grace_s: float) -> None:
    bot.terminate()  # SIGTERM: the bot closes its Discord connection, then releases its lease if it can
    try:
        async with asyncio.timeout(grace_s):
            await bot.wait()
    except TimeoutError:
        bot.kill()  # a stuck bot must not hang the shutdown of `up`
        await bot.wait()


@command("bot", help="run the Discord bot against the running daemon (token, application and guild ids set)")(no_args)
async def bot(ctx: Ctx) -> int:
    # The bot replaces this process (exec, same pid): a supervisor's SIGTERM or SIGKILL to this pid reaches the
    # bot itself, and no child is left behind. Exec rather than import: the daemon package never imports the bot.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "bashgym.bot"], ctx.environ)


@command("status", help="is the daemon reachable, which version, is the ledger healthy")(no_args)
async def status(ctx: Ctx) -> int:
    try:
        health = await ctx.client.health()
    except ApiError as exc:
        if exc.status != 0:
            raise
        raise ApiError(
            0,
            exc.code,
            exc.message,
            "Start one with `bashgym daemon` (foreground) or `bashgym up`, then run bashgym status.",
        ) from exc
    result: dict[str, Any] = {"daemon": "reachable", "api": ctx.client.api, **health.model_dump()}
    try:
        ledger = await ctx.client.ledger_health()
        result["ledger_detail"] = {k: ledger[k] for k in ("status", "journal_mode", "synchronous", "last_cursor")}
    except ApiError as exc:
        result["ledger_detail"] = {"unavailable": exc.message}
    done(ctx, result, title="BashGym daemon")
    return EXIT_OK if health.status == "ok" else EXIT_UNAVAILABLE


# -- projects and experiments -------------------------------------------------------------------


def _project_create_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--id", required=True, dest="project_id", help="project id")
    parser.add_argument("--name", required=True, help="display name")
    parser.add_argument("--description", default="", help="one paragraph on what the project is for")


@command("project", "create", help="create a project (ledger.write)")(_project_create_args)
async def project_create(ctx: Ctx) -> int:
    spec = ProjectSpec(project_id=ctx.args.project_id, name=ctx.args.name, description=ctx.args.description)
    result = await ctx.client.project_create(spec, workspace=ctx.workspace)
    return done(ctx, result.model_dump(), title="Project replayed" if result.replayed else "Project created")


@command("project", "list", help="list the workspace's projects")(no_args)
async def project_list(ctx: Ctx) -> int:
    rows = await ctx.client.request("GET", "/v1/projects", params={"workspace": ctx.workspace})
    return done(ctx, rows, columns=["project_id", "name", "created_by", "created_at"], title="Projects")


def _project_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project", help="project id")


@command("project", "show", help="one project with its inventory counts")(_project_arg)
async def project_show(ctx: Ctx) -> int:
    return done(
        ctx, await ctx.client.request("GET", f"/v1/projects/{ctx.args.project}", params={"workspace": ctx.workspace})
    )


def _channel_args(parser: argparse.ArgumentParser) -> None:
    _project_arg(parser)
    parser.add_argument("--channel", help="Discord channel id to route the project's notices to (omit to show)")
    parser.add_argument("--guild", default="", help="the channel's guild id (recorded with it)")


@command("project", "channel", help="show or set the Discord channel the project's notices go to (ledger.write)")(
    _channel_args
)
async def project_channel(ctx: Ctx) -> int:
    a = ctx.args
    where = f"/v1/projects/{a.project}/channel"
    if a.channel is None:
        return done(ctx, await ctx.client.request("GET", where, params={"workspace": ctx.workspace}))
    body = {"channel_id": a.channel, "guild_id": a.guild}
    result = await ctx.client.request("PUT", where, body=body, params={"workspace": ctx.workspace})
    return done(ctx, result["record"], title=f"Notices of {a.project} now go to channel {a.channel}")


def _experiment_create_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")
    parser.add_argument("--id", required=True, dest="experiment_id", help="experiment id")
    parser.add_argument("--name", required=True, help="display name")
    parser.add_argument("--objective", default="", help="what the experiment tries to show")
    parser.add_argument("--task-type", default="", help="e.g. terminal-agent, chat, classification")


@command("experiment", "create", help="create an experiment in a project (ledger.write)")(_experiment_create_args)
async def experiment_create(ctx: Ctx) -> int:
    a = ctx.args
    spec = ExperimentSpec(experiment_id=a.experiment_id, name=a.name, objective=a.objective, task_type=a.task_type)
    result = await ctx.client.experiment_create(a.project, spec, workspace=ctx.workspace)
    return done(ctx, result.model_dump(), title="Experiment replayed" if result.replayed else "Experiment created")


def _project_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")


@command("experiment", "list", help="list a project's experiments")(_project_flag)
async def experiment_list(ctx: Ctx) -> int:
    rows = await ctx.client.request(
        "GET", f"/v1/projects/{ctx.args.project}/experiments", params={"workspace": ctx.workspace}
    )
    return done(ctx, rows, columns=["experiment_id", "name", "objective", "created_at"], title="Experiments")


# -- datasets and models ------------------------------------------------------------------------


def _dataset_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")
    parser.add_argument("--dataset", required=True, help="dataset id")
    parser.add_argument("--version", required=True, help="dataset version id")
    parser.add_argument("--file", required=True, type=Path, help="JSONL, CSV or text file to copy into the store")
    parser.add_argument("--split-manifest", type=Path, help="JSON file describing the splits")


@command("dataset", "register", help="copy a dataset file into the store and record its version")(_dataset_args)
async def dataset_register(ctx: Ctx) -> int:
    a = ctx.args
    if not a.file.is_file():
        raise InvalidInput(f"{a.file} is not a file.", hint="Pass the dataset file with --file.")
    # Checked before the upload: a refused registration leaves nothing behind, not even a stored file.
    for value, name in ((a.project, "--project"), (a.dataset, "--dataset"), (a.version, "--version")):
        check_identifier(value, field=name)
    manifest = read_json_file(a.split_manifest, what="split manifest") if a.split_manifest else {}
    stored = await ctx.client.blob_upload(a.file, project=a.project, workspace=ctx.workspace)
    spec = DatasetFromBlob(
        dataset_id=a.dataset,
        dataset_version_id=a.version,
        sha256=stored["sha256"],
        filename=a.file.name,
        split_manifest=manifest,
    )
    result = await ctx.client.dataset_register(a.project, spec, workspace=ctx.workspace)
    return done(
        ctx, result.model_dump(), title="Dataset version replayed" if result.replayed else "Dataset version registered"
    )


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="project id")
    parser.add_argument("--model", required=True, help="model id")
    parser.add_argument("--version", required=True, help="model version id")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dir", type=Path, help="local model directory to copy into the store")
    source.add_argument("--hub-id", help="a Hugging Face Hub model id (recorded, not downloaded)")
    parser.add_argument("--revision", default="", help="hub revision (commit sha or tag); required with --hub-id")
    parser.add_argument("--parent", help="parent model version id")


@command("model", "register", help="record a model version from a directory or a hub id")(_model_args)
async def model_register(ctx: Ctx) -> int:
    a = ctx.args
    if a.hub_id:
        if not a.revision:
            raise InvalidInput(
                "--hub-id needs --revision: a hub id alone does not pin the weights.",
                hint="Pass the commit sha (or tag) the weights come from.",
            )
        spec = ModelVersionSpec(
            model_version_id=a.version,
            model_id=a.model,
            source_uri=f"hf://{a.hub_id}",
            source_revision=a.revision,
            parent_version_id=a.parent,
        )
    else:
        spec = await model_spec_from_dir(
            ctx.client,
            a.dir,
            project=a.project,
            workspace=ctx.workspace,
            model_id=a.model,
            version_id=a.version,
            parent=a.parent,
            echo=not ctx.as_json,
        )
    result = await ctx.client.model_version_register(a.project, spec, workspace=ctx.workspace)
    return done(
        ctx, result.model_dump(), title="Model version replayed" if result.replayed else "Model version registered"
    )


async def model_spec_from_dir(
    client: DaemonClient,
    directory: Path,
    *,
    project: str,
    workspace: str | None,
    model_id: str,
    version_id: str,
    parent: str | None,
    echo: bool,
) -> ModelVersionSpec:
    """Copy a model directory's files into the daemon's store and describe the version they make."""
    if not directory.is_dir():
        raise InvalidInput(f"{directory} is not a directory.", hint="Pass the model directory with --dir.")
    files = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        stored = await client.blob_upload(path, project=project, workspace=workspace)
        files.append(
            FileDigest(path=str(path.relative_to(directory)), sha256=stored["sha256"], size_bytes=stored["size_bytes"])
        )
        if echo:
            print(f"  stored {path.relative_to(directory)} ({stored['size_bytes']} bytes)", file=sys.stderr)
    if not files:
        raise InvalidInput(f"{directory} holds no files.")
    config = directory / "config.json"
    config_digest = (await asyncio.to_thread(file_digest, config))[0] if config.is_file() else None
    return ModelVersionSpec(
        model_version_id=version_id,
        model_id=model_id,
        source_uri=f"bashgym://models/{model_id}",
        config_digest=config_digest,
        parent_version_id=parent,
        files=files,
    )
