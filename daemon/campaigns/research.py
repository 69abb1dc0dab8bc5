"""The agent surface of a campaign: one call for where it stands, one to wait for it to change.

`wait` reads every event after the caller's cursor and returns at the first page that touches the
campaign, with the cursor of the last event it examined, so a change is never skipped unobserved.
"""

from __future__ import annotations

import time
from typing import Any

from bashgym.daemon.campaigns.reports import next_action
from bashgym.ledger.store import Ledger, Recheck

TERMINAL = frozenset({"completed", "exhausted", "blocked", "failed", "cancelled"})


async def state(ledger: Ledger, ws: str, project: str, campaign_id: str) -> dict[str, Any]:
    campaign = await ledger.get_campaign(ws, project, campaign_id)
    spec = campaign["spec"]
    iterations = await ledger.list_iterations(ws, project, campaign_id)
    listing = await ledger.list_evaluations(ws, project)
    metrics = {r["result_id"]: r["metrics"] for r in listing["results"]}
    comparisons = {c["comparison_id"]: c for c in listing["comparisons"]}
    metric = spec["primary_metric"]

    def value(it: dict[str, Any]) -> float | None:
        found = metrics.get(it["result_id"] or "", {}).get(metric)
        return None if found is None else float(found)

    incumbent = next((i for i in iterations if i["iteration_id"] == campaign["incumbent_iteration_id"]), None)
    scored = [v for i in iterations if (v := value(i)) is not None]
    best = (max if spec["direction"] == "maximize" else min)(scored) if scored else None
    decided = [i for i in iterations if i["kind"] == "candidate" and i["stage"] == "decided"]
    latest = decided[-1] if decided else None
    comparison = comparisons.get((latest or {}).get("comparison_id") or "")
    budget = await ledger.budget_summary(ws, project, f"campaign-{campaign_id}"[:128])
    rows = [{"stage": i["stage"], "kind": i["kind"]} for i in iterations]  # what next_action reads
    return {
        "campaign_id": campaign_id,
        "objective": spec["objective"],
        "phase": campaign["status"],
        "status_reason": campaign["status_reason"],
        "version": campaign["version"],
        "iteration": {"decided_candidates": len(decided), "max_iterations": spec["stop_rules"]["max_iterations"]},
        "current": next(
            ({"iteration_id": i["iteration_id"], "stage": i["stage"]} for i in iterations if i["stage"] != "decided"),
            None,
        ),
        "incumbent": None
        if incumbent is None
        else {"iteration_id": incumbent["iteration_id"], metric: value(incumbent)},
        "best_metric": best,
        "latest_decision": None
        if latest is None
        else {
            "iteration_id": latest["iteration_id"],
            "decision": latest["decision"],
            "reason_code": latest["reason_code"],
        },
        "latest_comparison": None
        if comparison is None
        else {k: comparison[k] for k in ("comparison_id", "delta", "ci_low", "ci_high")},
        "budget": {k: budget.get(k) for k in ("limit", "settled", "reserved", "remaining")},
        "next_action": next_action(campaign["status"], rows, project=project, campaign_id=campaign_id),
        "cursor": ledger.last_cursor,
    }


async def wait(
    ledger: Ledger, ws: str, project: str, campaign_id: str, *, after_cursor: int, timeout_s: float, recheck: Recheck
) -> dict[str, Any]:
    """`terminal`, `action_required` or `changed` once an event about the campaign lands, else `timeout`; while
    the caller may read the campaign (`recheck`: Ledger.wait_for_events)."""
    deadline = time.monotonic() + timeout_s
    cursor = after_cursor
    runs = {i["run_id"] for i in await ledger.list_iterations(ws, project, campaign_id) if i["run_id"]}
    has_waited = False
    while True:
        head = ledger.last_cursor  # read first: every event up to it is committed, so the page below holds them
        page = await ledger.events_page(ws, project, after_cursor=cursor, limit=1000)
        touched = [e for e in page.events if _about(e.payload, e.run_id, campaign_id, runs)]
        campaign = await ledger.get_campaign(ws, project, campaign_id) if touched else None
        if has_waited:
            await recheck()  # what came while it waited goes only to a caller who may still read it
        if page.events:
            cursor = page.events[-1].cursor
        if not page.has_more:
            cursor = max(cursor, head)  # the rest up to head belongs to other projects
        if campaign is not None:
            outcome = (
                "terminal"
                if campaign["status"] in TERMINAL
                else "action_required"
                if campaign["status"] == "awaiting_authority"
                else "changed"
            )
            return {"outcome": outcome, "next_cursor": cursor, "status": campaign["status"], "events": len(touched)}
        if page.has_more:
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"outcome": "timeout", "next_cursor": cursor}
        await ledger.wait_for_events(cursor, remaining, recheck=recheck)
        has_waited = True


def _about(payload: dict[str, Any], run_id: str | None, campaign_id: str, runs: set[str]) -> bool:
    entity = str(payload.get("entity_id", ""))
    return (
        payload.get("campaign_id") == campaign_id
        or entity == campaign_id
        or entity.startswith(f"{campaign_id}.")
        or (run_id is not None and run_id in runs)
    )
