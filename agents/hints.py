"""Next actions for an agent: the daemon's hints and next actions name CLI commands (`bashgym eval run --project P
--run R`), which an agent over MCP cannot run. Every answer and refusal of a tool passes here once: each command a
hint names becomes the tool call that does the same, with the ids the hint gave and the ids the call knew filled in
(`next_tool`: tool, arguments, and the arguments still `missing`). `COMMANDS` is the one table from command to tool;
tests/unit/test_mcp_hints.py checks it against the CLI's parsers and the tools' input schemas."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

Required = dict[str, tuple[str, ...]]  # each tool's required arguments, by tool name


@dataclass(frozen=True)
class Call:
    """The tool a CLI command maps to: its options (and positional, under "") by tool argument, and fixed ones."""

    tool: str
    options: dict[str, str]
    fixed: dict[str, Any] = field(default_factory=dict)
    prefixes: dict[str, str] = field(default_factory=dict)  # the tool argument's value is the option's, prefixed


RUN = {"--project": "project", "": "run_id"}
CAMPAIGN = {"--project": "project", "": "campaign_id"}
# Each CLI command a hint may name, and the tool that does the same. Host commands (`bashgym up`, `bashgym daemon`,
# `bashgym auth issue`, ...) have no tool: an agent passes them on to the person, as written.
COMMANDS: dict[str, Call] = {
    "eval run": Call("run_evaluation", {"--project": "project", "--run": "run_id", "--suite": "suite_id",
                                        "--model-version": "model_version_id", "--gold": "gold",
                                        "--limit-tasks": "limit_tasks", "--dataset-path": "dataset_path",
                                        "--corpus-path": "corpus_path", "--samples": "samples"}),
    "eval compare": Call("compare_results", {"--project": "project", "--baseline": "baseline_result_id",
                                             "--candidate": "candidate_result_id", "--resamples": "resamples"}),
    "runcard create": Call("create_runcard", {"--project": "project", "--run": "run_id",
                                              "--claim-tier": "claim_tier", "--limitation": "known_limitations"}),
    "runcard show": Call("show_runcards", {"--project": "project", "--run": "run_id"}),
    "promote gate": Call("promotion_gate", {"--project": "project", "--run": "run_id"}),
    "promote decide": Call("promote_decide", {"--project": "project", "--run": "run_id", "--alias": "alias",
                                              "--model-version": "model_version_id",
                                              "--override-reason": "override_reason"}),
    "model register --run": Call("register_run_model", {"--project": "project", "--run": "run_id",
                                                        "--model": "model_id", "--version": "model_version_id"}),
    "model register": Call("register_model_version", {"--project": "project", "--model": "model_id",
                                                      "--version": "model_version_id", "--dir": "directory",
                                                      "--hub-id": "hub_id", "--revision": "revision",
                                                      "--kind": "kind"}),
    "dataset register": Call("register_dataset_version", {"--project": "project", "--dataset": "dataset_id",
                                                          "--version": "dataset_version_id", "--file": "path"}),
    "project create": Call("create_project", {"--id": "project_id", "--name": "name", "--profile": "profile"}),
    "project list": Call("list_experiment_projects", {}),
    "experiment create": Call("create_experiment", {"--project": "project", "--id": "experiment_id",
                                                    "--name": "name", "--objective": "objective",
                                                    "--task-type": "task_type"}),
    "training plan": Call("plan_training", {"--project": "project", "--experiment": "experiment",
                                            "--model-version": "model_version", "--dataset-version": "dataset_version",
                                            "--dataset-project": "dataset_project"}),
    "training start": Call("start_training", {"--project": "project", "--experiment": "experiment",
                                              "--model-version": "model_version",
                                              "--dataset-version": "dataset_version",
                                              "--dataset-project": "dataset_project", "--wait": "wait"}),
    "training validate": Call("validate_training_data", {"--method": "method", "--dataset": "path"}),
    "training status": Call("get_experiment_run", RUN),
    "training log": Call("get_run_log", {**RUN, "--tail": "tail"}),
    "training pause": Call("pause_run", RUN),
    "training resume": Call("resume_run", RUN),
    "training stop": Call("stop_run", RUN),
    "training list": Call("list_runs", {"--project": "project", "--status": "status", "--method": "method",
                                        "--experiment": "experiment", "--limit": "limit"}),
    "run show": Call("get_experiment_run", RUN),
    "run log": Call("get_run_log", {**RUN, "--tail": "tail"}),
    "run stop": Call("stop_run", RUN),
    "run list": Call("list_runs", {"--project": "project", "--status": "status", "--method": "method",
                                   "--experiment": "experiment", "--limit": "limit"}),
    "ledger run": Call("get_experiment_run", RUN),
    "ledger runs": Call("list_runs", {"--project": "project", "--status": "status", "--method": "method",
                                      "--experiment": "experiment", "--limit": "limit"}),
    "ledger context": Call("get_experiment_context", {"--project": "project"}),
    "ledger evaluations": Call("list_evaluations", {"--project": "project"}),
    "ledger events": Call("list_events", {"--project": "project", "--after-cursor": "after_cursor",
                                          "--limit": "limit"}),
    "campaign list": Call("list_campaigns", {"--project": "project"}),
    "campaign show": Call("get_campaign", CAMPAIGN),
    "campaign create": Call("create_campaign", {"--project": "project"}),
    **{f"campaign {action}": Call("campaign_action", {**CAMPAIGN, "--expected-version": "expected_version",
                                                      "--reason": "reason"}, {"action": action})
       for action in ("validate", "start", "pause", "resume")},
    "campaign propose": Call("propose_candidate", CAMPAIGN),
    "campaign report": Call("create_campaign_report", CAMPAIGN),
    "budget show": Call("budget_show", {"--project": "project"}),
    "budget amend": Call("amend_budget", {"--project": "project", "--runs": "runs", "--gpu-hours": "gpu_hours",
                                          "--reason": "reason", "--campaign": "scope"},
                         prefixes={"scope": "campaign-"}),
    "device list": Call("list_devices", {}),
    "device preflight": Call("preflight_device", {"": "device_id"}),
    "jobs list": Call("list_external_jobs", {"--project": "project"}),
    "jobs show": Call("show_external_job", {"--project": "project", "": "job_id"}),
    "auth whoami": Call("whoami", {}),
    "doctor": Call("doctor", {}),
}  # fmt: skip
# The commands a hint may name that no tool does: they act on the host (start the daemon, issue tokens, restore the
# ledger, read an MLflow server with the person's own network and credentials), so an agent passes them on to the
# person as written.
HOST_COMMANDS = frozenset({
    "auth issue", "auth revoke", "authority grant", "curate", "daemon", "device add", "device bootstrap",
    "eval canaries", "import mlflow", "ledger restore", "logs", "project channel", "project use", "status", "ui",
    "up", "mcp", "cluster add", "cluster remove", "cluster show",
})  # fmt: skip
# A hint's keys whose text is a next step (a next action that is a dict says it under `detail`).
HINT_KEYS = frozenset({"next_action", "hint", "hints", "next_step"})
SWITCHES = frozenset({"--gold", "--wait"})
_COMMAND = re.compile(
    r"`?bashgym ("
    + "|".join(re.escape(c) for c in sorted({k.split(" --")[0] for k in COMMANDS}, key=len)[::-1])
    + r")\b"
)
_WORD = re.compile(r"\s+([^\s`]+?)([.,;:)]*)(?=\s|`|$)")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
KNOWN = frozenset({"project", "run_id", "campaign_id", "job_id"})  # ids of the answering call a hint may leave out


def tool_call(
    text: str, known: dict[str, Any] | None = None, required: Required | None = None
) -> dict[str, Any] | None:
    """The first command `text` names that a tool does, as {tool, arguments, missing}; None when there is none.
    `known`: arguments of the call that answered (its project, run_id, ...), filled in where the hint has none;
    `required`: each tool's required arguments, named in `missing` where the hint does not give them."""
    for match in _COMMAND.finditer(text):
        parsed = _parse(text, match, known or {}, required or {})
        if parsed is not None:
            return parsed[0]
    return None


def for_agents(text: str, known: dict[str, Any] | None = None, required: Required | None = None) -> str:
    """`text` with each command it names that a tool does written as that tool's call."""
    out, at = [], 0
    for match in _COMMAND.finditer(text):
        parsed = _parse(text, match, known or {}, required or {})
        if parsed is None or match.start() < at:
            continue
        call, end = parsed
        out += [text[at : match.start()], _written(call)]
        at = end + (1 if text[end : end + 1] == "`" and text[match.start()] == "`" else 0)
    return "".join([*out, text[at:]])


def translate(answer: Any, known: dict[str, Any] | None = None, required: Required | None = None) -> Any:
    """The answer (a model of agents/answers.py, a dict, a list) with every hint it carries for an agent: the text
    names tools, and a dict holding a hint gains `next_tool`."""
    if isinstance(answer, BaseModel):
        return type(answer).model_validate(translate(answer.model_dump(mode="json"), known, required))
    if isinstance(answer, list):
        return [translate(item, known, required) for item in answer]
    if not isinstance(answer, dict):
        return answer
    keys = HINT_KEYS | ({"detail"} if "code" in answer else set())  # a next action as {code, detail}
    out = {
        key: _hint(value, known, required) if key in keys else translate(value, known, required)
        for key, value in answer.items()
    }
    for key in ("next_action", "hint", "detail"):
        value = answer.get(key)
        if isinstance(value, str) and "next_tool" not in out and (key != "detail" or "code" in answer):
            call = tool_call(value, known, required)
            if call is not None:
                out["next_tool"] = call
    return out


def _hint(value: Any, known: dict[str, Any] | None, required: Required | None) -> Any:
    if isinstance(value, str):
        return for_agents(value, known, required)
    if isinstance(value, list):
        return [_hint(item, known, required) for item in value]
    return translate(value, known, required)


def _parse(
    text: str, match: re.Match[str], known: dict[str, Any], required: Required
) -> tuple[dict[str, Any], int] | None:
    """The call the command at `match` makes and where its words end; None when it takes an option no tool does."""
    words: list[tuple[str, int]] = []
    at = match.end()
    while (word := _WORD.match(text, at)) is not None:
        token, stop = word.group(1), word.group(2)
        if token.startswith("(") or not (token.startswith("--") or words or _positional(match.group(1))):
            break
        if not token.startswith("--") and words and words[-1][0] in SWITCHES:
            break
        if not token.startswith("--") and words and not words[-1][0].startswith("--"):
            break  # a second value in a row is prose
        words.append((token, word.end(1)))
        at = word.end(1)
        if stop:
            break
    command = match.group(1)
    flags = [w for w, _ in words]
    spec = COMMANDS.get(f"{command} --run") if command == "model register" and "--run" in flags else None
    spec = spec or COMMANDS[command]
    arguments: dict[str, Any] = dict(spec.fixed)
    missing: list[str] = []
    flag: str | None = None
    for token in flags:
        if token.startswith("--"):
            if token not in spec.options:
                return None
            if token in SWITCHES:
                arguments[spec.options[token]] = True
            flag = None if token in SWITCHES else token
            continue
        name = spec.options[flag if flag is not None else ""]
        if _PLACEHOLDER.match(token):
            missing.append(name)
        else:
            arguments[name] = spec.prefixes.get(name, "") + str(token) if name in spec.prefixes else _value(name, token)
        flag = None
    for name in dict.fromkeys(spec.options.values()):  # the options' own order: one spelling per hint
        if name in arguments:
            continue
        if known.get(name) is not None and name in KNOWN:
            arguments[name] = known[name]
    missing += [name for name in required.get(spec.tool, ()) if name not in arguments]
    call = {"tool": spec.tool, "arguments": arguments, "missing": sorted(set(missing) - set(arguments))}
    return call, (words[-1][1] if words else match.end())


def _positional(command: str) -> bool:
    return "" in COMMANDS[command].options


def _value(name: str, word: str) -> Any:
    if name == "known_limitations":
        return [word]
    if name in {"limit_tasks", "samples", "resamples", "limit", "tail", "after_cursor", "runs", "expected_version"}:
        try:
            return int(word)
        except ValueError:
            return word
    return word


def _written(call: dict[str, Any]) -> str:
    given = [f"{name}={json.dumps(value)}" for name, value in call["arguments"].items()]
    return f"{call['tool']}({', '.join([*given, *(f'{name}=…' for name in call['missing'])])})"
