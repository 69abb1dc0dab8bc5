"""The human views that read like a report: a project at a glance, a run, an evaluation, a comparison, a RunCard
and a gate verdict. Each takes the daemon's JSON answer (what `--json` prints) and prints the facts a person asks
for first, figures rounded, ids whole; `--json` has every field."""

from __future__ import annotations

from typing import Any

from bashgym.cli.output import cell, console, escape, pairs, table, when
from bashgym.client.render import (
    campaign_state,
    duration,
    figure,
    key_metric_text,
    project_glance,
    provenance_of,
    provenance_text,
    signed,
    unit_of,
)

MARKS = {"ship": "[green]✔[/green]", "blocked": "[red]✖[/red]", "warning": "[yellow]![/yellow]"}
# The settings a reader of a run looks for first; the rest are a `--json` away.
KEY_SETTINGS = (
    "learning_rate",
    "max_steps",
    "num_epochs",
    "batch_size",
    "gradient_accumulation_steps",
    "max_seq_length",
    "use_lora",
    "lora_rank",
    "seed",
)


def heading(text: str) -> None:
    console().print(f"\n[bold]{escape(text)}[/bold]")


def say(text: str, *, markup: bool = False, indent: int = 0) -> None:
    """A line of a view; long lines wrap under their own indent."""
    if not indent:
        console().print(text, markup=markup, overflow="fold")
        return
    from rich.padding import Padding
    from rich.text import Text

    body = Text.from_markup(text) if markup else Text(text)
    console().print(Padding(body, (0, 0, 0, indent), expand=False))


def context(project: str, data: dict[str, Any], campaigns: list[dict[str, Any]]) -> None:
    """`ledger context`: the glance Discord's `/project context` shows, as terminal sections."""
    glance = project_glance(project, data, campaigns)
    say(f"[bold]Project {escape(glance.name)}[/bold] ({escape(glance.project_id)})", markup=True)
    if glance.description:
        say(glance.description)
    heading("Health")
    if glance.healthy:
        say(f"  {MARKS['ship']} nothing needs attention", markup=True)
    for signal in glance.signals:
        say(f"  {MARKS['warning']} {escape(signal.label)} ({signal.count})", markup=True)
        for run_id in signal.ids[:5]:
            say(f"      {run_id}")
    heading("Inventory")
    say(glance.inventory, indent=2)
    heading("Champion and aliases")
    for alias, version in glance.aliases or [("", "")]:
        say(f"  {alias} → {version}" if alias else "  no alias yet")
    heading("Latest runs")
    runs = [{**run, "key metric": key_metric_text(run)} for run in glance.runs]
    if runs:
        table(runs, ["run_id", "method", "status", "key metric", "created_at"])
    else:
        say("  none yet")
    heading("Open campaigns")
    if glance.open_campaigns:
        table(glance.open_campaigns, ["campaign_id", "status", "title"])
    else:
        say("  none")
    heading("Last decisions")
    if glance.decisions:
        table(glance.decisions[:5], ["decision_type", "outcome", "run_id", "created_at"])
    else:
        say("  none yet")


def tag_summary(tags: dict[str, str]) -> str:
    """Tags in one cell: `stage=eval team=nlp`."""
    return " ".join(f"{key}={value}" for key, value in sorted(tags.items()))


def labels(record: dict[str, Any]) -> list[tuple[str, str]]:
    """A shown record's tags and note (ledger.tags), as lines of its pairs; none when it has neither."""
    tags, note = record.get("tags") or {}, record.get("note")
    shown = [("tags", tag_summary(tags))] if tags else []
    return shown + ([("note", f"{note['text']}  ({note['set_by']}, {note['set_at']})")] if note else [])


def run(record: dict[str, Any]) -> None:
    """`ledger run` and `training status`: who, what, on which data and model, how it went, and its evidence."""
    say(f"[bold]Run {escape(record['run_id'])}[/bold]  {_status(record['status'])}", markup=True)
    lane = (record.get("config") or {}).get("compute_target")
    pairs(
        [
            ("project", f"{record['project_id']} / experiment {record.get('experiment_id') or '-'}"),
            ("method", str(record.get("method") or "-")),
            ("model", str(record.get("model_version_id") or "-")),
            ("dataset", str(record.get("dataset_version_id") or "-")),
            ("lane", f"{lane or '-'} (environment {record.get('environment_id') or '-'})"),
            ("context", _context(record)),
            ("environment", _environment(record.get("environment"))),
            ("launched by", str(record.get("launched_by") or "-")),
            ("created", cell(record.get("created_at"))),
            ("ran", _span(record)),
        ]
        + ([("simulation", "yes: a labelled simulation, not a trained model")] if record.get("is_simulation") else [])
        + labels(record)
    )
    config = record.get("config") or {}
    settings = [(name, cell(config[name], name)) for name in KEY_SETTINGS if name in config]
    if settings:
        heading("Settings (the rest: --json)")
        pairs(settings)
    attempts = record.get("attempts") or []
    if attempts:
        heading("Attempts")
        table(
            [{**a, "reason": a.get("error_summary") or a.get("status_reason")} for a in attempts],
            ["attempt_id", "status", "reason"],
        )
    anomalies = record.get("anomalies") or []
    if anomalies:
        heading("Anomalies")
        for anomaly in anomalies:  # whole: a detail says what happened and what to change
            say(f"step {anomaly.get('step')} {anomaly.get('kind')}: {anomaly.get('detail')}", indent=2)
    metrics(record.get("metric_summary") or {})
    evaluations = record.get("evaluations") or []
    heading("Evaluations")
    if evaluations:
        # the samples of each are a `bashgym eval show` away: the provenance says whether the result counts
        table([_result_row(r) for r in evaluations], ["result_id", "suite", "status", "key metric", "provenance"])
    else:
        say(f"  none yet: bashgym eval run --project {record['project_id']} --run {record['run_id']}")
    artifacts = record.get("artifacts") or []
    heading("Artifacts")
    if artifacts:
        total = sum(int(a.get("size_bytes") or 0) for a in artifacts)
        say(f"  {len(artifacts)} files, {size(total)}, each with its sha256 (--json lists them)")
        kinds: dict[str, int] = {}
        for artifact in artifacts:
            kinds[artifact["kind"]] = kinds.get(artifact["kind"], 0) + 1
        say("  " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
    else:
        say("  none")


def plan(result: dict[str, Any]) -> None:
    """`training plan`: would it launch, where, recorded under what, and the settings it would train with."""
    ready = bool(result.get("ready"))
    mark = MARKS["ship"] if ready else MARKS["blocked"]
    unofficial = result.get("context_status") == "unassigned"
    verdict = "ready: a launch would be accepted" if ready else "a launch would be refused"
    if ready and unofficial:  # accepted, but never promotable: not what "ready" means to a user
        mark = MARKS["warning"]
        verdict = (
            "a launch would be accepted as an UNOFFICIAL run: kept under `unassigned`, which the gate never ships "
            "(name --project P --model-version MV --dataset-version DV, or a complete --tracking-context)"
        )
    say(f"{mark} [bold]Training plan[/bold] (nothing launched): {verdict}", markup=True)
    for reason in result.get("reasons") or []:
        say(f"  {MARKS['blocked']} {escape(str(reason))}", markup=True)
    for hint in result.get("hints") or []:
        say(f"  hint: {hint}", indent=0)
    config = result.get("effective_config") or {}
    schedule = config.get("schedule") or {}
    preflight = result.get("lane_preflight") or {}
    facts = preflight.get("facts") or {}
    missing = result.get("missing_context_fields") or []
    recorded = f"project {result.get('project_id')}, context {result.get('context_status')}"
    if missing:
        recorded += f": {len(missing)} tracking-context fields missing, so it is not an official run"
    steps = schedule.get("max_steps")
    length = f"{steps} steps" if isinstance(steps, int) and steps > 0 else f"{schedule.get('num_train_epochs')} epochs"
    batch = schedule.get("per_device_train_batch_size")
    accumulation = schedule.get("gradient_accumulation_steps")
    adapter = config.get("adapter")
    pairs(
        [
            ("method", f"{config.get('method') or '-'} with {config.get('trainer') or '-'}"),
            ("model", str((config.get("model") or {}).get("base_model") or "-")),
            ("data", str((config.get("data") or {}).get("dataset_path") or "-")),
            (
                "lane",
                f"{result.get('lane')} ({'ready' if preflight.get('ready') else 'not ready'}: "
                f"{facts.get('gpus', '?')} GPUs, {facts.get('busy', '?')} of {facts.get('slots', '?')} slots busy)",
            ),
            ("recorded under", recorded),
            (
                "schedule",
                f"{length}, batch {batch}, {accumulation} accumulation steps, learning rate "
                f"{figure(schedule.get('learning_rate'), 'learning_rate')}",
            ),
            ("adapter", f"LoRA r={adapter.get('r')} alpha={adapter.get('lora_alpha')}" if adapter else "none (full)"),
            ("publication", str(result.get("publication") or "none")),
        ]
    )
    say("\nThe full request and effective configuration: the same command with --json.")


def metrics(summary: dict[str, Any]) -> None:
    if not summary:
        return
    heading("Metrics")
    rows = []
    for name, s in sorted(summary.items()):
        unit = unit_of(name)
        bare = {k: figure(s.get(k), name).removesuffix(f" {unit}") for k in ("latest", "min", "max")}
        rows.append(
            {"metric": name, **bare, "unit": unit or " ", "points": s.get("count"), "at step": s.get("last_step")}
        )
    table(rows, ["metric", "latest", "min", "max", "unit", "points", "at step"])


def evaluation(result: dict[str, Any], *, ran_on: str = "") -> None:
    """`eval run`: the result's figures, what ran it and how far to trust it."""
    subject = result.get("run_id") or result.get("model_version_id") or "gold solutions"
    say(f"[bold]Evaluation {escape(result['result_id'])}[/bold]  {_status(result['status'])}", markup=True)
    details = result.get("details") or {}
    pairs(
        [
            ("suite", str(result["suite_id"])),
            ("of", str(subject)),
            ("provenance", provenance_text(result)),
            ("samples", f"{result.get('sample_count', 0):,}"),
            ("isolation", str((details.get("isolation") or {}).get("level", "withheld"))),
            ("safety watch", str((details.get("safety") or {}).get("observed", "withheld"))),
            ("canary guard rate", figure((details.get("canaries") or {}).get("guard_rate"), "guard_rate")),
            ("ran on", ran_on or "not recorded"),
        ]
        + ([("simulation", "yes: labelled, not a measurement")] if result.get("is_simulation") else [])
    )
    heading("Metrics")
    pairs((name, figure(value, name)) for name, value in sorted((result.get("metrics") or {}).items()))
    families = details.get("by_family") or {}
    if families:
        heading("By task family")
        table(
            [{"family": name, "tasks": f.get("tasks"), "pass@1": f.get("pass@1")} for name, f in families.items()],
            ["family", "tasks", "pass@1"],
        )


def evaluations(listing: dict[str, Any]) -> None:
    """`ledger evaluations` and `eval results`: suites, results with their key metric, comparisons with the CI."""
    suites = listing.get("suites") or []
    heading("Suites")
    if suites:
        rows = [
            {
                "suite_id": s["suite_id"],
                "kind": s.get("kind"),
                "primary": (s.get("scoring_contract") or {}).get("primary_metric"),
                "protected": bool(s.get("is_protected")),
            }
            for s in suites
        ]
        table(rows, ["suite_id", "kind", "primary", "protected"])
    else:
        say("  none")
    results = listing.get("results") or []
    suites_of_results = sorted({r["suite_id"] for r in results})
    one_suite = len(suites_of_results) == 1
    heading(f"Results on {suites_of_results[0]}" if one_suite else "Results")
    if results:
        rows = [{**_result_row(r), "of": _subject(r)} for r in results]
        columns = ["result_id", "of", "key metric", "provenance"]
        table(rows, columns if one_suite else [*columns[:1], "suite", *columns[1:]])
    else:
        say("  none yet")
    heading("Comparisons")
    compared = listing.get("comparisons") or []
    if compared:
        rows = [
            {
                "comparison_id": c["comparison_id"],
                "Δ": f"{c.get('primary_metric') or ''} {signed(c['delta'])}",
                "95% CI": f"[{signed(c['ci_low'])}, {signed(c['ci_high'])}]",
                "suite": c.get("suite_id"),
                "provenance": provenance_of(c),
            }
            for c in compared
        ]
        table(rows, ["comparison_id", "Δ", "95% CI", "suite", "provenance"])
    else:
        say("  none yet")


def comparison(record: dict[str, Any]) -> None:
    """`eval compare`: the paired delta with its interval, said in words."""
    details = record.get("details") or {}
    metric = record.get("primary_metric") or details.get("metric") or "pass@1"
    low, high = record["ci_low"], record["ci_high"]
    confidence = round(float(details.get("confidence", 0.95)) * 100)
    say(f"[bold]Comparison {escape(record['comparison_id'])}[/bold] on {escape(record['suite_id'])}", markup=True)
    pairs(
        [
            ("baseline", str(record["baseline_result_id"])),
            ("candidate", str(record["candidate_result_id"])),
            (f"Δ {metric}", f"{signed(record['delta'])}, {confidence}% CI [{signed(low)}, {signed(high)}]"),
            ("over", f"{details.get('paired_tasks', '?')} paired tasks, {details.get('resamples', '?')} resamples"),
            ("method", str(details.get("method") or "paired bootstrap")),
            ("provenance", provenance_text(record)),
            ("reads", _reading(low, high)),
        ]
    )


def campaign(record: dict[str, Any], iterations: list[dict[str, Any]]) -> None:
    """`campaign show`: its state and why, what it optimises within which budget, and each iteration's decision."""
    spec = record.get("spec") or {}
    reason = escape(f" ({record['status_reason']})" if record.get("status_reason") else "")
    state = campaign_state(record["status"], record.get("status_reason"))
    say(f"[bold]Campaign {escape(record['campaign_id'])}[/bold]  {_status(state)}{reason}", markup=True)
    budget = spec.get("budget") or {}
    rules = spec.get("stop_rules") or {}
    stops = [f"{name.replace('_', ' ')} {value}" for name, value in rules.items() if value not in (None, {}, [])]
    recipe = spec.get("base_recipe") or {}
    shown = [f"{k} {cell(v, k)}" for k, v in recipe.items() if k in (*KEY_SETTINGS, "method")]
    data = ", ".join(spec.get("dataset_version_ids") or [])
    stages = [
        f"{s['name']} ({s['recipe'].get('method') or s['recipe'].get('strategy')})" for s in spec.get("stages") or []
    ]
    pairs(
        [
            ("title", str(record.get("title") or "-")),
            ("kind", str(spec.get("kind", "search"))),
            ("objective", str(spec.get("objective") or "-")),
            ("metric", f"{spec.get('direction', 'maximize')} {spec.get('primary_metric')} on {spec.get('suite_id')}"),
            ("starts from", f"{spec.get('starting_model_version_id')} on {data}"),
            ("stages", " -> ".join(stages)) if stages else ("base recipe", ", ".join(shown) or "-"),
            ("budget", f"{budget.get('runs')} runs, {figure(float(budget.get('gpu_hours') or 0), 'gpu_hours')}"),
            ("stops at", ", ".join(stops) or "-"),
            ("incumbent", str(record.get("incumbent_iteration_id") or "none yet")),
            *labels(record),
            ("version", f"{record.get('version')} (--expected-version for a guarded change)"),
        ]
    )
    heading("Iterations")
    if not iterations:
        which = f"{record['campaign_id']} --project {record.get('project_id')}"
        say(f"  none yet: bashgym campaign propose {which} --recipe-change RECIPE_CHANGE adds one candidate")
        return
    lines = []
    for it in iterations:
        change = f": {it['primary_variable']}" if it.get("primary_variable") else ""
        decided = f"{it.get('decision') or it.get('stage')} ({it.get('reason_code') or '-'})"
        run = f"; run {it['run_id']}" if it.get("run_id") else ""
        card = f"; RunCard {str(it['card_id'])[:16]}" if it.get("card_id") else ""
        lines.append((it["iteration_id"], f"{it.get('kind')}{change} -> {decided}{run}{card}"))
        # A cascade stage the gate blocked: each blocker under it, as the gate wrote it.
        lines += [("", f"  blocker {b['code']}: {b['message']}") for b in it.get("blockers") or []]
    pairs(lines)


def runcard(card_id: str, card: dict[str, Any], since: dict[str, Any] | None) -> None:
    """`runcard show`: the immutable card as written, then what happened to the run since."""
    say(f"[bold]RunCard of {escape(card['run_id'])}[/bold]", markup=True)
    pairs(
        [
            ("card", card_id),
            ("claim tier", str(card.get("claim_tier"))),
            ("decision", f"{card.get('decision')} (when the card was written)"),
            ("method", str(card.get("method"))),
            ("model", f"{card.get('base_model_version_id') or '-'} trained on {card.get('dataset_version_id') or '-'}"),
            ("status", str(card.get("status"))),
            ("evaluations", _with_provenance(card, "evaluation_result_ids")),
            ("comparisons", _with_provenance(card, "comparison_ids")),
            ("artifacts", f"{len(card.get('artifacts') or [])} with digests"),
            ("written by", str(card.get("creator") or "-")),
        ]
        + ([("simulation", "yes: labelled, not a trained model")] if card.get("is_simulation") else [])
    )
    limitations = card.get("known_limitations") or []
    if limitations:
        heading("Known limitations")
        pairs(("-", limitation) for limitation in limitations)
    metrics(card.get("metric_summary") or {})
    if since is None:  # a card just written: nothing has happened since
        return
    heading("Since this card (the card itself never changes)")
    gate = since.get("gate")
    lines = []
    if gate is None:
        lines.append(
            ("gate", f"not asked yet: bashgym promote gate --project {card['project_id']} --run {card['run_id']}")
        )
    else:
        verdict = "ship" if gate["ship"] else f"blocked ({', '.join(b['code'] for b in gate.get('blockers') or [])})"
        lines.append(("gate", f"{verdict}, {when(gate.get('at'))}"))
    for decision in since.get("decisions") or []:
        lines.append(
            (
                "decision",
                f"{decision['decision_type']}: {decision['outcome']} by {decision['actor']}, "
                f"{when(decision['created_at'])} ({decision['decision_id']})",
            )
        )
    for move in since.get("alias_moves") or []:
        now = move.get("points_now_to")
        still = "still points there" if now == move["model_version_id"] else f"now points to {now or 'nothing'}"
        lines.append(("alias", f"{move['alias']} → {move['model_version_id']}, {when(move['moved_at'])}; {still}"))
    pairs(lines)


def gate(project: str, run_id: str, verdict: dict[str, Any]) -> None:
    """`promote gate`: the verdict first, then each blocker with its code and the next action."""
    shipped = verdict["ship"]
    mark = MARKS["ship"] if shipped else MARKS["blocked"]
    word = "ships" if shipped else f"is blocked ({len(verdict['blockers'])} blockers)"
    say(f"{mark} [bold]Run {escape(run_id)} {word}[/bold] (method {escape(str(verdict.get('method')))})", markup=True)
    for kind, findings in (("blocker", verdict.get("blockers") or []), ("warning", verdict.get("warnings") or [])):
        for finding in findings:
            say("")
            pairs([(f"{kind} {finding['code']}", finding["message"]), ("next", finding.get("next_action") or "-")])
    recorded = verdict.get("recorded") or {}
    say("")
    lines = []
    if recorded:
        again = "judged this same evidence before" if recorded.get("replayed") else "recorded now"
        digest = str(recorded.get("evidence_digest", ""))[:16]
        lines.append(("evidence", f"{digest}… ({again}, event {recorded.get('cursor')})"))
    if shipped:
        decide = f"bashgym promote decide --project {project} --run {run_id}"
        lines.append(("next", f"{decide} points the champion alias at its model"))
    pairs(lines)


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _status(status: str) -> str:
    colour = {"completed": "green", "failed": "red", "cancelled": "red", "running": "cyan"}.get(
        status.partition(":")[0], "yellow"
    )
    return f"[{colour}]{escape(status)}[/{colour}]"


def _environment(recorded: dict[str, Any] | None) -> str:
    """What the run's own process measured, the daemon's digest of it, and who measured it."""
    if not recorded:
        return "not reported (a run from before environments were measured, or its trainer has not started)"
    by = f"measured by the {recorded.get('measured_by')} ({recorded.get('recorded_by')})"
    return f"{recorded.get('summary')}; digest {str(recorded['digest'])[:12]}, {by}"


def _context(record: dict[str, Any]) -> str:
    status = str(record.get("context_status") or "-")
    if status == "verified":
        return "verified (workspace, project, experiment, versions and source all recorded)"
    return f"{status}: not fully identified, kept apart from official runs"


def _span(record: dict[str, Any]) -> str:
    from datetime import datetime

    start, end = record.get("started_at"), record.get("ended_at")
    if not start:
        return "not started"
    if not end:
        return f"since {cell(start)}"
    began, ended = (datetime.fromisoformat(stamp.replace("Z", "+00:00")) for stamp in (start, end))
    seconds = (ended - began).total_seconds()
    return f"{cell(start)} for {duration(seconds)}"


def _with_provenance(card: dict[str, Any], key: str) -> str:
    """A card's result or comparison ids, each with its provenance (a card written before it was kept: the ids)."""
    known = card.get("evidence_provenance")
    ids = card.get(key) or []
    if known is None:
        return ", ".join(ids) or "none"
    return ", ".join(f"{i} ({known.get(i, 'unrecorded')})" for i in ids) or "none"


def _subject(result: dict[str, Any]) -> str:
    """What a result evaluated: a run, a model version, or (evaluated by the daemon, naming neither) the gold
    solutions; an imported result naming neither evaluated nothing the ledger knows."""
    named = result.get("run_id") or result.get("model_version_id")
    return str(named or ("-" if provenance_of(result) == "asserted" else "gold"))


def _result_row(result: dict[str, Any]) -> dict[str, Any]:
    metrics = result.get("metrics") or {}
    name = "pass@1" if "pass@1" in metrics else min(metrics, default="")
    return {
        "result_id": result["result_id"],
        "suite": result["suite_id"],
        "status": result["status"],
        "key metric": f"{name} {figure(metrics[name], name)}" if name else "-",
        "samples": result.get("sample_count"),
        "provenance": provenance_of(result),
    }


def _reading(low: float, high: float) -> str:
    if low > 0:
        return "the candidate is better: the whole interval is above zero"
    if high < 0:
        return "the candidate is worse: the whole interval is below zero"
    return "no difference shown: the interval includes zero"
