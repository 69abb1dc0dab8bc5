"""`bashgym project|experiment|dataset|model ...`: the lineage a run is recorded under, one client call each."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bashgym.cli.registry import Ctx, command, command_group, done, no_args, read_json_file
from bashgym.cli.usage import input_file
from bashgym.client.errors import InvalidInput
from bashgym.client.models import DatasetFromBlob, ExperimentSpec, ModelVersionSpec, ProjectSpec
from bashgym.client.validation import check_identifier

if TYPE_CHECKING:
    from bashgym.client.http import DaemonClient


command_group("project", help="projects and where their notices go")
command_group("experiment", help="experiments within a project")
command_group("dataset", help="dataset versions: a file copied into the store with its digest")


def _project_create_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--id", required=True, dest="project_id", help="project id")
    parser.add_argument("--name", required=True, help="display name")
    parser.add_argument("--description", default="", help="one paragraph on what the project is for")
    parser.add_argument(
        "--profile", choices=("default", "embedding_retrieval"), default="default",
        help="what it trains: policies and reward models (default), or embedding retrievers only",
    )  # fmt: skip


@command("project", "create", help="create a project (ledger.write)")(_project_create_args)
async def project_create(ctx: Ctx) -> int:
    a = ctx.args
    spec = ProjectSpec(project_id=a.project_id, name=a.name, description=a.description, profile=a.profile)
    result = await ctx.client.project_create(spec, workspace=ctx.workspace)
    return done(ctx, result.model_dump(), title="Project replayed" if result.replayed else "Project created")


@command("project", "list", help="list the workspace's projects")(no_args)
async def project_list(ctx: Ctx) -> int:
    rows = await ctx.client.request("GET", "/v1/projects", params={"workspace": ctx.workspace})
    return done(ctx, rows, columns=["project_id", "name", "profile", "created_by", "created_at"], title="Projects")


def _project_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project", help="project id")


@command("project", "show", help="one project with its inventory counts")(_project_arg)
async def project_show(ctx: Ctx) -> int:
    return done(
        ctx, await ctx.client.request("GET", f"/v1/projects/{ctx.args.project}", params={"workspace": ctx.workspace})
    )


@command("project", "use", help="make a project the default of commands that take --project (in bashgym.toml)")(
    _project_arg
)
async def project_use(ctx: Ctx) -> int:
    project = check_identifier(ctx.args.project, field="project")
    await ctx.client.request("GET", f"/v1/projects/{project}", params={"workspace": ctx.workspace})  # it exists
    path = ctx.settings.home / "bashgym.toml"
    await asyncio.to_thread(set_toml_key, path, "project", project)
    shadowed = ctx.environ.get("BASHGYM_PROJECT")
    result = {"project": project, "written_to": str(path)}
    if shadowed and shadowed != project:
        result["note"] = f"BASHGYM_PROJECT={shadowed} in this environment wins over the file; unset it to use {project}"
    return done(ctx, result, title="Default project")


def set_toml_key(path: Path, key: str, value: str) -> None:
    """Set a top-level `key = "value"` line in a TOML file, keeping every other line as written (a value here is an
    identifier: nothing in it needs escaping)."""
    lines = path.read_text().splitlines() if path.exists() else []
    line = f'{key} = "{value}"'
    for index, text in enumerate(lines):
        if text.lstrip().startswith("["):
            break  # tables begin: a top-level key goes before them
        if text.split("=", 1)[0].strip() == key:
            lines[index] = line
            break
    if line not in lines:  # no such key before the tables
        lines.insert(0, line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


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
    parser.add_argument("--file", required=True, type=input_file, help="JSONL, CSV or text file to copy into the store")
    parser.add_argument("--split-manifest", type=input_file, help="JSON file describing the splits")


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
    source.add_argument(
        "--run", help="a completed run of the project: its kept model (a tracked run's `model` artifact), its lineage"
    )
    parser.add_argument("--revision", default="", help="hub revision (commit sha or tag); required with --hub-id")
    parser.add_argument("--parent", help="parent model version id")
    parser.add_argument(
        "--kind", choices=("causal_lm", "reward_model", "embedding_retriever"),
        help="what the files are (default causal_lm; --run takes the kind its method made, or this for a tracked run)",
    )  # fmt: skip


@command("model", "register", help="record a model version from a directory or a hub id")(_model_args)
async def model_register(ctx: Ctx) -> int:
    a = ctx.args
    if a.run:
        if a.parent:
            raise InvalidInput(
                "--run registers the run's model with its own lineage (parent: the version it trained from); drop "
                "--parent."
            )
        body = {"model_version_id": a.version, "model_id": a.model, **({"kind": a.kind} if a.kind else {})}
        written = await ctx.client.request(
            "POST",
            f"/v1/projects/{a.project}/runs/{a.run}/model-version",
            body=body,
            params={"workspace": ctx.workspace},
        )
        return done(ctx, written, title="Model version replayed" if written["replayed"] else "Model version registered")
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
            kind=a.kind or "causal_lm",
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
        spec = spec.model_copy(update={"kind": a.kind or "causal_lm"})
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
    """Copy a model directory's files into the daemon's store and describe the version they make (each file said on
    stderr as it is stored, with `echo`)."""

    def said(name: str, size: int) -> None:
        print(f"  stored {name} ({size} bytes)", file=sys.stderr)

    return await client.model_dir_spec(
        directory,
        project=project,
        workspace=workspace,
        model_id=model_id,
        version_id=version_id,
        parent=parent,
        on_file=said if echo else None,
    )
