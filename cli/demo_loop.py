"""`bashgym demo`: the whole loop on a laptop CPU, with figures measured in the run.

A daemon on a demo home; the tiny task model; a project with its model version, the SFT traces (gold
solutions of training instances, from the families outside the suite's family holdout) and the
terminal-task suite; a campaign that evaluates the baseline, trains one SFT candidate, evaluates and
compares it and decides; then a RunCard, the promotion gate, promotion exactly when the gate ships, and
the campaign report. Nothing here decides a figure: every number comes from the ledger afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from asyncio.subprocess import Process
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bashgym.cli.demo_figures import against_seen
from bashgym.cli.lineage import model_spec_from_dir
from bashgym.client.errors import ApiError, BashGymError, Conflict, InvalidInput
from bashgym.client.http import DaemonClient, announced_by
from bashgym.client.models import DatasetFromBlob, EvalSuiteSpec, Notice, ProjectSpec
from bashgym.client.render import notice_text
from bashgym.daemon.settings import DAEMON_LOG
from bashgym.trainers.contracts.evidence import holdout_split
from bashgym.trainers.environments.terminal_tasks import FAMILIES, SuiteDefinition, default_suite, gold_sft_rows

PROJECT = "demo"
MODEL_VERSION = "tiny-task-v1"
DATASET_VERSION = "gold-traces-v1"
TRAINING_SEEDS = range(1, 6)  # suites of other seeds: new instances of the same families, never the suite's own
SAMPLES = 4  # per task: pass@1 and pass@4
TEMPERATURE = 0.7
# 1000 steps of batch 8 take the task model from copying nothing to pass@1 ~0.8 on unseen instances of its
# families in ~4 minutes on 2 cores (README, "The demo").
DEFAULT_STEPS = 1000
JUDGED = {"improved", "no_improvement", "below_min_improvement", "ci_includes_zero"}  # or a protected_regression
STOPPED = {"completed", "exhausted", "blocked", "failed", "cancelled", "awaiting_authority"}


class Reporter(Protocol):
    """Where the demo tells what happens: milestones, steps, progress."""

    def say(self, text: str) -> None: ...

    def step(self, title: str) -> None: ...

    def progress(self, label: str, done: int, total: int, unit: str) -> None: ...

    def progress_done(self) -> None: ...


@dataclass(frozen=True)
class DemoOptions:
    home: Path
    steps: int = DEFAULT_STEPS
    limit_tasks: int | None = None
    discord: bool = False
    channel: str | None = None


def recipe(steps: int) -> dict[str, Any]:
    """The candidate's SFT recipe for the task model (docs/training-methods.md)."""
    return {
        "method": "sft",
        "use_lora": False,
        "max_steps": steps,
        "batch_size": 8,
        "gradient_accumulation_steps": 1,
        "learning_rate": 5e-3,
        "warmup_ratio": 0.05,
        "gradient_checkpointing": False,
        "max_seq_length": 640,
        "save_steps": steps + 1,  # no mid-run checkpoint: the run is minutes long
        "logging_steps": max(1, min(25, steps // 4)),
        "seed": 42,
    }


@dataclass(frozen=True)
class SuiteSplit:
    """The evaluation suite seen through the demo: which families train, which are held out whole."""

    suite: SuiteDefinition
    holdout_families: list[str]

    @property
    def train_families(self) -> list[str]:
        return [f for f in FAMILIES if f not in self.holdout_families]


def suite_split() -> SuiteSplit:
    suite = default_suite()
    split = holdout_split(
        {t.task_id: t.task_family for t in suite.tasks}, fraction=suite.holdout_fraction, seed=suite.split_seed
    )
    return SuiteSplit(suite, sorted({t.task_family for t in suite.tasks if split[t.task_id] == "holdout"}))


def write_traces(path: Path, split: SuiteSplit) -> int:
    """Gold traces of training instances of the trained families; never an instance of the suite."""
    rows = gold_sft_rows(TRAINING_SEEDS, families=split.train_families, exclude=split.suite.tasks)
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return len(rows)


# -- the daemon and the bot ---------------------------------------------------------------------


@dataclass
class DemoServices:
    api: str
    token: str
    daemon: Process
    bot: Process | None


def _daemon_env(environ: dict[str, str], home: Path, discord: bool) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k not in {"BASHGYM_UDS", "BASHGYM_HOST", "BASHGYM_PORT"}}
    env |= {"BASHGYM_HOME": str(home), "BASHGYM_CONSOLE_NOTICES": "false", "PYTHONUNBUFFERED": "1"}
    if not discord:  # the demo shows the console channel; a token in the environment would start nothing here
        env.pop(environ.get("BASHGYM_DISCORD_TOKEN_ENV", "BASHGYM_DISCORD_TOKEN"), None)
    return env


@contextlib.asynccontextmanager
async def demo_services(options: DemoOptions, environ: dict[str, str]) -> AsyncIterator[DemoServices]:
    """Start the daemon on the demo home (and with --discord the bot); stop them in order afterwards."""
    home = options.home
    home.mkdir(parents=True, exist_ok=True)
    env = _daemon_env(environ, home, options.discord)
    command = [sys.executable, "-c", "from bashgym.cli.main import main; main()", "daemon", "--port", "0"]
    # The daemon logs into its home's logs/daemon.log; its stderr (warnings, errors, and a start that failed
    # before its log opened) goes to daemon.log beside it.
    with (home / "daemon.log").open("ab") as log, (home / "daemon.out").open("ab") as out:
        daemon = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=out, stderr=log, stdin=asyncio.subprocess.DEVNULL
        )
    bot: Process | None = None
    try:
        api = await _announced(home, daemon)
        token = (home / "admin.token").read_text().strip()
        if options.discord:
            with (home / "bot.log").open("ab") as bot_log:
                bot = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bashgym.bot",
                    env={**env, "BASHGYM_API": api},
                    stdout=bot_log,
                    stderr=bot_log,
                    stdin=asyncio.subprocess.DEVNULL,
                )
        yield DemoServices(api, token, daemon, bot)
    finally:
        for proc in (bot, daemon):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 20)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _announced(home: Path, daemon: Process) -> str:
    record = home / "daemon.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if daemon.returncode is not None:
            tail = _tail(home / "daemon.log")
            if daemon.returncode == 6:
                raise Conflict(
                    f"A BashGym daemon already runs on {home}: {tail}", hint="Stop it, or pass another --home."
                )
            raise BashGymError(f"The demo's daemon exited with code {daemon.returncode}: {tail}")
        api = announced_by(record, daemon.pid)  # this daemon's own record, never one a killed daemon left
        if api is not None:
            return api
        await asyncio.sleep(0.1)
    raise BashGymError(
        f"The demo's daemon did not start within 60 s; see {home / DAEMON_LOG} and {home / 'daemon.log'}."
    )


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- the run ------------------------------------------------------------------------------------


class Demo:
    def __init__(self, options: DemoOptions, client: DaemonClient, reporter: Reporter, *, channel: str = "") -> None:
        self.options = options
        self.channel = channel
        self.client = client
        self.reporter = reporter
        self.split = suite_split()
        self.base = f"/v1/projects/{PROJECT}"

    async def run(self) -> dict[str, Any]:
        began = time.monotonic()
        work = self.options.home / "demo-inputs"
        self.reporter.step("Building the tiny task model (deterministic, offline)")
        model_dir = await self._build_model(work / "tiny-task-model")
        self.reporter.step("Recording the project, model version, training traces and evaluation suite")
        rows = await self._register(model_dir, work / "gold-traces.jsonl")
        campaign_id = await self._create_campaign()
        self.reporter.step(f"Running campaign {campaign_id}: baseline, one SFT candidate, comparison, decision")
        campaign = await self._follow(campaign_id)
        if campaign["status"] != "exhausted":
            raise BashGymError(
                f"Campaign {campaign_id} stopped {campaign['status']}: {campaign['status_reason']}",
                hint=f"See {self.options.home / DAEMON_LOG} and bashgym campaign show {campaign_id} --project demo.",
            )
        baseline, candidate = campaign["iterations"]
        if candidate["reason_code"] not in JUDGED and not candidate["reason_code"].startswith("protected_regression"):
            raise BashGymError(
                f"The candidate was not judged on its merits: {candidate['reason_code']}. "
                f"The daemon's last words: {_tail(self.options.home / DAEMON_LOG)}",
                hint=f"See {self.options.home / DAEMON_LOG} and bashgym training list --project demo.",
            )
        self.reporter.step("Evidence: RunCard, promotion gate, and promotion only if the gate ships")
        evidence = await self._evidence(candidate)
        self.reporter.step("Drawing the campaign report")
        report = await self.client.request("POST", f"{self.base}/campaigns/{campaign_id}/reports", body={})
        verified = await self.client.request("GET", "/v1/ledger/verify")
        # Every result of the demo's project: with --limit-tasks they are on a partial suite of its own id.
        listing = await self.client.request("GET", f"{self.base}/evaluations")
        results = {r["result_id"]: r for r in listing["results"]}
        comparisons = {c["comparison_id"]: c for c in listing["comparisons"]}
        summary = {
            "home": str(self.options.home),
            "project": PROJECT,
            "campaign_id": campaign_id,
            "model_version_id": MODEL_VERSION,
            "training": {
                "run_id": candidate.get("run_id"),
                "method": "sft",
                "steps": self.options.steps,
                "trace_rows": rows,
                "trained_families": self.split.train_families,
                "cpu_threads": await self._training_threads(candidate.get("run_id")),
            },
            # The torch threads each evaluation's model ran on (chosen from the load at its start, or set).
            "evaluation_threads": {
                side: ((results.get(it.get("result_id") or "") or {}).get("details") or {}).get("cpu_threads")
                for side, it in (("baseline", baseline), ("candidate", candidate))
            },
            "suite": self._suite_facts(results.get(baseline["result_id"] or "")),
            "baseline": self._figures(results.get(baseline["result_id"] or "")),
            "candidate": self._figures(results.get(candidate.get("result_id") or "")),
            "comparison": _comparison(comparisons.get(candidate.get("comparison_id") or "")),
            "campaign_decision": {"decision": candidate["decision"], "reason_code": candidate["reason_code"]},
            **evidence,
            "report": {
                "report_id": report["report_id"],
                "path": str(self.options.home / "reports" / report["report_id"]),
            },
            "ledger_verified": bool(verified["ok"]),
            "seconds": round(time.monotonic() - began, 1),
        }
        # Only the default demo's figures have a range from other machines; a smaller run is one of its own.
        is_default = self.options.steps == DEFAULT_STEPS and not self.options.limit_tasks
        summary["against_other_machines"] = against_seen(summary) if is_default else None
        return summary

    # -- steps -----------------------------------------------------------------------------------

    async def _build_model(self, target: Path) -> Path:
        if (target / "config.json").is_file():
            self.reporter.say(f"  reusing {target} (the build is deterministic)")
            return target
        building = target.with_name(target.name + ".building")
        command = [sys.executable, "-m", "bashgym.trainers.tiny", "--task", "--out", str(building)]
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL
        )
        output, _ = await proc.communicate()
        if proc.returncode != 0:
            raise BashGymError(
                f"Building the tiny model failed (exit {proc.returncode}): {output.decode(errors='replace')[-500:]}",
                hint="Training needs the train extra: pip install -e '.[train]' (make setup does it).",
            )
        building.rename(target)
        self.reporter.say(f"  built {target}")
        return target

    async def _register(self, model_dir: Path, traces: Path) -> int:
        project = ProjectSpec(project_id=PROJECT, name="Demo", description="Created by bashgym demo")
        await self.client.project_create(project)
        if self.channel:
            await self.client.request("PUT", f"{self.base}/channel", body={"channel_id": self.channel})
            self.reporter.say(f"  notices of project {PROJECT} go to Discord channel {self.channel}")
        spec = await model_spec_from_dir(
            self.client,
            model_dir,
            project=PROJECT,
            workspace=None,
            model_id="tiny-task",
            version_id=MODEL_VERSION,
            parent=None,
            echo=False,
        )
        model = await self.client.model_version_register(PROJECT, spec)
        rows = await asyncio.to_thread(write_traces, traces, self.split)
        stored = await self.client.blob_upload(traces, project=PROJECT)
        data = DatasetFromBlob(
            dataset_id="gold-traces", dataset_version_id=DATASET_VERSION, sha256=stored["sha256"], filename=traces.name
        )
        dataset = await self.client.dataset_register(PROJECT, data)
        suite = EvalSuiteSpec.model_validate(self.split.suite.registration())
        await self.client.request("POST", f"{self.base}/eval-suites", body=suite.model_dump(mode="json"))
        replayed = " (already recorded)" if model.replayed and dataset.replayed else ""
        self.reporter.say(
            f"  model version {MODEL_VERSION}: {len(spec.files)} files; dataset version {DATASET_VERSION}: {rows} gold "
            f"traces of {len(self.split.train_families)} families{replayed}"
        )
        held = ", ".join(self.split.holdout_families)
        self.reporter.say(
            f"  suite {suite.suite_id}: {len(self.split.suite.tasks)} unseen task instances; families held out of "
            f"training entirely: {held}"
        )
        return rows

    async def _create_campaign(self) -> str:
        listing = await self.client.request("GET", f"{self.base}/campaigns")
        taken = {c["campaign_id"] for c in listing["campaigns"]}
        campaign_id = next(f"demo-{n}" for n in range(1, len(taken) + 2) if f"demo-{n}" not in taken)
        evaluation: dict[str, Any] = {"samples": SAMPLES, "temperature": TEMPERATURE}
        if self.options.limit_tasks:
            evaluation["limit_tasks"] = self.options.limit_tasks
        spec = {
            "campaign_id": campaign_id,
            "title": "The demo: SFT on gold traces",
            "objective": "Raise pass@1 on unseen terminal-task instances by SFT on gold traces of training instances.",
            "suite_id": self.split.suite.suite_id,
            "starting_model_version_id": MODEL_VERSION,
            "dataset_version_ids": [DATASET_VERSION],
            "base_recipe": recipe(self.options.steps),
            "budget": {"runs": 1},
            "stop_rules": {"max_iterations": 1, "min_improvement": 0.05},
            "evaluation": evaluation,
        }
        where = f"{self.base}/campaigns/{campaign_id}"
        created = await self.client.request("POST", f"{self.base}/campaigns", body=spec)
        change = {
            "primary_variable": "dataset_version_id",
            "value": DATASET_VERSION,
            "rationale": "learn the task families from the gold solutions of their training instances",
        }
        await self.client.request("POST", f"{where}/propose", body=change)
        body = {"expected_version": created["record"]["version"]}  # a proposal leaves the version as it is
        checked = await self.client.request("POST", f"{where}/validate", body=body)
        if not checked["ok"]:
            raise BashGymError(f"Campaign {campaign_id} did not validate: {checked['findings']}")
        await self.client.request("POST", f"{where}/start", body={"expected_version": checked["campaign"]["version"]})
        return campaign_id

    async def _follow(self, campaign_id: str) -> dict[str, Any]:
        where = f"{self.base}/campaigns/{campaign_id}"
        shown: tuple[str, str] | None = None
        seen: dict[str, float] = {}  # what was said once: the threads the run trains on
        while True:
            campaign = dict(await self.client.request("GET", where))
            campaign["iterations"] = (await self.client.request("GET", f"{where}/iterations"))["iterations"]
            if campaign["status"] in STOPPED:
                self.reporter.progress_done()
                return campaign
            current = next((i for i in campaign["iterations"] if i["stage"] != "decided"), None)
            if current is not None:
                key = (current["iteration_id"], current["stage"])
                if key != shown:
                    self.reporter.progress_done()
                    shown = key
                await self._show_progress(current, seen)
            await asyncio.sleep(0.5)

    async def _show_progress(self, iteration: dict[str, Any], seen: dict[str, float]) -> None:
        who = "baseline" if iteration["kind"] == "baseline" else "candidate"
        if iteration["stage"] == "training" and iteration.get("run_id"):
            run = await self.client.request("GET", f"{self.base}/runs/{iteration['run_id']}")
            summary = run.get("metric_summary") or {}
            threads = (summary.get("system.cpu_threads") or {}).get("latest")
            if threads and "threads" not in seen:
                seen["threads"] = threads
                cores = os.cpu_count() or 1
                self.reporter.say(f"  the {who} trains on {int(threads)} torch thread(s) of {cores} cores")
            # The trainer announces every step (`live`); the ledger's metrics come every logging_steps.
            step = (run.get("live") or {}).get("step") or (summary.get("train.loss") or {}).get("last_step") or 0
            total = int((run.get("config") or {}).get("max_steps") or self.options.steps)
            self.reporter.progress(f"training the {who} ({run['status']})", int(step), total, "steps")
        elif iteration["stage"] == "evaluating":
            jobs = (await self.client.request("GET", f"{self.base}/evaluation-jobs"))["jobs"]
            subject = iteration.get("run_id") if who == "candidate" else MODEL_VERSION
            mine = [j for j in jobs if subject in (j["run_id"], j["model_version_id"]) and j["status"] == "running"]
            if mine and mine[-1]["total"]:
                self.reporter.progress(f"evaluating the {who}", mine[-1]["done"], mine[-1]["total"], "tasks")

    async def _evidence(self, candidate: dict[str, Any]) -> dict[str, Any]:
        run_id = candidate.get("run_id")
        if not run_id:
            return {
                "runcard_id": None,
                "gate": {"ship": False, "blockers": ["no_run"]},
                "promoted": None,
                "promotion_blockers": ["no_run"],
            }
        limitations = [
            "A 558k-parameter model on a synthetic suite of 11 shell-task families: a narrow claim about these tasks.",
            "Evaluated with 4 samples per task at temperature 0.7 on one seed of the suite.",
            f"Families {', '.join(self.split.holdout_families)} were never trained on; reported apart.",
        ]
        # No claim tier: the daemon gives the one the evidence supports (a short run or a partial suite: local_smoke).
        body = {"decision": "pending", "known_limitations": limitations}
        card = await self.client.request("POST", f"{self.base}/runs/{run_id}/runcards", body=body)
        gate = await self.client.request("GET", f"{self.base}/runs/{run_id}/gate", params={"asked_by": "demo"})
        promoted, blockers = None, [b["code"] for b in gate["blockers"]]
        if gate["ship"]:
            # The alias moves only to a model compared with its current holder and better: a demo run again in the
            # same home meets the champion the first one made, which its candidate (the same figures) does not beat.
            try:
                moved = await self.client.request(
                    "POST", f"{self.base}/runs/{run_id}/promote", body={"alias": "champion"}
                )
                promoted = {"alias": "champion", "model_version_id": moved["alias"]["model_version_id"]}
            except ApiError as exc:
                if exc.status != 422:
                    raise
                blockers = [b["code"] for b in (exc.details or {}).get("blockers") or []] or [exc.code]
        if promoted is None:  # recorded too, so the channel sees the gate's verdict either way
            hold = {
                "decision_type": "promotion",
                "outcome": "hold",
                "rationale": f"the promotion gate blocked run {run_id} for alias champion: {', '.join(blockers)}",
                "run_id": run_id,
                "evidence_refs": [card["record"]["card_id"], *filter(None, [candidate.get("comparison_id")])],
            }
            await self.client.request("POST", f"{self.base}/decisions", body=hold)
        return {
            "runcard_id": card["record"]["card_id"],
            "gate": {"ship": bool(gate["ship"]), "blockers": [b["code"] for b in gate["blockers"]]},
            "promoted": promoted,
            # what kept the alias where it was, when the gate shipped the run (its current holder), or the gate's
            "promotion_blockers": [] if promoted else blockers,
        }

    async def _training_threads(self, run_id: str | None) -> int | None:
        """The torch CPU threads the candidate trained on, as its trainer recorded them (system.cpu_threads)."""
        if not run_id:
            return None
        run = await self.client.request("GET", f"{self.base}/runs/{run_id}")
        threads = ((run.get("metric_summary") or {}).get("system.cpu_threads") or {}).get("latest")
        return None if threads is None else int(threads)

    def _suite_facts(self, result: dict[str, Any] | None) -> dict[str, Any]:
        """What was evaluated, from the baseline's recorded per-task scores (a --limit-tasks run takes a few
        tasks of every family)."""
        families = [t["family"] for t in ((result or {}).get("details") or {}).get("per_task", {}).values()]
        held = sum(f in self.split.holdout_families for f in families)
        return {
            "suite_id": self.split.suite.suite_id,
            "tasks": len(families),
            "held_out_instances": len(families) - held,
            "family_holdout_tasks": held,
            "holdout_families": self.split.holdout_families,
            "samples": SAMPLES,
            "temperature": TEMPERATURE,
        }

    def _figures(self, result: dict[str, Any] | None) -> dict[str, Any] | None:
        """All tasks, unseen instances of trained families, and the held-out families, from the recorded result:
        pass@k is a mean over tasks, so the trained families' share follows from the whole and the holdout's."""
        if result is None:
            return None
        metrics = result["metrics"]
        families = [t["family"] for t in (result.get("details") or {}).get("per_task", {}).values()]
        total, held = len(families), sum(f in self.split.holdout_families for f in families)
        figures: dict[str, Any] = {"result_id": result["result_id"], "held_out_instances": {}, "family_holdout": {}}
        for k in ("pass@1", f"pass@{SAMPLES}"):
            overall = metrics.get(k)
            holdout = metrics.get(f"holdout.{k}") if held else None
            figures[k] = overall
            figures["held_out_instances"][k] = overall if not held else _rest(overall, holdout, total, held)
            figures["family_holdout"][k] = holdout
        return figures


def _comparison(c: dict[str, Any] | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "comparison_id": c["comparison_id"],
        "metric": c["primary_metric"],
        "delta": c["delta"],
        "ci_low": c["ci_low"],
        "ci_high": c["ci_high"],
        "paired_tasks": (c.get("details") or {}).get("paired_tasks"),
    }


def _rest(overall: float | None, part: float | None, total: int, part_count: int) -> float | None:
    """The mean over the tasks outside `part`, from the mean over all and the mean over part (both per task)."""
    if overall is None or part is None or total == part_count:
        return None
    return (overall * total - part * part_count) / (total - part_count)


class NoticeFollower:
    """Prints the demo project's notices as the console channel renders them, from a cursor on."""

    def __init__(self, client: DaemonClient, after: int, show: Callable[[str], None]) -> None:
        self.client = client
        self.cursor = after
        self.show = show

    async def follow(self) -> None:
        """Long-poll until cancelled."""
        while True:
            try:
                await self._page(wait_s=2)
            except BashGymError:
                await asyncio.sleep(1)

    async def drain(self) -> None:
        """Print what is left up to the head."""
        while await self._page(wait_s=0):
            pass

    async def _page(self, *, wait_s: float) -> bool:
        params = {"after_cursor": self.cursor, "limit": 100, "wait_s": wait_s}
        page = await self.client.request("GET", "/v1/notices", params=params, timeout_s=30)
        for raw in page["notices"]:
            notice = Notice.model_validate(raw)
            if notice.project_id == PROJECT:
                self.show(notice_text(notice))
            self.cursor = notice.cursor  # moved per notice: a cancelled page is not printed twice by drain()
        moved = page["next_cursor"] != self.cursor or bool(page["notices"])
        self.cursor = page["next_cursor"]
        return moved


def check_options(options: DemoOptions, environ: dict[str, str]) -> None:
    if options.steps < 1:
        raise InvalidInput(f"--steps is {options.steps}; train at least 1 step.")
    if options.limit_tasks is not None and options.limit_tasks < 2:
        raise InvalidInput(
            f"--limit-tasks is {options.limit_tasks}; a comparison needs two task families (tasks are taken "
            "round-robin across families, so 2 tasks cover 2)."
        )
    if options.discord:
        token_env = environ.get("BASHGYM_DISCORD_TOKEN_ENV", "BASHGYM_DISCORD_TOKEN")
        missing = [
            name
            for name in (token_env, "BASHGYM_DISCORD_APPLICATION_ID", "BASHGYM_DISCORD_GUILD_IDS")
            if not environ.get(name)
        ]
        if not (options.channel or environ.get("BASHGYM_DISCORD_DEFAULT_CHANNEL")):
            missing.append("BASHGYM_DISCORD_DEFAULT_CHANNEL (or --channel)")
        if missing:
            raise InvalidInput(
                f"--discord needs {', '.join(missing)}.", hint="See docs/discord.md, 'Connecting Discord', steps 1-5."
            )


def channel_of(options: DemoOptions, environ: dict[str, str]) -> str:
    """The Discord channel the demo project's notices go to (--discord only)."""
    return (options.channel or environ.get("BASHGYM_DISCORD_DEFAULT_CHANNEL", "")) if options.discord else ""
