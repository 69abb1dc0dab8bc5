"""RunCards: immutable, content-addressed evidence records of one run. A change is a new card."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bashgym.client.errors import NotFound
from bashgym.client.validation import canonical_json, check_payload, sha256_text
from bashgym.ledger.rows import require_project, to_record
from bashgym.ledger.runs import get_run_row
from bashgym.ledger.tx import Tx

CLAIM_TIERS = ("local_smoke", "narrow", "broad")
DECISIONS = ("pending", "hold", "promote", "reject")


def card_id_of(card: dict[str, Any]) -> str:
    """The id is the sha256 of the card's canonical JSON: equal content, equal id."""
    return sha256_text(canonical_json(card))


def record_runcard(tx: Tx, ws: str, project: str, card: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    require_project(tx.conn, ws, project)
    get_run_row(tx.conn, ws, project, card["run_id"])
    check_payload(card, field="runcard")
    card_id = card_id_of(card)
    existing = tx.conn.execute(
        "SELECT * FROM runcards WHERE workspace_id = ? AND project_id = ? AND card_id = ?", (ws, project, card_id)
    ).fetchone()
    if existing is not None:
        return _record(existing), True
    tx.conn.execute(
        "INSERT INTO runcards (workspace_id, project_id, card_id, run_id, attempt_id, claim_tier, decision, card_json, "
        "created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            ws,
            project,
            card_id,
            card["run_id"],
            card.get("attempt_id"),
            card["claim_tier"],
            card["decision"],
            canonical_json(card),
            tx.actor.actor_id,
            tx.now,
        ),
    )
    tx.append_event(
        "runcard.created",
        workspace_id=ws,
        project_id=project,
        run_id=card["run_id"],
        payload={"entity": "runcard", "entity_id": card_id, "claim_tier": card["claim_tier"]},
    )
    row = tx.conn.execute(
        "SELECT * FROM runcards WHERE workspace_id = ? AND project_id = ? AND card_id = ?", (ws, project, card_id)
    ).fetchone()
    return _record(row), False


def runcards_of_run(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM runcards WHERE workspace_id = ? AND project_id = ? AND run_id = ? ORDER BY created_at DESC",
        (ws, project, run_id),
    ).fetchall()
    return [_record(row) for row in rows]


def runcard_followups(conn: sqlite3.Connection, ws: str, project: str, run_id: str) -> dict[str, Any]:
    """What happened to a run after its cards were written (the cards stay as they were): the latest gate verdict,
    the decisions about the run, and the aliases those decisions moved, with where each alias points now. An unknown
    project or run is NotFound, as every read of one is."""
    get_run_row(conn, ws, project, run_id)
    key = (ws, project)
    gate = conn.execute(
        "SELECT payload_json, actor, created_at FROM events WHERE workspace_id = ? AND project_id = ? AND run_id = ? "
        "AND event_type = 'gate.evaluated' ORDER BY cursor DESC LIMIT 1",
        (*key, run_id),
    ).fetchone()
    decisions = [
        dict(row)
        for row in conn.execute(
            "SELECT decision_id, decision_type, outcome, rationale, actor, created_at FROM decisions "
            "WHERE workspace_id = ? AND project_id = ? AND run_id = ? ORDER BY created_at",
            (*key, run_id),
        )
    ]
    moves = [
        dict(row)
        for row in conn.execute(
            "SELECT h.alias, h.model_version_id, h.previous_version_id, h.decision_id, h.moved_by, h.moved_at, "
            "a.model_version_id AS points_now_to FROM model_alias_history h LEFT JOIN model_aliases a "
            "ON a.workspace_id = h.workspace_id AND a.project_id = h.project_id AND a.alias = h.alias "
            f"WHERE h.workspace_id = ? AND h.project_id = ? AND h.decision_id IN ({', '.join('?' * len(decisions))}) "
            "ORDER BY h.id",
            (*key, *(d["decision_id"] for d in decisions)),
        )
    ]
    return {
        "gate": None
        if gate is None
        else {**json.loads(gate["payload_json"]), "actor": gate["actor"], "at": gate["created_at"]},
        "decisions": decisions,
        "alias_moves": moves,
    }


def get_runcard(conn: sqlite3.Connection, ws: str, project: str, card_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM runcards WHERE workspace_id = ? AND project_id = ? AND card_id = ?", (ws, project, card_id)
    ).fetchone()
    if row is None:
        raise NotFound(
            f"No RunCard {card_id!r} in project {project!r}.", hint="bashgym runcard show --run RUN lists them."
        )
    return _record(row)


def comparisons_with_candidates(
    conn: sqlite3.Connection, ws: str, project: str, result_ids: list[str]
) -> list[dict[str, Any]]:
    if not result_ids:
        return []
    marks = ",".join("?" * len(result_ids))
    rows = conn.execute(
        f"SELECT * FROM comparisons WHERE workspace_id = ? AND project_id = ? AND candidate_result_id IN ({marks}) "
        "ORDER BY created_at",
        (ws, project, *result_ids),
    ).fetchall()
    return [to_record(row) for row in rows]


def _record(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "card_id": row["card_id"],
        "run_id": row["run_id"],
        "claim_tier": row["claim_tier"],
        "decision": row["decision"],
        "card": json.loads(row["card_json"]),
        "created_by": row["created_by"],
        "created_at": row["created_at"],
    }
