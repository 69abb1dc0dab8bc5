"""Writes of projects, experiments and the model, dataset and environment versions runs point at."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bashgym.client.errors import IdentityConflict, NotFound
from bashgym.client.redaction import redact_text
from bashgym.client.specs import (
    UNASSIGNED,
    DatasetVersionSpec,
    EnvironmentSpec,
    ExperimentSpec,
    FileDigest,
    ModelVersionSpec,
    ProjectSpec,
    Spec,
    TrackingContext,
)
from bashgym.client.validation import canonical_json
from bashgym.ledger.rows import require_project, to_record
from bashgym.ledger.tx import Tx


def _registered(tx: Tx, event_type: str, ws: str, project: str, entity: str, entity_id: str, **refs: Any) -> int:
    return tx.append_event(
        event_type, workspace_id=ws, project_id=project, payload={"entity": entity, "entity_id": entity_id}, **refs
    )


def create_project(tx: Tx, ws: str, spec: ProjectSpec) -> tuple[dict[str, Any], bool]:
    identity = without_default(spec, "profile")
    row, replayed = tx.put(
        "projects",
        key={"workspace_id": ws, "project_id": spec.project_id},
        identity=identity,
        columns={
            "name": spec.name,
            "description": spec.description,
            # The column's default is `default`: a default project writes the row as before migration 13 did.
            **({"profile": spec.profile} if spec.profile != "default" else {}),
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Project {spec.project_id!r}",
    )
    if not replayed:
        _registered(tx, "project.created", ws, spec.project_id, "project", spec.project_id)
    return to_record(row), replayed


def without_default(spec: Spec, field: str) -> dict[str, Any]:
    """A spec's identity without `field` while it holds its default: a record made before the field existed
    keeps the digest it was written with, so replaying it is still a replay, not a conflict."""
    identity = spec.model_dump(mode="json")
    if identity[field] == type(spec).model_fields[field].default:
        del identity[field]
    return identity


def ensure_unassigned(tx: Tx, ws: str) -> None:
    """The quarantine project and experiment for runs without a complete tracking context."""
    create_project(
        tx,
        ws,
        ProjectSpec(
            project_id=UNASSIGNED,
            name="Unassigned runs",
            description="Runs registered without a complete tracking context.",
        ),
    )
    create_experiment(tx, ws, UNASSIGNED, ExperimentSpec(experiment_id=UNASSIGNED, name="Unassigned runs"))


def create_experiment(tx: Tx, ws: str, project: str, spec: ExperimentSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    row, replayed = tx.put(
        "experiments",
        key={"workspace_id": ws, "project_id": project, "experiment_id": spec.experiment_id},
        identity=spec.model_dump(),
        columns={
            "name": spec.name,
            "objective": spec.objective,
            "task_type": spec.task_type,
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Experiment {spec.experiment_id!r}",
    )
    if not replayed:
        _registered(
            tx, "experiment.created", ws, project, "experiment", spec.experiment_id, experiment_id=spec.experiment_id
        )
    return to_record(row), replayed


def register_model_version(tx: Tx, ws: str, project: str, spec: ModelVersionSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    if (
        spec.parent_version_id
        and tx.fetch_one(
            "model_versions", {"workspace_id": ws, "project_id": project, "model_version_id": spec.parent_version_id}
        )
        is None
    ):
        raise NotFound(
            f"Parent model version {spec.parent_version_id!r} is not in project {project!r}.",
            hint="Register the parent first, or leave parent_version_id empty.",
        )
    identity = without_default(spec, "kind")
    row, replayed = tx.put(
        "model_versions",
        key={"workspace_id": ws, "project_id": project, "model_version_id": spec.model_version_id},
        identity=identity,
        columns={
            "model_id": spec.model_id,
            "source_uri": spec.source_uri,
            "source_revision": spec.source_revision,
            "config_digest": spec.config_digest or "",
            "parent_version_id": spec.parent_version_id,
            "files_json": canonical_json(identity["files"]),
            **({"kind": spec.kind} if spec.kind != "causal_lm" else {}),
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Model version {spec.model_version_id!r}",
    )
    if not replayed:
        _registered(tx, "model_version.registered", ws, project, "model_version", spec.model_version_id)
    return to_record(row), replayed


def register_dataset_version(tx: Tx, ws: str, project: str, spec: DatasetVersionSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    identity = spec.model_dump(mode="json")
    row, replayed = tx.put(
        "dataset_versions",
        key={"workspace_id": ws, "project_id": project, "dataset_version_id": spec.dataset_version_id},
        identity=identity,
        columns={
            "dataset_id": spec.dataset_id,
            "source_uri": spec.source_uri,
            "content_digest": spec.content_digest,
            "split_manifest_json": canonical_json(spec.split_manifest),
            "row_counts_json": canonical_json(spec.row_counts),
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Dataset version {spec.dataset_version_id!r}",
    )
    if not replayed:
        _registered(tx, "dataset_version.registered", ws, project, "dataset_version", spec.dataset_version_id)
    return to_record(row), replayed


def register_environment(tx: Tx, ws: str, project: str, spec: EnvironmentSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    row, replayed = tx.put(
        "environments",
        key={"workspace_id": ws, "project_id": project, "environment_id": spec.environment_id},
        identity=spec.model_dump(mode="json"),
        columns={
            "compute_target": spec.compute_target,
            "runtime_digest": spec.runtime_digest,
            "hardware_json": canonical_json(spec.hardware),
            "created_by": tx.actor.actor_id,
            "created_at": tx.now,
        },
        label=f"Environment {spec.environment_id!r}",
    )
    if not replayed:
        _registered(tx, "environment.registered", ws, project, "environment", spec.environment_id)
    return to_record(row), replayed


def register_context_lineage(
    tx: Tx, ctx: TrackingContext, compute_target: str, model_files: Sequence[FileDigest] = ()
) -> None:
    """Create (or replay) the project, experiment and versions a complete tracking context names; a model version
    it is the first to name is recorded with `model_files` (what the launch hashed of base_model)."""
    ws, project = ctx.workspace_id, ctx.project_id
    # An existing project is referenced by its name; a context that leaves the description out does not
    # contradict the one the project was created with.
    project_facts = {"name": ctx.project_display_name} | (
        {"description": ctx.project_description} if ctx.project_description else {}
    )
    if not _refers(tx, "projects", {"workspace_id": ws, "project_id": project}, project_facts, f"Project {project!r}"):
        create_project(
            tx, ws, ProjectSpec(project_id=project, name=ctx.project_display_name, description=ctx.project_description)
        )
    create_experiment(
        tx,
        ws,
        project,
        ExperimentSpec(
            experiment_id=ctx.experiment_id, name=ctx.experiment_name, objective=ctx.objective, task_type=ctx.task_type
        ),
    )
    model_key = {"workspace_id": ws, "project_id": project, "model_version_id": ctx.model_version_id}
    model_facts = {
        "model_id": ctx.model_id,
        "source_uri": ctx.model_source_uri,
        "config_digest": ctx.model_config_digest,
    }
    if not _refers(tx, "model_versions", model_key, model_facts, f"Model version {ctx.model_version_id!r}"):
        register_model_version(
            tx,
            ws,
            project,
            ModelVersionSpec(
                model_version_id=ctx.model_version_id,
                model_id=ctx.model_id,
                source_uri=ctx.model_source_uri,
                source_revision=ctx.model_source_revision,
                config_digest=ctx.model_config_digest,
                files=list(model_files),
            ),
        )
    data_key = {"workspace_id": ws, "project_id": project, "dataset_version_id": ctx.dataset_version_id}
    data_facts = {"dataset_id": ctx.dataset_id, "content_digest": ctx.dataset_content_digest}
    if not _refers(tx, "dataset_versions", data_key, data_facts, f"Dataset version {ctx.dataset_version_id!r}"):
        register_dataset_version(
            tx,
            ws,
            project,
            DatasetVersionSpec(
                dataset_version_id=ctx.dataset_version_id,
                dataset_id=ctx.dataset_id,
                source_uri=ctx.dataset_source_uri,
                content_digest=ctx.dataset_content_digest,
                split_manifest=ctx.dataset_split_manifest,
                row_counts=ctx.dataset_row_counts,
            ),
        )
    register_environment(
        tx,
        ws,
        project,
        EnvironmentSpec(
            environment_id=ctx.environment_id,
            compute_target=compute_target,
            runtime_digest=ctx.environment_runtime_digest,
            hardware=ctx.environment_hardware,
        ),
    )


def _refers(tx: Tx, table: str, key: dict[str, Any], facts: dict[str, Any], label: str) -> bool:
    """True when the context names an existing version whose facts agree: a reference, not a new record.

    A version registered on its own (with file digests, a parent) is referenced by a tracking context
    that states its identifying facts; a context stating other facts under the same id is a conflict.
    """
    row = tx.fetch_one(table, key)
    if row is None:
        return False
    # Stored values went through the redactor; compare the stated ones the same way.
    stated = {name: redact_text(value) if isinstance(value, str) else value for name, value in facts.items()}
    differing = sorted(name for name, value in stated.items() if row[name] and row[name] != value)
    if differing:
        raise IdentityConflict(
            f"{label} already exists with different {', '.join(differing)}.",
            fields=differing,
            hint="Name a new version id for different content, or state the registered values.",
        )
    return True
