"""Ledger properties under random operations: replay, project isolation, the run and campaign state machines.

Every example opens its own ledger file in a temporary directory, so examples share nothing. The
ledger is async; each example runs its scenario with asyncio.run, and each state machine owns one
asyncio.Runner for its whole life.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import sqlite3
import tempfile
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from bashgym.client.errors import BashGymError, Conflict, InvalidTransition, NotFound
from bashgym.client.redaction import contains_secret
from bashgym.client.specs import (
    Actor,
    AliasMove,
    AnnotationSpec,
    ArtifactSpec,
    BudgetEntrySpec,
    ComparisonSpec,
    DatasetVersionSpec,
    DecisionSpec,
    EnvironmentSpec,
    EvalResultSpec,
    EvalSuiteSpec,
    ExperimentSpec,
    MetricBatch,
    MetricPoint,
    ModelVersionSpec,
    ProjectSpec,
    ReportSpec,
    RunRegistration,
    RunTransition,
    WriteResult,
)
from bashgym.client.states import TERMINAL, TRANSITIONS
from bashgym.ledger.campaign_specs import CAMPAIGN_STATES, CampaignSpec
from bashgym.ledger.campaigns import TERMINAL as CAMPAIGN_TERMINAL
from bashgym.ledger.campaigns import TRANSITIONS as CAMPAIGN_TRANSITIONS
from bashgym.ledger.store import Ledger
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.support.factories import digest, suite, tracking_context

# A passing run takes seconds. A failing one replays hundreds of examples while shrinking (hypothesis
# stops shrinking after five minutes), which the suite's 120 s would cut off before the counterexample.
pytestmark = pytest.mark.timeout(600)
WS = "default"
ACTOR = Actor(actor_id="alice", correlation_id="cor-properties")
RUN_STATES = tuple(TRANSITIONS)
OWNED = frozenset(RUN_STATES) - TERMINAL  # what a restarted daemon resolves, queued runs included
METRICS = ("train.loss", "eval.loss")
T = TypeVar("T")

# database=None: no .hypothesis/ directory in the working tree. A failure prints its example and a
# reproduce blob instead. Examples are small, so a few dozen of each cover the interesting orders.
FAST = settings(
    max_examples=30,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MACHINE = settings(FAST, max_examples=20, stateful_step_count=20)


async def open_ledger(path: Path) -> Ledger:
    return await Ledger.open(path, synchronous="NORMAL")


@functools.cache
def migrated_empty_ledger() -> bytes:
    """The bytes of a new ledger file with every migration applied, made once per session."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite3"
        asyncio.run(_create(path))
        return path.read_bytes()


async def _create(path: Path) -> None:
    ledger = await open_ledger(path)
    await ledger.close()


def new_ledger_file(directory: Path) -> Path:
    """A fresh ledger file for one example. Copying a migrated file costs a third of migrating a new one,
    and shrinking a failure replays hundreds of examples."""
    path = directory / "ledger.sqlite3"
    path.write_bytes(migrated_empty_ledger())
    return path


def run_with_fresh_ledger_file(scenario: Callable[[Path], Coroutine[Any, Any, None]]) -> None:
    """Run one example against a new ledger file in its own directory."""
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(new_ledger_file(Path(tmp))))


def snapshot(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (sqlite_stat* aside: closing the ledger runs PRAGMA optimize)."""
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
    return {table: sorted((tuple(row) for row in conn.execute(f"SELECT * FROM {table}")), key=repr) for table in tables}


def reachable_from(start: str, table: dict[str, frozenset[str]]) -> set[str]:
    seen, frontier = {start}, [start]
    while frontier:
        for target in table[frontier.pop()] - seen:
            seen.add(target)
            frontier.append(target)
    return seen


def is_path(history: list[str], table: dict[str, frozenset[str]]) -> bool:
    return all(b in table[a] for a, b in itertools.pairwise(history))


def one_of_mostly_live(histories: dict[str, list[str]], terminal: frozenset[str]) -> st.SearchStrategy[str]:
    """Usually an entity still moving: once terminal, all an entity can show is refusals."""
    moving = [key for key, history in histories.items() if history[-1] not in terminal]
    everyone = st.sampled_from(sorted(histories))
    return st.one_of(st.sampled_from(moving), st.sampled_from(moving), everyone) if moving else everyone


def target_from(current: str, table: dict[str, frozenset[str]], states: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Half the time a legal move, else any state: uniform draws seldom get past the first moves."""
    legal = sorted(table[current])
    return st.one_of(st.sampled_from(legal), st.sampled_from(states)) if legal else st.sampled_from(states)


# -- a world of specs, each a pure function of (project, index) -------------------------------------


@dataclass(frozen=True)
class World:
    """The spec of every key, derived from (project, index): resending a key always sends the same identity.

    Lineage ids (x0, x1, ...) are shared by every project on purpose; run ids carry their project (see
    the xfail on run ids below).
    """

    note: str = ""
    scale: float = 1.0

    def project(self, p: str) -> ProjectSpec:
        return ProjectSpec(project_id=p, name=f"Project {p}")

    def experiment(self, p: str, n: int) -> ExperimentSpec:
        return ExperimentSpec(
            experiment_id=f"x{n}", name=f"{p}/x{n}{self.note}", objective=f"goal{self.note}", task_type="terminal-agent"
        )

    def model(self, p: str, n: int) -> ModelVersionSpec:
        return ModelVersionSpec(
            model_version_id=f"x{n}",
            model_id="tiny",
            source_uri=f"bashgym://models/{p}/x{n}",
            config_digest=digest(f"model {p} {n}"),
        )

    def dataset(self, p: str, n: int) -> DatasetVersionSpec:
        return DatasetVersionSpec(
            dataset_version_id=f"x{n}",
            dataset_id="traces",
            source_uri=f"bashgym://datasets/{p}/x{n}",
            content_digest=digest(f"rows {p} {n}"),
        )

    def environment(self, p: str, n: int) -> EnvironmentSpec:
        return EnvironmentSpec(environment_id=f"x{n}", compute_target="local", runtime_digest=digest(f"env {p} {n}"))

    def suite(self, p: str, n: int) -> EvalSuiteSpec:
        return EvalSuiteSpec.model_validate(suite(f"x{n}", code_digest=digest(f"suite {p} {n}")))

    @staticmethod
    def lineage(n: int) -> dict[str, int]:
        """Which experiment, model, dataset and environment run n's tracking context names."""
        return {"experiment": n % 2, "model": n % 2, "dataset": n % 3, "environment": 0}

    def context(self, p: str, n: int) -> dict[str, Any]:
        pick = self.lineage(n)
        experiment, model = self.experiment(p, pick["experiment"]), self.model(p, pick["model"])
        dataset, environment = self.dataset(p, pick["dataset"]), self.environment(p, pick["environment"])
        return tracking_context(
            workspace_id=WS,
            project_id=p,
            project_display_name=self.project(p).name,
            experiment_id=experiment.experiment_id,
            experiment_name=experiment.name,
            objective=experiment.objective,
            task_type=experiment.task_type,
            model_id=model.model_id,
            model_version_id=model.model_version_id,
            model_source_uri=model.source_uri,
            model_config_digest=model.config_digest,
            dataset_id=dataset.dataset_id,
            dataset_version_id=dataset.dataset_version_id,
            dataset_source_uri=dataset.source_uri,
            dataset_content_digest=dataset.content_digest,
            environment_id=environment.environment_id,
            environment_runtime_digest=environment.runtime_digest,
        )

    def run(self, p: str, n: int) -> RunRegistration:
        """Runs 0 and 1 name their id, run 2 only its source identity, run 3 has no context (unassigned)."""
        config = {"learning_rate": 1e-4 * (n + 1), "label": self.note}
        if n == 3:
            return RunRegistration(run_id=f"{p}.run{n}", method="sft", config=config)
        if n == 2:
            return RunRegistration(
                source_system="mlflow",
                source_run_id=f"{p}.src{n}",
                method="dpo",
                tracking_context=self.context(p, n),
                config=config,
            )
        return RunRegistration(run_id=f"{p}.run{n}", method="sft", tracking_context=self.context(p, n), config=config)

    @staticmethod
    def run_home(p: str, n: int) -> str:
        return "unassigned" if n == 3 else p

    def value(self, metric: str, step: int) -> float:
        return self.scale / (step + 1) + (0.5 if metric == "eval.loss" else 0.0)

    def campaign(self, p: str, n: int) -> CampaignSpec:
        return CampaignSpec(
            campaign_id=f"c{n}",
            title=f"{p} campaign {n}",
            objective=f"improve{self.note}",
            suite_id="x0",
            starting_model_version_id="x0",
            dataset_version_ids=["x0"],
        )


# -- operations and the writes they plan ------------------------------------------------------------

Ids = dict[tuple[Any, ...], str]  # a planned key -> the id the ledger answered (generated and content ids)
Send = Callable[[Ledger, Ids], Awaitable[WriteResult]]


@dataclass(frozen=True)
class Op:
    kind: str
    project: str
    n: int
    extra: Any = None


@dataclass(frozen=True)
class Write:
    """One planned write. mode put: keyed, resending it replays. move: only an immediate retry replays,
    since a later move makes it stale (a transition, an alias move). note: keyless (an annotation)."""

    label: str
    home: str  # the project its events land in
    send: Send
    mode: str = "put"


@dataclass
class Planner:
    """Turns drawn operations into writes, planning first what each one needs (its project, run, suite)."""

    world: World
    writes: list[Write] = field(default_factory=list)
    done: set[tuple[Any, ...]] = field(default_factory=set)
    status: dict[tuple[str, int], str] = field(default_factory=dict)
    owned: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))

    def plan(self, ops: list[Op]) -> list[Write]:
        for op in ops:
            getattr(self, op.kind)(op.project, op.n, op.extra)
        return self.writes

    def _emit(self, key: tuple[Any, ...], write: Write, owns: tuple[str, str] | None = None) -> None:
        self.done.add(key)
        self.writes.append(write)
        if owns is not None:
            self.owned[(write.home, owns[0])].add(owns[1])

    def _need(self, kind: str, p: str, n: int = 0) -> None:
        if (kind, p, n) not in self.done:
            getattr(self, kind)(p, n, None)

    def project(self, p: str, n: int, extra: Any) -> None:
        spec = self.world.project(p)
        self._emit(("project", p, 0), Write(f"project {p}", p, lambda lg, ids: lg.create_project(ACTOR, WS, spec)))

    def experiment(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = self.world.experiment(p, n)
        write = Write(f"experiment {p}/{n}", p, lambda lg, ids: lg.create_experiment(ACTOR, WS, p, spec))
        self._emit(("experiment", p, n), write, ("experiment", spec.experiment_id))

    def model(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = self.world.model(p, n)
        write = Write(f"model {p}/{n}", p, lambda lg, ids: lg.register_model_version(ACTOR, WS, p, spec))
        self._emit(("model", p, n), write, ("model_version", spec.model_version_id))

    def dataset(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = self.world.dataset(p, n)
        write = Write(f"dataset {p}/{n}", p, lambda lg, ids: lg.register_dataset_version(ACTOR, WS, p, spec))
        self._emit(("dataset", p, n), write, ("dataset_version", spec.dataset_version_id))

    def environment(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = self.world.environment(p, n)
        write = Write(f"environment {p}/{n}", p, lambda lg, ids: lg.register_environment(ACTOR, WS, p, spec))
        self._emit(("environment", p, n), write, ("environment", spec.environment_id))

    def suite(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = self.world.suite(p, n)
        write = Write(f"suite {p}/{n}", p, lambda lg, ids: lg.register_eval_suite(ACTOR, WS, p, spec))
        self._emit(("suite", p, n), write, ("eval_suite", spec.suite_id))

    def run(self, p: str, n: int, extra: Any) -> None:
        spec, home, key = self.world.run(p, n), self.world.run_home(p, n), ("run", p, n)

        async def send(lg: Ledger, ids: Ids) -> WriteResult:
            result = await lg.register_run(ACTOR, WS, spec)
            ids[key] = str(result.record["run_id"])
            return result

        self._emit(key, Write(f"run {p}/{n}", home, send), ("run", spec.run_id) if spec.run_id else None)
        self.status.setdefault((p, n), "queued")
        if spec.tracking_context is not None:
            self._note_context_lineage(p, n)

    def _note_context_lineage(self, p: str, n: int) -> None:
        """A complete context registers its project and lineage: later writes need not plan them."""
        self.done.add(("project", p, 0))
        kinds = {"experiment": "experiment", "model": "model_version", "dataset": "dataset_version"}
        for kind, index in self.world.lineage(n).items():
            self.done.add((kind, p, index))
            self.owned[(p, kinds.get(kind, kind))].add(f"x{index}")

    def metrics(self, p: str, n: int, steps: list[int]) -> None:
        self._need("run", p, n)
        home = self.world.run_home(p, n)

        async def send(lg: Ledger, ids: Ids) -> WriteResult:
            run_id = ids[("run", p, n)]
            points = [MetricPoint(metric=m, step=s, value=self.world.value(m, s)) for s in steps for m in METRICS]
            return await lg.ingest_metrics(
                ACTOR, WS, home, MetricBatch(run_id=run_id, attempt_id=f"{run_id}.a1", points=points)
            )

        self.writes.append(Write(f"metrics {p}/{n} {steps}", home, send))

    def transition(self, p: str, n: int, target: str) -> None:
        self._need("run", p, n)
        current = self.status[(p, n)]
        if target != current and target not in TRANSITIONS[current]:
            return  # refusals are the run state machine's property, below
        self.status[(p, n)] = target
        home = self.world.run_home(p, n)

        def send(lg: Ledger, ids: Ids) -> Awaitable[WriteResult]:
            return lg.transition_run(ACTOR, WS, home, ids[("run", p, n)], RunTransition(status=target))

        self.writes.append(Write(f"run {p}/{n} -> {target}", home, send, mode="move"))

    def eval_result(self, p: str, n: int, extra: tuple[int | None, bool]) -> None:
        run_n, named = extra
        self._need("suite", p, n)
        if run_n is not None:
            self._need("run", p, run_n)
        key = ("eval_result", p, n, run_n, named)
        result_id = f"res{n}.{run_n}" if named else None  # else derived from the content

        async def send(lg: Ledger, ids: Ids) -> WriteResult:
            spec = EvalResultSpec(
                result_id=result_id,
                suite_id=f"x{n}",
                run_id=None if run_n is None else ids[("run", p, run_n)],
                metrics={"pass_at_1": 0.1 * (n + 1) + 0.01 * (run_n or 0)},
                sample_count=8,
                details={"label": self.world.note},
            )
            result = await lg.record_eval_result(ACTOR, WS, p, spec)
            ids[key] = str(result.record["result_id"])
            return result

        self._emit(key, Write(f"result {key}", p, send), ("eval_result", result_id) if result_id else None)

    def comparison(self, p: str, n: int, extra: Any) -> None:
        baseline, candidate = ("eval_result", p, n, None, False), ("eval_result", p, n, None, True)
        for key in (baseline, candidate):
            if key not in self.done:
                self.eval_result(p, n, (None, key[-1]))

        def send(lg: Ledger, ids: Ids) -> Awaitable[WriteResult]:
            spec = ComparisonSpec(
                baseline_result_id=ids[baseline],
                candidate_result_id=ids[candidate],
                primary_metric="pass_at_1",
                delta=0.0,
                details={"label": self.world.note},
            )
            return lg.record_comparison(ACTOR, WS, p, spec)

        self.writes.append(Write(f"comparison {p}/{n}", p, send))

    def decision(self, p: str, n: int, extra: Any) -> None:
        """Decision 0 has a content id and no run; decisions 1 and 2 name their id and run 0 or 1."""
        run_n = None if n == 0 else n - 1
        self._need("project", p)
        if run_n is not None:
            self._need("run", p, run_n)
        decision_id = f"dec{n}" if n else None

        def send(lg: Ledger, ids: Ids) -> Awaitable[WriteResult]:
            spec = DecisionSpec(
                decision_id=decision_id,
                decision_type="promotion",
                outcome="hold",
                rationale=f"{p} waits{self.world.note}",
                run_id=None if run_n is None else ids[("run", p, run_n)],
            )
            return lg.record_decision(ACTOR, WS, p, spec)

        self._emit(("decision", p, n), Write(f"decision {p}/{n}", p, send), ("decision", decision_id) if n else None)

    def budget(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = BudgetEntrySpec(entry_id=f"b{n}", kind=("limit", "reserve", "settle")[n], gpu_hours=n + 1.5, runs=n)
        self.writes.append(Write(f"budget {p}/{n}", p, lambda lg, ids: lg.add_budget_entry(ACTOR, WS, p, spec)))

    def report(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = ReportSpec(
            report_id=f"{p}.rep{n}", kind="campaign", title=f"{p} week {n}", manifest={"label": self.world.note}
        )
        write = Write(f"report {p}/{n}", p, lambda lg, ids: lg.record_report(ACTOR, WS, p, spec))
        self._emit(("report", p, n), write, ("report", spec.report_id))

    def artifact(self, p: str, n: int, extra: Any) -> None:
        """Artifact 0 has a content id; artifacts 1 and 2 name theirs."""
        run_n = n % 2
        self._need("run", p, run_n)
        artifact_id = f"art{n}" if n else None

        def send(lg: Ledger, ids: Ids) -> Awaitable[WriteResult]:
            spec = ArtifactSpec(
                artifact_id=artifact_id,
                run_id=ids[("run", p, run_n)],
                kind="adapter",
                uri=f"file:///{p}/adapter{n}",
                sha256=digest(f"adapter {p} {n}"),
                size_bytes=n,
            )
            return lg.register_artifact(ACTOR, WS, p, spec)

        self._emit(("artifact", p, n), Write(f"artifact {p}/{n}", p, send), ("artifact", artifact_id) if n else None)

    def annotation(self, p: str, n: int, extra: Any) -> None:
        run_n = None if n == 2 else n
        self._need("project", p)
        if run_n is not None:
            self._need("run", p, run_n)

        def send(lg: Ledger, ids: Ids) -> Awaitable[WriteResult]:
            run_id = None if run_n is None else ids[("run", p, run_n)]
            return lg.add_annotation(ACTOR, WS, p, AnnotationSpec(text=f"note {n}{self.world.note}", run_id=run_id))

        self.writes.append(Write(f"annotation {p}/{n}", p, send, mode="note"))

    def alias(self, p: str, n: int, extra: Any) -> None:
        self._need("model", p, n)
        move = AliasMove(alias="champion", model_version_id=f"x{n}")
        self.writes.append(Write(f"alias {p} -> x{n}", p, lambda lg, ids: lg.move_alias(ACTOR, WS, p, move), "move"))

    def campaign(self, p: str, n: int, extra: Any) -> None:
        self._need("project", p)
        spec = self.world.campaign(p, n)
        write = Write(f"campaign {p}/{n}", p, lambda lg, ids: lg.create_campaign(ACTOR, WS, p, spec))
        self._emit(("campaign", p, n), write, ("campaign", spec.campaign_id))


def op(
    kind: str, projects: tuple[str, ...], n: st.SearchStrategy[int], extra: st.SearchStrategy[Any] = st.none()
) -> st.SearchStrategy[Op]:
    return st.builds(Op, st.just(kind), st.sampled_from(projects), n, extra)


def any_write(projects: tuple[str, ...]) -> st.SearchStrategy[Op]:
    """Every kind of write, with content ids, source identities and unassigned runs among them."""
    three, four = st.integers(0, 2), st.integers(0, 3)
    return st.one_of(
        *(op(kind, projects, three) for kind in ("experiment", "model", "dataset", "environment", "suite")),
        op("run", projects, four),
        op("metrics", projects, four, st.lists(st.integers(0, 40), min_size=1, max_size=6)),
        op("transition", projects, four, st.sampled_from(RUN_STATES)),
        op("eval_result", projects, three, st.tuples(st.none() | st.integers(0, 1), st.booleans())),
        *(op(kind, projects, three) for kind in ("comparison", "decision", "budget", "report", "artifact")),
        *(op(kind, projects, three) for kind in ("annotation", "alias", "campaign")),
    )


def named_write(projects: tuple[str, ...]) -> st.SearchStrategy[Op]:
    """Writes whose ids are all known in advance, so the planner knows which project owns each id."""
    three, named_runs = st.integers(0, 2), st.integers(0, 1)
    return st.one_of(
        *(op(kind, projects, three) for kind in ("experiment", "model", "dataset", "environment", "suite")),
        op("run", projects, named_runs),
        op("metrics", projects, named_runs, st.lists(st.integers(0, 40), min_size=1, max_size=4)),
        op("transition", projects, named_runs, st.sampled_from(RUN_STATES)),
        op("eval_result", projects, three, st.tuples(st.none() | named_runs, st.just(True))),
        *(op(kind, projects, st.integers(1, 2)) for kind in ("decision", "artifact")),
        *(op(kind, projects, three) for kind in ("budget", "report", "annotation", "alias", "campaign")),
    )


# Free text for names and notes. Credential-shaped text is redacted on the way in, which has its own
# (xfail) property below, so it is kept out of this one.
LABELS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).filter(
    lambda text: not contains_secret(text)
)


async def send_and_count(ledger: Ledger, write: Write, ids: Ids, events: Counter[str]) -> WriteResult:
    before = ledger.last_cursor
    result = await write.send(ledger, ids)
    events[write.home] += ledger.last_cursor - before
    return result


# -- 1. replay ---------------------------------------------------------------------------------------


@FAST
@given(
    ops=st.lists(any_write(("p0", "p1")), min_size=1, max_size=25),
    note=LABELS,
    scale=st.floats(-1e6, 1e6, allow_nan=False),
    reopen=st.booleans(),
)
def test_replaying_a_sequence_of_writes_changes_nothing(ops: list[Op], note: str, scale: float, reopen: bool) -> None:
    """Every write retried at once replays; then the keyed writes, resent in order (after a restart or
    not), all replay and leave every row, every event and the hash chain exactly as they were."""
    writes = Planner(World(note=note, scale=scale)).plan(ops)

    async def scenario(path: Path) -> None:
        ids: Ids = {}
        ledger = await open_ledger(path)
        try:
            for write in writes:
                await write.send(ledger, ids)
                if write.mode == "note":
                    continue  # keyless: a client's retry is deduplicated by its Idempotency-Key, at the API
                cursor = ledger.last_cursor
                assert (await write.send(ledger, ids)).replayed, f"retrying {write.label} did not replay"
                assert ledger.last_cursor == cursor, f"retrying {write.label} appended an event"
            if reopen:
                await ledger.close()
                ledger = await open_ledger(path)
            before, cursor = await ledger.read(snapshot), ledger.last_cursor
            for write in (w for w in writes if w.mode == "put"):
                assert (await write.send(ledger, ids)).replayed, f"resending {write.label} did not replay"
            assert ledger.last_cursor == cursor
            assert await ledger.read(snapshot) == before
            assert await ledger.verify() == {"ok": True, "checked": cursor, "first_broken_cursor": None, "reason": ""}
        finally:
            await ledger.close()

    run_with_fresh_ledger_file(scenario)


# Credential-shaped strings the redactor recognises (Hugging Face, OpenAI-style, GitHub), kept to a small
# space so that shrinking a failure takes a moment.
CREDENTIALS = st.builds(
    lambda prefix, body, times: prefix + body * times,
    st.sampled_from(["hf_", "sk-", "ghp_"]),
    st.sampled_from(["A1b2C3d4", "zzzz9999"]),
    st.integers(4, 6),
)


# A context's stated facts are compared with the stored, redacted values in their redacted form: before that,
# a credential-shaped string in them turned the replay after a restart into an IdentityConflict.
@settings(FAST, max_examples=10)
@given(secret=CREDENTIALS, field_name=st.sampled_from(["project_display_name", "model_source_uri"]))
def test_a_run_registration_replays_after_a_restart_whatever_text_its_context_holds(
    secret: str, field_name: str
) -> None:
    text = {"project_display_name": f"Nightly {secret}", "model_source_uri": f"https://u:{secret}@example.com/m"}
    spec = RunRegistration(
        run_id="r1", method="sft", tracking_context=tracking_context(**{field_name: text[field_name]})
    )

    async def scenario(path: Path) -> None:
        async with await open_ledger(path) as ledger:
            assert not (await ledger.register_run(ACTOR, WS, spec)).replayed
        async with await open_ledger(path) as ledger:
            assert (await ledger.register_run(ACTOR, WS, spec)).replayed

    run_with_fresh_ledger_file(scenario)


# -- 2. project isolation ----------------------------------------------------------------------------

NAMES = ("alpha", "beta", "gamma")
MISSING = "nowhere.0"
# Kind of owned id -> the table get_project counts it in.
COUNTED = {
    "experiment": "experiments",
    "model_version": "model_versions",
    "dataset_version": "dataset_versions",
    "environment": "environments",
    "run": "runs",
    "eval_suite": "eval_suites",
    "eval_result": "eval_results",
    "artifact": "artifacts",
    "decision": "decisions",
    "report": "reports",
}
ENTITY_KINDS = ("eval_result", "decision", "report", "model_version", "dataset_version")
Probe = Callable[[Ledger, str, str], Awaitable[Any]]
# Reads and writes through project p that name one id of a kind; the id belongs to another project or to none.
PROBES: dict[str, list[Probe]] = {
    "run": [
        lambda lg, p, i: lg.get_run(WS, p, i),
        lambda lg, p, i: lg.trend(WS, p, "train.loss", i),
        lambda lg, p, i: lg.transition_run(ACTOR, WS, p, i, RunTransition(status="cancelled")),
        lambda lg, p, i: lg.ingest_metrics(
            ACTOR, WS, p, MetricBatch(run_id=i, attempt_id=f"{i}.a1", points=[MetricPoint(metric="m", step=0, value=1)])
        ),
        lambda lg, p, i: lg.add_annotation(ACTOR, WS, p, AnnotationSpec(text="look", run_id=i)),
        lambda lg, p, i: lg.record_decision(
            ACTOR, WS, p, DecisionSpec(decision_type="promotion", outcome="hold", rationale="r", run_id=i)
        ),
    ],
    "model_version": [
        lambda lg, p, i: lg.get_model_version(WS, p, i),
        lambda lg, p, i: lg.move_alias(ACTOR, WS, p, AliasMove(alias="champion", model_version_id=i)),
    ],
    "dataset_version": [lambda lg, p, i: lg.get_dataset_version(WS, p, i)],
    "report": [lambda lg, p, i: lg.get_report(WS, p, i)],
    "campaign": [
        lambda lg, p, i: lg.get_campaign(WS, p, i),
        lambda lg, p, i: lg.transition_campaign(ACTOR, WS, p, i, "ready", expected_version=1, reason="r"),
    ],
    "eval_result": [
        lambda lg, p, i: lg.record_comparison(
            ACTOR, WS, p, ComparisonSpec(baseline_result_id=i, candidate_result_id=i, primary_metric="pass_at_1")
        ),
    ],
}


def shape(error: BashGymError, entity_id: str) -> tuple[Any, ...]:
    """What a caller can observe of a refusal, with the id it named blanked out."""

    def blank(text: str) -> str:
        return text.replace(repr(entity_id), "<id>").replace(entity_id, "<id>")

    return type(error), error.code, blank(error.message), blank(error.hint), error.details


async def refusal(call: Awaitable[Any]) -> BashGymError:
    try:
        await call
    except NotFound as error:
        return error
    raise AssertionError("expected NotFound")


@FAST
@given(
    drawn=st.integers(2, 3).flatmap(
        lambda k: st.tuples(st.just(NAMES[:k]), st.lists(named_write(NAMES[:k]), min_size=1, max_size=30))
    )
)
def test_a_project_sees_only_its_own_rows_whatever_the_interleaving(drawn: tuple[tuple[str, ...], list[Op]]) -> None:
    """Writes into two or three projects in any order; every read of one project shows only its rows, and
    another project's id through it is refused exactly like an id that exists nowhere."""
    projects, ops = drawn
    planner = Planner(World())
    writes = planner.plan([Op("project", p, 0) for p in projects] + ops)

    async def scenario(path: Path) -> None:
        ids: Ids = {}
        events: Counter[str] = Counter()
        async with await open_ledger(path) as ledger:
            for write in writes:
                await send_and_count(ledger, write, ids, events)
            for p in projects:
                mine = {kind: planner.owned[(p, kind)] for kind in (*COUNTED, "campaign")}
                everyone = {kind: set().union(*(planner.owned[(q, kind)] for q in projects)) for kind in mine}
                await check_reads(ledger, p, mine, events[p])
                await check_lookups(ledger, p, mine, everyone)

    run_with_fresh_ledger_file(scenario)


async def check_reads(ledger: Ledger, p: str, mine: dict[str, set[str]], event_count: int) -> None:
    counts = (await ledger.get_project(WS, p))["counts"]
    assert counts == {"comparisons": 0, **{table: len(mine[kind]) for kind, table in COUNTED.items()}}
    runs = await ledger.list_runs(WS, p, limit=1000)
    assert {r["run_id"] for r in runs} == mine["run"] and all(r["project_id"] == p for r in runs)
    assert {e["experiment_id"] for e in await ledger.list_experiments(WS, p)} == mine["experiment"]
    assert {c["campaign_id"] for c in await ledger.list_campaigns(WS, p)} == mine["campaign"]
    evaluations = await ledger.list_evaluations(WS, p)
    assert {s["suite_id"] for s in evaluations["suites"]} == mine["eval_suite"]
    assert {r["result_id"] for r in evaluations["results"]} == mine["eval_result"]
    assert all(row["project_id"] == p for rows in evaluations.values() for row in rows)
    page = await ledger.events_page(WS, p, after_cursor=0, limit=1000)
    assert not page.has_more and len(page.events) == event_count
    assert all(e.project_id == p for e in page.events)
    context = await ledger.project_context(WS, p)
    assert context["project"]["project_id"] == p
    assert {k: v for k, v in context["inventory"].items() if k != "runs_by_status"} == counts
    assert all(e["project_id"] == p for e in context["recent"]["events"])
    assert {r["run_id"] for r in context["recent"]["runs"]} <= mine["run"]
    assert {r["result_id"] for r in context["recent"]["evaluations"]} <= mine["eval_result"]
    assert {d["decision_id"] for d in context["recent"]["decisions"]} <= mine["decision"]
    assert {m["model_version_id"] for m in context["lineage"]["model_versions"]} <= mine["model_version"]
    assert {d["dataset_version_id"] for d in context["lineage"]["dataset_versions"]} <= mine["dataset_version"]
    assert {a["model_version_id"] for a in context["lineage"]["aliases"]} <= mine["model_version"]
    assert set(context["evidence"]["artifact_ids"]) <= mine["artifact"]


async def check_lookups(ledger: Ledger, p: str, mine: dict[str, set[str]], everyone: dict[str, set[str]]) -> None:
    for kind in ENTITY_KINDS:
        for entity_id in everyone[kind] | {MISSING}:
            found = await ledger.entity(WS, p, kind, entity_id)
            if entity_id in mine[kind]:
                assert found is not None and found["project_id"] == p
            else:
                assert found is None, f"{kind} {entity_id} of another project is visible through {p}"
    for run_id in mine["run"]:
        assert (await ledger.get_run(WS, p, run_id))["project_id"] == p
    cursor = ledger.last_cursor
    for kind, probes in PROBES.items():
        for foreign in everyone[kind] - mine[kind]:
            for probe in probes:
                missing = await refusal(probe(ledger, p, MISSING))
                through_p = await refusal(probe(ledger, p, foreign))
                assert shape(through_p, foreign) == shape(missing, MISSING)
    assert ledger.last_cursor == cursor, "a refused write through another project appended an event"


@settings(FAST, max_examples=10)
@given(
    # The second registration goes to another project, or (no context) to unassigned.
    homes=st.sampled_from([(a, b) for a in NAMES for b in (*NAMES, None) if a != b]),
)
def test_a_source_run_id_another_project_holds_registers_like_a_fresh_one(homes: tuple[str, str | None]) -> None:
    """Source ids are the other system's, per project; the ledger gives the second run an id of its own."""
    first, second = homes

    def registration(project: str | None) -> RunRegistration:
        context = None if project is None else tracking_context(project_id=project)
        return RunRegistration(method="sft", source_system="mlflow", source_run_id="r1", tracking_context=context)

    async def scenario(path: Path) -> None:
        async with await open_ledger(path) as ledger:
            kept = (await ledger.register_run(ACTOR, WS, registration(first))).record
            added = await ledger.register_run(ACTOR, WS, registration(second))
            assert not added.replayed and added.record["project_id"] == (second or "unassigned")
            assert added.record["run_id"] != kept["run_id"]
            assert (await ledger.get_run(WS, first, kept["run_id"]))["run_id"] == kept["run_id"]

    run_with_fresh_ledger_file(scenario)


@settings(FAST, max_examples=10)
@given(homes=st.sampled_from([(a, b) for a in NAMES for b in (*NAMES, None) if a != b]))
def test_a_run_id_another_project_holds_is_refused_without_naming_it(homes: tuple[str, str | None]) -> None:
    """Run directories and live supervisors are named by run id: one id, one run, across the ledger."""
    first, second = homes

    def registration(project: str | None) -> RunRegistration:
        context = None if project is None else tracking_context(project_id=project)
        return RunRegistration(run_id="r1", method="sft", tracking_context=context)

    async def scenario(path: Path) -> None:
        async with await open_ledger(path) as ledger:
            await ledger.register_run(ACTOR, WS, registration(first))
            cursor = ledger.last_cursor
            try:
                await ledger.register_run(ACTOR, WS, registration(second))
            except Conflict as error:
                assert "unique across the ledger" in error.message and first not in error.message
            else:
                raise AssertionError("a run id another project holds was registered again")
            assert ledger.last_cursor == cursor

    run_with_fresh_ledger_file(scenario)


# -- 3. the run state machine ------------------------------------------------------------------------


class LedgerMachine(RuleBasedStateMachine):
    """A state machine over one ledger file, driven through one event loop for its whole life."""

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self._runner = asyncio.Runner()
        self.ledger = self.wait(open_ledger(new_ledger_file(Path(self._dir.name))))

    def wait(self, awaitable: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(awaitable)

    def refused(self, call: Coroutine[Any, Any, Any], error: type[BashGymError]) -> BashGymError:
        """Assert that call raises error (or a subclass) and appends nothing."""
        cursor = self.ledger.last_cursor
        with pytest.raises(error) as caught:
            self.wait(call)
        assert self.ledger.last_cursor == cursor, "a refused request appended an event"
        return caught.value

    def teardown(self) -> None:
        try:
            self.wait(self.ledger.close())
        finally:
            self._runner.close()
            self._dir.cleanup()


RUN_STATUS_EVENTS = sorted(f"run.{status}" for status in (*RUN_STATES, "started", "resumed") if status != "running")
ATTEMPT_STATUSES = "SELECT run_id, status FROM attempts WHERE workspace_id = 'default' AND project_id = 'unassigned'"


def live(histories: dict[str, list[str]], terminal: frozenset[str]) -> list[str]:
    return [key for key, history in histories.items() if history[-1] not in terminal]


class RunStatusMachine(LedgerMachine):
    """Random status requests on a few runs: legal ones apply, others are refused and change nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[str]] = {}  # run id -> the statuses it went through

    @initialize()
    def two_runs(self) -> None:
        self.register()
        self.register()

    # Another run only when fewer than two still move: a terminal run can only show refusals.
    @precondition(lambda self: len(live(self.history, TERMINAL)) < 2)
    @rule()
    def register(self) -> None:
        run_id = f"r{len(self.history)}"
        self.wait(self.ledger.register_run(ACTOR, WS, RunRegistration(run_id=run_id, method="sft")))
        self.history[run_id] = ["queued"]

    @rule(data=st.data(), attempt=st.sampled_from(["latest", "latest", "its own", "its own", "another run's"]))
    def request(self, data: st.DataObject, attempt: str) -> None:
        run_id = data.draw(one_of_mostly_live(self.history, TERMINAL), label="run")
        current = self.history[run_id][-1]
        status = data.draw(target_from(current, TRANSITIONS, RUN_STATES), label="status")
        attempt_id = None if attempt == "latest" else f"{run_id}.a1"
        if attempt == "another run's":
            other = data.draw(st.sampled_from(sorted(set(self.history) - {run_id})), label="other run")
            attempt_id = f"{other}.a1"
        spec = RunTransition(status=status, attempt_id=attempt_id)
        move = self.ledger.transition_run(ACTOR, WS, "unassigned", run_id, spec)
        if attempt == "another run's":
            self.refused(move, NotFound)
        elif status != current and status not in TRANSITIONS[current]:
            error = self.refused(move, InvalidTransition)
            assert error.code == "ledger_invalid_transition"
            assert current not in TERMINAL or status != current
        else:
            self.applied(run_id, current, status, move)

    def applied(self, run_id: str, current: str, status: str, move: Coroutine[Any, Any, WriteResult]) -> None:
        assert current not in TERMINAL or status == current, f"{run_id} left terminal {current} for {status}"
        cursor = self.ledger.last_cursor
        result = self.wait(move)
        assert result.record["status"] == status
        assert result.replayed is (status == current)
        assert self.ledger.last_cursor == cursor + (0 if result.replayed else 1)
        if not result.replayed:
            self.history[run_id].append(status)

    @invariant()
    def stored_runs_match_their_history(self) -> None:
        page = self.wait(self.ledger.events_page(WS, "unassigned", after_cursor=0, limit=1000, types=RUN_STATUS_EVENTS))
        runs = {run["run_id"]: run for run in self.wait(self.ledger.list_runs(WS, "unassigned", limit=1000))}
        attempts = self.wait(self.ledger.read(lambda conn: [tuple(r) for r in conn.execute(ATTEMPT_STATUSES)]))
        assert set(runs) == set(self.history) and len(attempts) == len(runs), "one attempt per run"
        for run_id, attempt_status in attempts:
            assert attempt_status == runs[run_id]["status"], f"{run_id}'s attempt and run disagree"
        for run_id, history in self.history.items():
            run = runs[run_id]
            assert run["status"] == history[-1]
            assert is_path(history, TRANSITIONS) and history[-1] in reachable_from("queued", TRANSITIONS)
            assert (run["ended_at"] is not None) == (history[-1] in TERMINAL)
            assert (run["started_at"] is not None) == ("running" in history)
            folded = [e.payload["status"] for e in page.events if e.run_id == run_id]
            assert folded == history, "the run's status events do not replay to its history"
        active = {r["run_id"] for r in self.wait(self.ledger.active_runs())}
        assert active == {run_id for run_id, history in self.history.items() if history[-1] in OWNED}


TestRunsMoveOnlyAlongTheTransitionTable = RunStatusMachine.TestCase
TestRunsMoveOnlyAlongTheTransitionTable.settings = MACHINE


# -- 4. the campaign state machine -------------------------------------------------------------------


def test_the_campaign_table_covers_exactly_the_campaign_states() -> None:
    assert set(CAMPAIGN_TRANSITIONS) == set(CAMPAIGN_STATES)
    assert all(targets <= set(CAMPAIGN_STATES) for targets in CAMPAIGN_TRANSITIONS.values())
    assert all(not CAMPAIGN_TRANSITIONS[state] for state in CAMPAIGN_TERMINAL)


@dataclass
class CampaignModel:
    history: list[str] = field(default_factory=lambda: ["draft"])
    resume_status: str | None = None

    @property
    def status(self) -> str:
        return self.history[-1]

    @property
    def version(self) -> int:
        return len(self.history)  # created at version 1; every applied move adds one

    def apply(self, target: str) -> None:
        self.resume_status = self.status if target == "awaiting_authority" else None
        self.history.append(target)


class CampaignStatusMachine(LedgerMachine):
    """Random moves with current, stale and future versions, alone or racing a second writer."""

    project = "nightly"

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[str, CampaignModel] = {}
        self.wait(self.ledger.create_project(ACTOR, WS, ProjectSpec(project_id=self.project, name="Nightly")))

    @property
    def histories(self) -> dict[str, list[str]]:
        return {campaign_id: model.history for campaign_id, model in self.models.items()}

    @initialize()
    def two_campaigns(self) -> None:
        self.create()
        self.create()

    @precondition(lambda self: len(live(self.histories, CAMPAIGN_TERMINAL)) < 2)
    @rule()
    def create(self) -> None:
        spec = World().campaign(self.project, len(self.models))
        self.wait(self.ledger.create_campaign(ACTOR, WS, self.project, spec))
        self.models[spec.campaign_id] = CampaignModel()

    def move(self, campaign_id: str, target: str, version: int) -> Coroutine[Any, Any, WriteResult]:
        return self.ledger.transition_campaign(
            ACTOR, WS, self.project, campaign_id, target, expected_version=version, reason="drawn"
        )

    @rule(data=st.data(), lag=st.sampled_from([0, 0, 0, 1, 2, -1]))
    def request(self, data: st.DataObject, lag: int) -> None:
        campaign_id = data.draw(one_of_mostly_live(self.histories, CAMPAIGN_TERMINAL), label="campaign")
        model = self.models[campaign_id]
        status = data.draw(target_from(model.status, CAMPAIGN_TRANSITIONS, CAMPAIGN_STATES), label="status")
        version = model.version - lag  # lag > 0: a stale read; lag < 0: a version not reached yet
        if version != model.version:
            error = self.refused(self.move(campaign_id, status, version), Conflict)
            assert error.code == "conflict", "a stale version must be told to re-read, whatever the target"
            assert error.details == {"version": model.version, "status": model.status}
            return
        if status not in CAMPAIGN_TRANSITIONS[model.status]:
            self.refused(self.move(campaign_id, status, version), InvalidTransition)
            return
        assert model.status not in CAMPAIGN_TERMINAL
        cursor = self.ledger.last_cursor
        record = self.wait(self.move(campaign_id, status, version)).record
        model.apply(status)
        assert (record["status"], record["version"]) == (status, model.version)
        assert self.ledger.last_cursor == cursor + 1

    @rule(data=st.data())
    def two_writers_race_from_the_same_version(self, data: st.DataObject) -> None:
        campaign_id = data.draw(one_of_mostly_live(self.histories, CAMPAIGN_TERMINAL), label="campaign")
        model = self.models[campaign_id]
        target = target_from(model.status, CAMPAIGN_TRANSITIONS, CAMPAIGN_STATES)
        statuses = [data.draw(target, label="first writer's status"), data.draw(target, label="second writer's")]

        async def race() -> list[WriteResult | BaseException]:
            moves = [self.move(campaign_id, target, model.version) for target in statuses]
            return await asyncio.gather(*moves, return_exceptions=True)

        cursor = self.ledger.last_cursor
        outcomes = self.wait(race())
        applied = [o for o in outcomes if isinstance(o, WriteResult)]
        assert all(isinstance(o, WriteResult | Conflict) for o in outcomes), outcomes
        assert len(applied) <= 1, "two writers holding the same version both applied"
        assert self.ledger.last_cursor == cursor + len(applied)
        if applied:
            model.apply(applied[0].record["status"])
            assert applied[0].record["version"] == model.version

    @invariant()
    def stored_campaigns_match_their_history(self) -> None:
        page = self.wait(
            self.ledger.events_page(WS, self.project, after_cursor=0, limit=1000, types=["campaign.transitioned"])
        )
        campaigns = {c["campaign_id"]: c for c in self.wait(self.ledger.list_campaigns(WS, self.project))}
        assert set(campaigns) == set(self.models)
        for campaign_id, model in self.models.items():
            stored = campaigns[campaign_id]
            assert (stored["status"], stored["version"]) == (model.status, model.version)
            assert stored["resume_status"] == model.resume_status
            assert is_path(model.history, CAMPAIGN_TRANSITIONS)
            assert model.status in reachable_from("draft", CAMPAIGN_TRANSITIONS)
            moves = [
                (e.payload["previous_status"], e.payload["status"])
                for e in page.events
                if e.payload["campaign_id"] == campaign_id
            ]
            assert moves == list(itertools.pairwise(model.history))


TestCampaignsMoveOnlyAlongTheirTableWithOptimisticVersions = CampaignStatusMachine.TestCase
TestCampaignsMoveOnlyAlongTheirTableWithOptimisticVersions.settings = MACHINE
