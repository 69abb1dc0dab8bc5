"""Ledger events rendered for people: the notices the Discord bot posts and the console channel prints.

The daemon renders, so the bot stays a thin adapter and the console shows exactly what Discord would.
A notice is built from its event plus the ledger rows it names (a run's metrics, a comparison's CI, a
report's Markdown and charts). Events nobody needs to see (metric batches, stage bookkeeping, token
issues) render to nothing; a consumer still moves its cursor past them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from bashgym.client.models import Notice, NoticeField, NoticeFile, NoticeOutcome, NoticePage
from bashgym.client.render import campaign_state, notice_text, sentences
from bashgym.client.specs import Event
from bashgym.daemon.background import BackgroundLoop
from bashgym.daemon.notices.external_jobs import EXTERNAL_JOB_OUTCOMES, render_external_job
from bashgym.ledger.store import Ledger

log = logging.getLogger("bashgym.notices")

CONSOLE_CONSUMER = "console-notifier"
DESCRIPTION_LIMIT = 3500  # Discord allows 4096 characters in an embed description; leave room for the notice
RUN_OUTCOMES: dict[str, tuple[NoticeOutcome, str]] = {
    "run.started": ("info", "Run started"),
    "run.completed": ("success", "Run completed"),
    "run.failed": ("failure", "Run failed"),
    "run.cancelled": ("warning", "Run cancelled"),
    "run.unknown": ("warning", "Run state unknown"),
}
# How a cascade stage's decision reads in its notice (a search candidate is kept or discarded).
STAGE_DECISIONS = {"ship": "shipped", "blocked": "blocked by the gate", "failed": "failed"}
CAMPAIGN_OUTCOMES: dict[str, NoticeOutcome] = {
    "completed": "success",
    "blocked": "failure",  # a cascade stopped at a stage whose gate did not ship
    "exhausted": "neutral",
    "failed": "failure",
    "cancelled": "warning",
    "awaiting_authority": "warning",
    "paused": "neutral",
}
KEY_METRICS = ("train.loss", "loss", "eval.loss", "reward", "pass@1")
BUDGET_WARNING_FRACTION = 0.2  # warn once what remains of a limit falls to this share or below


def nonce_for(event_id: str) -> str:
    """Discord keeps nonces up to 25 characters; the same event always gives the same one."""
    return hashlib.sha256(event_id.encode()).hexdigest()[:25]


class NoticeRenderer:
    def __init__(self, ledger: Ledger, reports_dir: Path) -> None:
        self.ledger = ledger
        self.reports_dir = reports_dir

    async def page(self, ws: str, *, after_cursor: int, limit: int) -> NoticePage:
        events = await self.ledger.events_page(ws, None, after_cursor=after_cursor, limit=limit)
        channels = await self.ledger.channel_map(ws)
        notices = []
        for event in events.events:
            try:
                notice = await self.render(event, channels.get(event.project_id))
            except Exception:  # one unreadable event must not stall every consumer behind it
                log.exception("Could not render event %s (%s)", event.cursor, event.event_type)
                notice = None
            if notice is not None:
                notices.append(notice)
        next_cursor = events.events[-1].cursor if events.events else after_cursor
        return NoticePage(notices=notices, next_cursor=next_cursor)

    async def render(self, event: Event, channel_id: str | None) -> Notice | None:
        kind = event.event_type
        built: Rendered | None
        if kind in RUN_OUTCOMES:
            built = await self._run(event)
        elif kind in EXTERNAL_JOB_OUTCOMES:
            built = await render_external_job(self.ledger, event)
        else:
            handler = _HANDLERS.get(kind)
            built = await handler(self, event) if handler else None
        if built is None:
            return None
        outcome, title, description, fields, *rest = built
        files: list[NoticeFile] = rest[0] if rest else []
        channel = rest[1] if len(rest) > 1 and rest[1] else channel_id
        corr = f" · corr {event.correlation_id}" if event.correlation_id else ""  # the daemon's own steps have none
        return Notice(
            cursor=event.cursor,
            event_id=event.event_id,
            event_type=kind,
            workspace_id=event.workspace_id,
            project_id=event.project_id,
            channel_id=channel,
            nonce=nonce_for(event.event_id),
            outcome=outcome,
            title=title,
            description=description[:DESCRIPTION_LIMIT],
            fields=[NoticeField(name=n, value=v[:1000]) for n, v in fields if v],
            footer=f"{event.project_id}{corr} · #{event.cursor}",
            files=files,
        )

    # -- one renderer per kind of event ----------------------------------------------------------

    async def _run(self, event: Event) -> Rendered:
        outcome, title = RUN_OUTCOMES[event.event_type]
        run = await self.ledger.get_run(event.workspace_id, event.project_id, event.run_id or "")
        config = run.get("config") or {}
        fields = [
            ("run", run["run_id"]),
            ("method", run["method"]),
            ("model", run.get("model_version_id") or str(config.get("base_model") or "")),
            ("dataset", run.get("dataset_version_id") or ""),
            ("target", str(config.get("compute_target") or "local")),
        ]
        if event.event_type != "run.started":
            duration = _duration_s(run.get("started_at"), run.get("ended_at"))
            fields.append(("duration", f"{duration:.0f} s" if duration is not None else ""))
            summary = run.get("metric_summary") or {}
            for metric in KEY_METRICS:
                if metric in summary and summary[metric].get("latest") is not None:
                    fields.append((metric, f"{summary[metric]['latest']:.4g} (step {summary[metric]['last_step']})"))
        if run.get("is_simulation"):
            fields.append(("simulation", "yes: this run proves wiring only"))
        reason = str(event.payload.get("reason") or "")
        return outcome, f"{title}: {run['run_id']}", reason, fields

    async def _anomaly(self, event: Event) -> Rendered:
        p = event.payload
        step = f" at step {p['step']}" if p.get("step") is not None else ""
        return (
            "warning",
            f"Anomaly on {event.run_id}: {p['kind']}",
            f"{p['detail']}{step}",
            [("run", event.run_id or "")],
        )

    async def _evaluation(self, event: Event) -> Rendered | None:
        result = await self._entity(event, "eval_result")
        if result is None:
            return None
        metrics = result.get("metrics") or {}
        subject = result.get("run_id") or result.get("model_version_id") or "gold solutions"
        fields = [("result", result["result_id"]), ("suite", result["suite_id"]), ("model", str(subject))]
        fields += [(name, _number(value)) for name, value in sorted(metrics.items()) if _shown_metric(name)][:12]
        if result.get("is_simulation"):
            fields.append(("simulation", "yes: not a quality claim"))
        return "info", f"Evaluation {result['status']}: {subject} on {result['suite_id']}", "", fields

    async def _comparison(self, event: Event) -> Rendered | None:
        c = await self._entity(event, "comparison")
        if c is None:
            return None
        low, high = c.get("ci_low"), c.get("ci_high")
        outcome: NoticeOutcome = "neutral"
        verdict = "the CI includes zero: no evidence of a difference"
        if low is not None and low > 0:
            outcome, verdict = "success", "the candidate is better (CI above zero)"
        elif high is not None and high < 0:
            outcome, verdict = "failure", "the candidate is worse (CI below zero)"
        fields = [
            ("baseline", c["baseline_result_id"]),
            ("candidate", c["candidate_result_id"]),
            (f"Δ {c['primary_metric']}", _number(c.get("delta"))),
            ("95% CI", f"[{_number(low)}, {_number(high)}]"),
            ("paired tasks", str((c.get("details") or {}).get("paired_tasks", ""))),
        ]
        placements = (c.get("details") or {}).get("ran_on")
        if placements and (c.get("details") or {}).get("ran_alike") is False:
            fields.append(("ran on", f"baseline {placements['baseline']}; candidate {placements['candidate']}"))
        return outcome, f"Comparison on {c['suite_id']}", verdict, fields

    async def _decision(self, event: Event) -> Rendered | None:
        d = await self._entity(event, "decision")
        if d is None:
            return None
        outcomes: dict[str, NoticeOutcome] = {"promote": "success", "override": "warning", "reject": "failure"}
        outcome = outcomes.get(d["outcome"], "info")
        fields = [("decision", d["decision_id"]), ("run", d.get("run_id") or ""), ("by", d["actor"])]
        fields.append(("evidence", ", ".join(d.get("evidence_refs") or [])[:1000]))
        title = f"{d['decision_type'].capitalize()} decision: {d['outcome']}"
        return outcome, title, d["rationale"], fields

    async def _gate(self, event: Event) -> Rendered:
        """Green for a run that ships; otherwise each blocker with what to do next."""
        verdict = event.payload
        run = event.run_id or ""
        asked = {"gate": "a look at the gate", "decide": "a promotion decision"}.get(verdict["asked_by"])
        fields = [("run", run), ("asked by", f"{event.actor} ({asked or verdict['asked_by']})")]
        if verdict["ship"]:
            fields += [
                (f"warning: {w['code']}", f"{w['message']} Next: {w['next_action']}") for w in verdict["warnings"]
            ]
            return "success", f"Gate: run {run} ships", "Every check the method needs passed.", fields
        fields += [(b["code"], f"{b['message']} Next: {b['next_action']}") for b in verdict["blockers"][:20]]
        count = len(verdict["blockers"])
        return "failure", f"Gate: run {run} is blocked", f"{count} blocker{'s' if count != 1 else ''}.", fields

    async def _runcard(self, event: Event) -> Rendered | None:
        card = await self._entity(event, "runcard")
        if card is None:
            return None
        body = card.get("card") or {}
        fields = [
            ("card", card["card_id"]),
            ("run", card["run_id"]),
            ("method", str(body.get("method") or "")),
            ("claim tier", card["claim_tier"]),
            ("decision", card["decision"]),
            ("evaluations", str(len(body.get("evaluation_result_ids") or []))),
            ("comparisons", str(len(body.get("comparison_ids") or []))),
        ]
        limitations = sentences(body.get("known_limitations") or [])
        return "info", f"RunCard for {card['run_id']}", limitations, fields

    async def _campaign_moved(self, event: Event) -> Rendered:
        p = event.payload
        outcome = CAMPAIGN_OUTCOMES.get(p["status"], "info")
        title = f"Campaign {p['campaign_id']}: {p['previous_status']} → {campaign_state(p['status'], p.get('reason'))}"
        fields = [("campaign", p["campaign_id"]), ("by", event.actor)]
        if p.get("approved_capability"):
            fields.append(("lent", f"{p['approved_capability']} for {p.get('approved_iteration_id')}"))
        return outcome, title, str(p.get("reason") or ""), fields

    async def _campaign_stage(self, event: Event) -> Rendered | None:
        p = event.payload
        if p["stage"] != "decided" or p.get("decision") == "baseline":
            return None
        decision = p.get("decision")
        kept = decision in {"keep", "ship"}
        said = STAGE_DECISIONS.get(str(decision), "kept" if kept else "discarded")
        title = f"Campaign {p['campaign_id']}: {p['iteration_id']} {said}"
        fields = [("iteration", p["iteration_id"]), ("reason", p.get("reason_code") or ""), ("run", event.run_id or "")]
        # A cascade stage the gate blocked says why, blocker by blocker, with what to do next.
        blockers = "\n".join(f"{b['code']}: {b['message']}" for b in p.get("blockers") or [])
        outcome: NoticeOutcome = "success" if kept else "failure" if decision in {"blocked", "failed"} else "neutral"
        return outcome, title, blockers, fields

    async def _budget(self, event: Event) -> Rendered | None:
        p = event.payload
        scope = str(p.get("scope") or "project")
        remaining, granted = p.get("remaining"), p.get("granted") or {}  # as of this entry, recorded with it
        fields = [("scope", scope), ("entry", str(p["entity_id"]))]
        if remaining is not None:
            fields.append(("remaining", f"{remaining['runs']} runs, {remaining['gpu_hours']:.2f} GPU-hours"))
        if p.get("kind") == "amend":
            return "info", f"Budget amended: {scope}", f"by {event.actor}", fields
        if remaining is None or p.get("kind") not in {"reserve", "settle"}:
            return None
        for unit in ("runs", "gpu_hours"):
            total = float(granted.get(unit) or 0)
            if total > 0 and remaining[unit] <= BUDGET_WARNING_FRACTION * total:
                left = f"{remaining[unit]:.4g} {unit.replace('_', '-')} left"
                if p.get("kind") == "reserve":  # held for a run that is starting: information, not a warning yet
                    holder = f"run {event.run_id}" if event.run_id else "a run"
                    return "info", f"Budget reserved: {scope}", f"{holder} holds its share; {left} after it", fields
                spent = "spent" if remaining[unit] <= 0 else "nearly spent"
                return "warning", f"Budget {spent}: {scope}", left, fields
        return None

    async def _report(self, event: Event) -> Rendered | None:
        report = await self._entity(event, "report")
        if report is None:
            return None
        manifest = report.get("manifest") or {}
        report_id = report["report_id"]
        names = [f["name"] for f in manifest.get("files", [])]
        markdown = ""
        if "report.md" in names:
            markdown = await asyncio.to_thread(_read_text, self.reports_dir / report_id / "report.md")
        charts = [
            NoticeFile(name=name, path=f"/v1/projects/{event.project_id}/reports/{report_id}/{name}")
            for name in names
            if name.endswith(".png")
        ]
        campaign = str(manifest.get("campaign_id") or "")
        scheduled = event.actor == "system:scheduler"
        channel = (
            await self.ledger.campaign_schedule_channel(event.workspace_id, event.project_id, campaign)
            if scheduled and campaign
            else ""
        )
        title = f"{'Scheduled report' if scheduled else 'Report'}: {report['title']}"
        return "info", title, markdown, [("report", report_id), ("campaign", campaign)], charts, channel or None

    async def _channel_set(self, event: Event) -> Rendered:
        return (
            "info",
            f"Notifications of project {event.project_id} now come here",
            f"Set by {event.actor}.",
            [],
            [],
            str(event.payload.get("channel_id") or "") or None,
        )

    async def _entity(self, event: Event, kind: str) -> dict[str, Any] | None:
        return await self.ledger.entity(event.workspace_id, event.project_id, kind, str(event.payload["entity_id"]))


# (outcome, title, description, fields[, files[, channel override]])
Rendered = tuple[Any, ...]
_HANDLERS: dict[str, Callable[[NoticeRenderer, Event], Awaitable[Rendered | None]]] = {
    "run.anomaly": NoticeRenderer._anomaly,
    "eval_result.recorded": NoticeRenderer._evaluation,
    "comparison.recorded": NoticeRenderer._comparison,
    "decision.recorded": NoticeRenderer._decision,
    "gate.evaluated": NoticeRenderer._gate,
    "runcard.created": NoticeRenderer._runcard,
    "campaign.transitioned": NoticeRenderer._campaign_moved,
    "campaign.stage": NoticeRenderer._campaign_stage,
    "budget.entry": NoticeRenderer._budget,
    "report.recorded": NoticeRenderer._report,
    "project.channel_set": NoticeRenderer._channel_set,
}


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _duration_s(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    delta = datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
    return max(delta.total_seconds(), 0.0)


def _number(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return "n/a" if value is None else str(value)
    if isinstance(value, int | float):
        return f"{value:.4g}"
    return str(value)


def _shown_metric(name: str) -> bool:
    return name.startswith(("pass@", "mean_", "timeout", "tamper", "unsafe", "accuracy", "loss", "match", "holdout"))


# -- the console channel -----------------------------------------------------------------------


class ConsoleNotifier(BackgroundLoop):
    """The notifier's console channel: when Discord is not configured, notices print on the daemon's
    stdout. A durable consumer: its cursor lives in the ledger and moves after each printed notice."""

    def __init__(
        self,
        ledger: Ledger,
        renderer: NoticeRenderer,
        workspace: str,
        *,
        out: TextIO | None = None,
        poll_s: float = 2.0,
    ) -> None:
        self.ledger = ledger
        self.renderer = renderer
        self.workspace = workspace
        self.out = out or sys.stdout
        self.poll_s = poll_s

    async def _loop(self) -> None:
        stored = await self.ledger.get_consumer_cursor(CONSOLE_CONSUMER)
        # A first start begins at the head: the console shows what happens from now on, not the history.
        cursor = int(stored["cursor"]) if stored.get("updated_at") else self.ledger.last_cursor
        while True:
            try:
                cursor = await self.drain(cursor)
            except Exception:
                log.exception("Console notifier failed; retrying")
            await self.ledger.wait_for_events(cursor, self.poll_s)

    async def drain(self, cursor: int) -> int:
        """Print every notice after `cursor`; return the cursor to wait from. An empty page means nothing of
        this workspace lies up to the head read before it, so the wait starts there: waiting from the old
        cursor while the newest events belong elsewhere (a workspace-wide token's) would never sleep."""
        while True:
            head = self.ledger.last_cursor
            page = await self.renderer.page(self.workspace, after_cursor=cursor, limit=200)
            if not page.notices and page.next_cursor == cursor:
                if head > cursor:
                    await self.ledger.ack_consumer_cursor(CONSOLE_CONSUMER, head)
                return max(cursor, head)
            for notice in page.notices:
                try:
                    print(notice_text(notice), file=self.out, flush=True)
                except (OSError, ValueError):  # nobody reads the console any more; keep the cursor where it was
                    log.warning("The console is closed; the console channel stops.")
                    raise asyncio.CancelledError from None
                await self.ledger.ack_consumer_cursor(CONSOLE_CONSUMER, notice.cursor)
            if page.next_cursor == cursor:
                return cursor
            cursor = page.next_cursor
            await self.ledger.ack_consumer_cursor(CONSOLE_CONSUMER, cursor)
