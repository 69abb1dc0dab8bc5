"""Campaign records: creation, the state machine with optimistic versions, and their schedules."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.client.errors import Conflict, InvalidTransition, NotFound
from bashgym.client.redaction import redact_text, redact_values
from bashgym.client.validation import canonical_json
from bashgym.ledger.campaign_specs import CampaignSpec
from bashgym.ledger.rows import require_project
from bashgym.ledger.tags import tagged, with_tags
from bashgym.ledger.tx import Tx

# blocked: a cascade stopped at a stage whose promotion gate did not ship (its blockers are in the reason).
TERMINAL = frozenset({"completed", "exhausted", "blocked", "failed", "cancelled"})
TRANSITIONS: dict[str, frozenset[str]] = {
    "draft": frozenset({"ready", "cancelled"}),
    "ready": frozenset({"draft", "active", "cancelled"}),
    "active": frozenset({"paused", "awaiting_authority", "completed", "exhausted", "blocked", "failed", "cancelled"}),
    "paused": frozenset({"active", "awaiting_authority", "failed", "cancelled"}),
    "awaiting_authority": frozenset({"active", "paused", "failed", "cancelled"}),
    **{state: frozenset() for state in TERMINAL},
}


def create_campaign(tx: Tx, ws: str, project: str, spec: CampaignSpec) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    # A credential pasted into a title, an objective or a recipe never reaches the file, as Tx.put redacts rows.
    spec_json = canonical_json(redact_values(json.loads(spec.stored_json())))
    existing = _row(tx.conn, ws, project, spec.campaign_id)
    if existing is not None:
        if existing["spec_json"] == spec_json:
            return _record(existing), True
        raise Conflict(
            f"Campaign {spec.campaign_id!r} already exists with another spec.",
            hint="Pick another campaign_id; a campaign's pins never change once created.",
        )
    tx.conn.execute(
        "INSERT INTO campaigns (workspace_id, project_id, campaign_id, title, status, version, spec_json, created_by, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, 'draft', 1, ?, ?, ?, ?)",
        (ws, project, spec.campaign_id, redact_text(spec.title), spec_json, tx.actor.actor_id, tx.now, tx.now),
    )
    if spec.report_schedule is not None:
        schedule = spec.report_schedule
        tx.conn.execute(
            "INSERT INTO schedules (workspace_id, project_id, schedule_id, campaign_id, kind, cron, timezone, channel, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, 'report', ?, ?, ?, ?, ?)",
            (ws, project, f"{spec.campaign_id}.report", spec.campaign_id, schedule.cron, schedule.timezone,
             schedule.channel, tx.now, tx.now),
        )  # fmt: skip
    tx.append_event(
        "campaign.created",
        workspace_id=ws,
        project_id=project,
        payload={"entity": "campaign", "entity_id": spec.campaign_id, "title": spec.title},
    )
    return get_campaign(tx.conn, ws, project, spec.campaign_id), False


def transition_campaign(
    tx: Tx,
    ws: str,
    project: str,
    campaign_id: str,
    target: str,
    *,
    expected_version: int,
    reason: str,
    approval: tuple[str, str] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Move a campaign to `target` if its version is `expected_version`; every move is an event. `approval`
    (capability, iteration id) records that the mover lent the campaign a capability its owner lacks."""
    row = _row(tx.conn, ws, project, campaign_id)
    if row is None:
        raise _not_found(campaign_id, project)
    if row["version"] != expected_version:
        raise Conflict(
            f"Campaign {campaign_id} is at version {row['version']}, not {expected_version}; someone changed it.",
            hint="Read it again (bashgym campaign show) and retry with its current version.",
            details={"version": row["version"], "status": row["status"]},
        )
    current = row["status"]
    if target not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "nothing (it is terminal)"
        raise InvalidTransition(
            f"Campaign {campaign_id} cannot move from {current} to {target}.",
            hint=f"From {current} it may move to {allowed}.",
        )
    # awaiting_authority remembers where to return; leaving it clears that.
    resume = current if target == "awaiting_authority" else None
    tx.conn.execute(
        "UPDATE campaigns SET status = ?, resume_status = ?, version = version + 1, status_reason = ?, updated_at = ? "
        "WHERE workspace_id = ? AND project_id = ? AND campaign_id = ?",
        (target, resume, reason[:2000], tx.now, ws, project, campaign_id),
    )
    tx.append_event(
        "campaign.transitioned",
        workspace_id=ws,
        project_id=project,
        payload={
            "campaign_id": campaign_id,
            "status": target,
            "previous_status": current,
            "reason": reason[:2000],
            **({"approved_capability": approval[0], "approved_iteration_id": approval[1]} if approval else {}),
        },
    )
    return get_campaign(tx.conn, ws, project, campaign_id), False


def campaign_approvals(conn: sqlite3.Connection, ws: str, project: str, campaign_id: str) -> set[tuple[str, str]]:
    """The (capability, iteration id) pairs lent to a campaign by the principals who resumed it."""
    rows = conn.execute(
        "SELECT json_extract(payload_json, '$.approved_capability'), "
        "json_extract(payload_json, '$.approved_iteration_id') "
        "FROM events WHERE event_type = 'campaign.transitioned' AND workspace_id = ? AND project_id = ? "
        "AND json_extract(payload_json, '$.campaign_id') = ? "
        "AND json_extract(payload_json, '$.approved_capability') IS NOT NULL",
        (ws, project, campaign_id),
    )
    return {(str(capability), str(iteration)) for capability, iteration in rows}


def get_campaign(conn: sqlite3.Connection, ws: str, project: str, campaign_id: str) -> dict[str, Any]:
    row = _row(conn, ws, project, campaign_id)
    if row is None:
        raise _not_found(campaign_id, project)
    return _record(row)


def list_campaigns(
    conn: sqlite3.Connection, ws: str, project: str, tags: list[tuple[str, str | None]] | None = None
) -> list[dict[str, Any]]:
    """The project's campaigns, oldest first, with their tags; `tags` (key, value or None) must all be carried."""
    require_project(conn, ws, project)
    rows = tagged(conn, ws, project, "campaign", tags, order="created_at")
    return with_tags(conn, ws, project, "campaign", [_record(row) for row in rows])


def list_schedules(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return [dict(row) for row in conn.execute("SELECT * FROM schedules ORDER BY schedule_id")]


def _row(conn: sqlite3.Connection, ws: str, project: str, campaign_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM campaigns WHERE workspace_id = ? AND project_id = ? AND campaign_id = ?",
        (ws, project, campaign_id),
    ).fetchone()
    return row


def _record(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "campaign_id": row["campaign_id"],
        "project_id": row["project_id"],
        "title": row["title"],
        "status": row["status"],
        "resume_status": row["resume_status"],
        "status_reason": row["status_reason"],
        "version": row["version"],
        "incumbent_iteration_id": row["incumbent_iteration_id"],
        "spec": json.loads(row["spec_json"]),
        "created_by": row["created_by"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def _not_found(campaign_id: str, project: str) -> NotFound:
    return NotFound(f"No campaign {campaign_id!r} in project {project!r}.", hint="bashgym campaign list --project P")


def add_iterations(
    tx: Tx, ws: str, project: str, campaign_id: str, proposals: list[dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """Append candidate iterations (queued, in order); each names one primary variable and its rationale."""
    campaign = get_campaign(tx.conn, ws, project, campaign_id)
    if campaign["status"] in TERMINAL:
        raise InvalidTransition(
            f"Campaign {campaign_id} is {campaign['status']}; a terminal campaign takes no candidates.",
            hint="Create a new campaign.",
        )
    if campaign["spec"].get("kind") == "cascade":
        raise InvalidTransition(
            f"Campaign {campaign_id} is a cascade: it runs its declared stages in order and takes no candidates.",
            hint="Create a search campaign (kind search, with a base_recipe) to try one change at a time.",
        )
    (last,) = tx.conn.execute(
        "SELECT COALESCE(MAX(number), 0) FROM campaign_iterations WHERE workspace_id = ? AND project_id = ? "
        "AND campaign_id = ?",
        (ws, project, campaign_id),
    ).fetchone()
    added = []
    for offset, proposal in enumerate(proposals, start=1):
        number = last + offset
        iteration_id = f"{campaign_id}.i{number}"
        change = {proposal["primary_variable"]: proposal["value"]}
        _insert_iteration(
            tx, ws, project, campaign_id, iteration_id, number, "candidate", proposal["primary_variable"], change,
            proposal["rationale"],
        )  # fmt: skip
        added.append(iteration_id)
    return {
        "campaign_id": campaign_id,
        "added": added,
        "iterations": list_iterations(tx.conn, ws, project, campaign_id),
    }, False


def list_iterations(conn: sqlite3.Connection, ws: str, project: str, campaign_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM campaign_iterations WHERE workspace_id = ? AND project_id = ? AND campaign_id = ? "
        "ORDER BY number",
        (ws, project, campaign_id),
    ).fetchall()
    return [
        {
            key.removesuffix("_json"): (json.loads(row[key]) if key.endswith("_json") else row[key])
            for key in row.keys()  # noqa: SIM118 - iterating a Row yields its values
            if key not in {"workspace_id", "project_id"}
        }
        for row in rows
    ]


def budget_entries(conn: sqlite3.Connection, ws: str, project: str, scope: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT kind, gpu_hours, runs, created_at FROM budget_entries WHERE workspace_id = ? AND project_id = ? "
        "AND scope = ? ORDER BY id",
        (ws, project, scope),
    ).fetchall()
    return [dict(row) for row in rows]


def mark_schedule_fired(tx: Tx, ws: str, project: str, schedule_id: str, at: str) -> tuple[dict[str, Any], bool]:
    tx.conn.execute(
        "UPDATE schedules SET last_fired_at = ?, updated_at = ? WHERE workspace_id = ? AND project_id = ? "
        "AND schedule_id = ?",
        (at, tx.now, ws, project, schedule_id),
    )
    row = tx.conn.execute(
        "SELECT * FROM schedules WHERE workspace_id = ? AND project_id = ? AND schedule_id = ?",
        (ws, project, schedule_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"No schedule {schedule_id!r} in project {project!r}.")
    return dict(row), False


ITERATION_FIELDS = frozenset(
    {
        "run_id",
        "result_id",
        "comparison_id",
        "decision",
        "reason_code",
        # cascade stages: the model version the stage kept, its comparison against the starting model (the final
        # stage), its RunCard and the promotion gate's blockers
        "model_version_id",
        "start_comparison_id",
        "card_id",
        "blockers",
    }
)


def add_baseline(tx: Tx, ws: str, project: str, campaign_id: str) -> tuple[dict[str, Any], bool]:
    """Iteration 0: the starting model evaluated on the pinned suite, once per campaign."""
    existing = tx.conn.execute(
        "SELECT iteration_id FROM campaign_iterations WHERE workspace_id = ? AND project_id = ? AND campaign_id = ? "
        "AND kind = 'baseline'",
        (ws, project, campaign_id),
    ).fetchone()
    if existing is not None:
        return {"iteration_id": existing[0]}, True
    iteration_id = f"{campaign_id}.i0"
    tx.conn.execute(
        "INSERT INTO campaign_iterations (workspace_id, project_id, campaign_id, iteration_id, number, kind, stage, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, 0, 'baseline', 'evaluate', ?, ?)",
        (ws, project, campaign_id, iteration_id, tx.now, tx.now),
    )
    tx.append_event(
        "campaign.iteration_added",
        workspace_id=ws,
        project_id=project,
        payload={"entity": "campaign_iteration", "entity_id": iteration_id, "campaign_id": campaign_id},
    )
    return {"iteration_id": iteration_id}, False


def update_iteration(
    tx: Tx, ws: str, project: str, campaign_id: str, iteration_id: str, stage: str, fields: dict[str, Any]
) -> tuple[dict[str, Any], bool]:
    """Move an iteration to its next stage (recording run, result, comparison, decision); each move is an event."""
    unknown = set(fields) - ITERATION_FIELDS
    if unknown:
        raise ValueError(f"not iteration fields: {sorted(unknown)}")
    columns = {("blockers_json" if name == "blockers" else name): value for name, value in fields.items()}
    if "blockers" in fields:
        columns["blockers_json"] = canonical_json(fields["blockers"])
    assignments = ", ".join(f"{name} = ?" for name in columns)
    tx.conn.execute(
        f"UPDATE campaign_iterations SET stage = ?, {assignments + ', ' if assignments else ''}updated_at = ? "
        "WHERE workspace_id = ? AND project_id = ? AND campaign_id = ? AND iteration_id = ?",
        (stage, *columns.values(), tx.now, ws, project, campaign_id, iteration_id),
    )
    tx.append_event(
        "campaign.stage",
        workspace_id=ws,
        project_id=project,
        run_id=fields.get("run_id"),
        payload={
            "campaign_id": campaign_id,
            "iteration_id": iteration_id,
            "stage": stage,
            "decision": fields.get("decision") or "",
            "reason_code": fields.get("reason_code") or "",
            **({"blockers": fields["blockers"]} if fields.get("blockers") else {}),
        },
    )
    # The incumbent: the baseline, the last kept candidate, or the last cascade stage that shipped.
    if fields.get("decision") in {"keep", "baseline", "ship"}:
        tx.conn.execute(
            "UPDATE campaigns SET incumbent_iteration_id = ?, updated_at = ? WHERE workspace_id = ? AND project_id = ? "
            "AND campaign_id = ?",
            (iteration_id, tx.now, ws, project, campaign_id),
        )
    return {"iteration_id": iteration_id, "stage": stage, **fields}, False


def active_campaigns(conn: sqlite3.Connection, status: str = "active") -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM campaigns WHERE status = ? ORDER BY created_at", (status,)).fetchall()
    return [{**_record(row), "workspace_id": row["workspace_id"]} for row in rows]


def set_schedule(
    tx: Tx, ws: str, project: str, campaign_id: str, *, cron: str, timezone: str, channel: str
) -> tuple[dict[str, Any], bool]:
    """Create or change the campaign's report schedule; the scheduler rebuilds its job from this row."""
    get_campaign(tx.conn, ws, project, campaign_id)
    schedule_id = f"{campaign_id}.report"
    tx.conn.execute(
        "INSERT INTO schedules (workspace_id, project_id, schedule_id, campaign_id, kind, cron, timezone, channel, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, 'report', ?, ?, ?, ?, ?) "
        "ON CONFLICT (workspace_id, project_id, schedule_id) DO UPDATE SET cron = excluded.cron, "
        "timezone = excluded.timezone, channel = excluded.channel, updated_at = excluded.updated_at",
        (ws, project, schedule_id, campaign_id, cron, timezone, channel, tx.now, tx.now),
    )
    tx.append_event(
        "campaign.schedule_set",
        workspace_id=ws,
        project_id=project,
        payload={"entity": "schedule", "entity_id": schedule_id, "campaign_id": campaign_id, "cron": cron},
    )
    row = tx.conn.execute(
        "SELECT * FROM schedules WHERE workspace_id = ? AND project_id = ? AND schedule_id = ?",
        (ws, project, schedule_id),
    ).fetchone()
    return dict(row), False


def add_stages(tx: Tx, ws: str, project: str, campaign_id: str) -> tuple[dict[str, Any], bool]:
    """A cascade's declared stages as iterations 1..N (queued, in order), once per campaign."""
    campaign = get_campaign(tx.conn, ws, project, campaign_id)
    (existing,) = tx.conn.execute(
        "SELECT COUNT(*) FROM campaign_iterations WHERE workspace_id = ? AND project_id = ? AND campaign_id = ? "
        "AND kind = 'stage'",
        (ws, project, campaign_id),
    ).fetchone()
    if existing:
        return {"campaign_id": campaign_id, "stages": existing}, True
    stages = campaign["spec"].get("stages") or []
    for number, stage in enumerate(stages, start=1):
        iteration_id = f"{campaign_id}.i{number}"
        _insert_iteration(
            tx, ws, project, campaign_id, iteration_id, number, "stage", stage["name"], stage["recipe"],
            f"cascade stage {number} of {len(stages)}",
        )  # fmt: skip
    return {"campaign_id": campaign_id, "stages": len(stages)}, False


def _insert_iteration(
    tx: Tx,
    ws: str,
    project: str,
    campaign_id: str,
    iteration_id: str,
    number: int,
    kind: str,
    variable: str,
    recipe: dict[str, Any],
    rationale: str,
) -> None:
    """A queued iteration (a search candidate or a cascade stage) and its `campaign.iteration_added` event."""
    tx.conn.execute(
        "INSERT INTO campaign_iterations (workspace_id, project_id, campaign_id, iteration_id, number, kind, "
        "stage, primary_variable, recipe_change_json, rationale, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
        (ws, project, campaign_id, iteration_id, number, kind, variable, canonical_json(recipe), rationale, tx.now,
         tx.now),
    )  # fmt: skip
    tx.append_event(
        "campaign.iteration_added",
        workspace_id=ws,
        project_id=project,
        payload={"entity": "campaign_iteration", "entity_id": iteration_id, "campaign_id": campaign_id},
    )
