"""Dataset contracts: what each method's JSONL rows must hold, checked before a launch spends compute.

Pure Python and pydantic, so the daemon and the CLI import it without loading torch. The file is read
line by line; a dataset of any size costs one row of memory plus the capped error list.
A missing file raises FileNotFoundError (it is not a report error): there is nothing to report on.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from bashgym.trainers.contracts.request import METHODS, Method, TrainingRequest
from pydantic import BaseModel, ConfigDict

ErrorCode = Literal[
    "invalid_json",
    "invalid_encoding",
    "not_an_object",
    "empty_file",
    "missing_field",
    "wrong_type",
    "empty_text",
    "out_of_range",
    "identical_pair",
    "length_ratio",
    "no_assistant_turn",
    "bad_role",
    "span_mismatch",
    "bad_policy",
    "confidence_range",
    "missing_verifier",
    "bad_verifier",
    "nondeterministic_verifier",
    "not_a_training_task",
    "prompt_not_the_task",
    "missing_teacher",
    "unknown_field",
    "same_text",
    "leaked_pair",
    "evaluation_task",
    "held_out_family",
]

ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
DETERMINISTIC_KINDS: tuple[str, ...] = ("command", "exact_match", "terminal_task")
NONDETERMINISTIC_KINDS: tuple[str, ...] = ("llm_judge", "model")
SPAN_POLICY = "target_span_only"
# A chosen answer 20x the rejected one (or the reverse) teaches "be long" or "be short", not preference.
# Below 200 characters on the longer side the ratio is noise ("Yes." vs a one-line answer), so it is not checked.
LENGTH_RATIO_MAX = 20.0
LENGTH_RATIO_MIN_CHARS = 200
# A strict reward example: the pair and an optional `source`, the slice the evaluation reports accuracy by.
REWARD_FIELDS: tuple[str, ...] = ("prompt", "chosen", "rejected", "source")
# A retrieval example; ids and family are kept for evaluation slices, `source` like a reward example's.
RETRIEVAL_FIELDS: tuple[str, ...] = ("query", "positive", "negative", "query_id", "positive_id", "family", "source")

# The methods that train a policy on prompts (a reward model or a retriever is judged on its own held-out rows), and
# the fields of their rows that hold what the policy is asked.
POLICY_METHODS: tuple[str, ...] = ("sft", "dpo", "grpo", "rlvr", "distillation", "session_distillation")
PROMPT_FIELDS: tuple[str, ...] = ("messages", "text", "prompt", "original_context", "hinted_context")
# The codes of rows that ask a task the policy is judged by (check_unjudged), and the key a launch that refused
# them records in its run's config: the gate reads the data of a run without it again (daemon/evidence).
JUDGED_CODES: tuple[ErrorCode, ...] = ("evaluation_task", "held_out_family")
JUDGED_TASK_CHECK = "judged_task_check"

# (field, code, message) of one problem in one row; the line and file are added when it is reported.
Issue = tuple[str, ErrorCode, str]
RowCheck = Callable[[dict[str, Any]], list[Issue]]


class ContractError(BaseModel):
    """One problem in a dataset file: where it is, what kind it is, and what to do about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    line: int  # 1-based line in the file; 0 for a problem of the whole file (empty_file)
    field: str  # dotted path into the row ("messages.2.role"), "" for the whole row or file
    code: ErrorCode
    message: str


class ContractReport(BaseModel):
    """The verdict on one dataset file for one method."""

    model_config = ConfigDict(extra="forbid")

    file: str
    method: Method
    rows: int  # rows that passed every check
    errors: list[ContractError]  # the first max_errors problems, in file order
    truncated: bool  # more problems were found than errors lists
    summary: dict[str, int]  # every problem found, listed or not, counted by code
    ok: bool


def validate_dataset(
    method: str,
    path: Path,
    *,
    teacher_model: str | None = None,
    reward_source: str = "verifier",
    max_errors: int = 1000,
) -> ContractReport:
    """Check every row of a JSONL dataset against the contract of `method`.

    Raises:
        ValueError: `method` is not one of METHODS.
        FileNotFoundError: `path` does not exist or is not a file.
    """
    check = row_check(method, teacher_model=teacher_model, reward_source=reward_source)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"Dataset {path} {what}. Check the path, or write the JSONL file first.")
    collector = _Collector(str(path), max_errors)
    seen = valid = 0
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            seen += 1
            issues = check_line(raw, check)
            collector.add(number, issues)
            valid += not issues
    if seen == 0:
        collector.add(0, [("", "empty_file", "The file holds no rows; write at least one JSON object per line.")])
    return collector.report(method, valid)


def validate_request_data(request: TrainingRequest, path: Path, *, max_errors: int = 1000) -> ContractReport:
    """The contract of the data `request` trains on, read as that request reads it (its teacher, its rewards)."""
    return validate_dataset(
        request.method,
        path,
        teacher_model=request.teacher_model,
        reward_source=request.grpo_reward_source,
        max_errors=max_errors,
    )


def row_check(method: str, *, teacher_model: str | None = None, reward_source: str = "verifier") -> RowCheck:
    """The row checker of one method; raises ValueError for an unknown method."""
    check = _row_contract(method, teacher_model=teacher_model, reward_source=reward_source)
    if method not in POLICY_METHODS:
        return check
    return lambda row: check(row) + check_unjudged(row)


def _row_contract(method: str, *, teacher_model: str | None, reward_source: str) -> RowCheck:
    if method == "grpo" and reward_source == "reward_model":
        return check_prompt  # the reward model scores every completion: a row needs its prompt only
    match method:
        case "sft":
            return check_sft
        case "dpo":
            return check_dpo
        case "grpo":
            return lambda row: check_verified_prompt(row, deterministic=False)
        case "rlvr":
            return lambda row: check_verified_prompt(row, deterministic=True)
        case "distillation":
            has_teacher = bool(teacher_model and teacher_model.strip())
            return lambda row: check_distillation(row, has_teacher_model=has_teacher)
        case "session_distillation":
            return check_session_distillation
        case "reward_model":
            return check_reward_example
        case "embedding_retriever":
            return check_retrieval_example
    raise ValueError(f"Unknown method {method!r}; use one of {', '.join(METHODS)}.")


def check_unjudged(row: dict[str, Any]) -> list[Issue]:
    """A policy's training text asks no task it is judged by: no instance of the evaluation suite (it would be
    scored on what it trained on), no task of a held-out family (its holdout figures would report memory as
    generalisation). Recognised by text (trainers/environments/task_shapes.py), so any file or dataset version."""
    from bashgym.trainers.environments.task_shapes import judged_task_in, suite_id

    for field, text in _row_texts(row):
        found = judged_task_in(text)
        if found is None:
            continue
        if found.task_id is not None:
            message = (
                f"The row holds {found.task_id}, a task of the evaluation suite {suite_id()} (its instruction and "
                "files): the run would be scored on what it trained on. Drop the row "
                "(gold_sft_rows(..., exclude=default_suite().tasks) leaves the suite out)."
            )
            return [(field, "evaluation_task", message)]
        message = (
            f"The row asks a {found.family} task, a family {suite_id()} holds out of training "
            f"({', '.join(found.held_out)}) to judge generalisation: its holdout figures would report memory. "
            "Drop the row: train on the other families (gold_sft_rows(..., families=training_families()))."
        )
        return [(field, "held_out_family", message)]
    return []


def _row_texts(row: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, text) of every text a row shows the policy as a prompt or a conversation turn."""
    texts = []
    for name in PROMPT_FIELDS:
        value = row.get(name)
        if isinstance(value, str):
            texts.append((name, value))
        elif isinstance(value, list):
            texts += [
                (f"{name}.{index}.content", turn["content"])
                for index, turn in enumerate(value)
                if isinstance(turn, dict) and isinstance(turn.get("content"), str)
            ]
    return texts


def check_line(raw: bytes, check: RowCheck) -> list[Issue]:
    """Decode and parse one JSONL line, then run the method's row check on it."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return [("", "invalid_encoding", f"Byte {exc.start} is not UTF-8; re-encode the file as UTF-8.")]
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        return [("", "invalid_json", f"Not valid JSON ({exc.msg} at column {exc.colno}); write one object per line.")]
    if not isinstance(row, dict):
        return [("", "not_an_object", f"The row is a JSON {json_type(row)}; write one JSON object per line.")]
    return check(row)


def check_sft(row: dict[str, Any]) -> list[Issue]:
    """sft: `messages` with at least one assistant turn, or a non-empty `text`."""
    if "messages" in row:
        return check_messages(row["messages"], "messages", needs_assistant=True)
    if "text" in row:
        return check_text(row, "text")
    return [
        (
            "messages",
            "missing_field",
            "Add `messages` (a list of {role, content} turns with an assistant turn) or `text` (a non-empty string).",
        )
    ]


def check_dpo(row: dict[str, Any]) -> list[Issue]:
    """dpo: a prompt and two different, comparably long answers to it."""
    issues = check_prompt(row) + check_text(row, "chosen") + check_text(row, "rejected")
    chosen, rejected = row.get("chosen"), row.get("rejected")
    if not (isinstance(chosen, str) and isinstance(rejected, str) and chosen.strip() and rejected.strip()):
        return issues
    return issues + check_pair(chosen.strip(), rejected.strip())


def check_reward_example(row: dict[str, Any]) -> list[Issue]:
    """reward_model: a strict example, a string prompt with a chosen and a rejected answer to that same prompt.

    Strict because the reward model scores `prompt + answer` as one text: a conversational or implicit-prompt row
    would score a prompt the pair does not share. Unknown keys are refused, since a misspelt `source` would
    silently drop the row from its evaluation slice."""
    issues = _unknown_fields(row, REWARD_FIELDS)
    for name in ("prompt", "chosen", "rejected"):
        if isinstance(row.get(name), list):
            issues.append(
                (name, "wrong_type", f"`{name}` is a messages list; a reward example's {name} is one string.")
            )
        else:
            issues += check_text(row, name)
    if "source" in row:
        issues += check_text(row, "source")
    chosen, rejected = row.get("chosen"), row.get("rejected")
    if isinstance(chosen, str) and isinstance(rejected, str) and chosen.strip() and rejected.strip():
        issues += check_pair(chosen.strip(), rejected.strip())
    return issues


def check_retrieval_example(row: dict[str, Any]) -> list[Issue]:
    """embedding_retriever: a query, the passage it should find, and optionally a passage it should not."""
    issues = _unknown_fields(row, RETRIEVAL_FIELDS)
    issues += check_text(row, "query") + check_text(row, "positive")
    if "negative" in row:
        issues += check_text(row, "negative")
    for name in ("query_id", "positive_id", "family", "source"):
        if name in row:
            issues += check_text(row, name)
    texts = {name: " ".join(row[name].split()) for name in ("query", "positive", "negative") if _filled(row, name)}
    if "query" in texts and texts.get("positive") == texts["query"]:
        issues.append(
            ("positive", "same_text", "`positive` repeats `query`; pair the query with the passage it seeks.")
        )
    if "negative" in texts and texts.get("positive") == texts["negative"]:
        issues.append(("negative", "same_text", "`negative` equals `positive`; give a passage that does not answer."))
    return issues


def _filled(row: dict[str, Any], name: str) -> bool:
    value = row.get(name)
    return isinstance(value, str) and bool(value.strip())


def _unknown_fields(row: dict[str, Any], known: tuple[str, ...]) -> list[Issue]:
    issues: list[Issue] = []
    for key in row:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"did you mean `{close[0]}`?" if close else f"the fields are {', '.join(known)}."
            issues.append((str(key), "unknown_field", f"`{key}` is not a field of this contract; {hint}"))
    return issues


def leaked_pairs(train: Path, held_out: Path, *, max_errors: int = 1000) -> ContractReport:
    """Held-out reward pairs that also appear in the training pairs (same prompt, chosen and rejected, whitespace
    and case aside), line-numbered in the held-out file: such a pair measures memory, not preference."""
    seen = {_pair_key(row) for row in _rows(train)}
    collector = _Collector(str(held_out), max_errors)
    clean = 0
    for number, row in enumerate(_rows_numbered(held_out), start=1):
        if row is None:
            continue
        if _pair_key(row) in seen:
            collector.add(
                number,
                [("", "leaked_pair", f"This pair is also in the training data {train.name}; drop it from one side.")],
            )
        else:
            clean += 1
    return collector.report("reward_model", clean)


def _pair_key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(" ".join(str(row.get(name, "")).lower().split()) for name in ("prompt", "chosen", "rejected"))


def _rows(path: Path) -> list[dict[str, Any]]:
    return [row for row in _rows_numbered(path) if row is not None]


def _rows_numbered(path: Path) -> list[dict[str, Any] | None]:
    """Every line of a JSONL file as its object, None for a blank or unreadable line (the contract reports those)."""
    rows: list[dict[str, Any] | None] = []
    with path.open("rb") as lines:
        for raw in lines:
            try:
                row = json.loads(raw.decode("utf-8-sig")) if raw.strip() else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                row = None
            rows.append(row if isinstance(row, dict) else None)
    return rows


def check_pair(chosen: str, rejected: str) -> list[Issue]:
    """A preference pair must differ, and neither side may dwarf the other."""
    if chosen == rejected:
        return [("rejected", "identical_pair", "`rejected` equals `chosen`; pair a different answer or drop the row.")]
    short, long = sorted((len(chosen), len(rejected)))
    if long >= LENGTH_RATIO_MIN_CHARS and long > LENGTH_RATIO_MAX * short:
        return [
            (
                "",
                "length_ratio",
                f"`chosen` has {len(chosen)} characters and `rejected` {len(rejected)} "
                f"(over {LENGTH_RATIO_MAX:g}x apart); pair answers of comparable length or drop the row.",
            )
        ]
    return []


def check_verified_prompt(row: dict[str, Any], *, deterministic: bool) -> list[Issue]:
    """grpo and rlvr: a prompt and a reference to the environment task that scores it."""
    issues = check_prompt(row)
    if "task_id" not in row and "verifier" not in row:
        return [
            *issues,
            (
                "verifier",
                "missing_verifier",
                "Add `task_id` (a training task) or an inline `verifier` to the row: "
                '{"kind": "exact_match", "expected": ...} or {"kind": "command", "files": {...}, "check": ...}.',
            ),
        ]
    if "task_id" in row:
        issues += check_text(row, "task_id")
    if "verifier" in row:
        issues += check_verifier(row["verifier"], has_task_id="task_id" in row, deterministic=deterministic)
    verifier = row.get("verifier")
    inline = isinstance(verifier, dict) and verifier.get("kind", "terminal_task") != "terminal_task"
    if not issues and not inline:  # the reward comes from an environment task: a training instance only
        issues += _training_task(row, verifier)
    return issues


def _training_task(row: dict[str, Any], verifier: Any) -> list[Issue]:
    from bashgym.trainers.environments.terminal_tasks import NotATrainingTask, training_task

    where, task_id = "task_id", row.get("task_id")
    if isinstance(verifier, dict) and "task_id" in verifier:
        where, task_id = "verifier.task_id", verifier["task_id"]
    try:
        task = training_task(str(task_id))
    except NotATrainingTask as exc:
        return [(where, "not_a_training_task", str(exc))]
    if _words(task.instruction) not in _words(_prompt_text(row["prompt"])):
        return [
            (
                "prompt",
                "prompt_not_the_task",
                f"The row's reward scores task {task_id}, but `prompt` does not ask it: the model would learn to "
                f"answer a question it was not asked. Put the task's instruction in the prompt: {task.instruction!r}.",
            )
        ]
    return []


def _prompt_text(prompt: Any) -> str:
    """What a prompt asks: its text, or a conversation's turns one after another."""
    if isinstance(prompt, list):
        return " ".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return str(prompt)


def _words(text: str) -> str:
    return " ".join(text.split())


def check_verifier(verifier: Any, *, has_task_id: bool, deterministic: bool) -> list[Issue]:
    """The `verifier` object as the trainer reads it: an inline check (`exact_match` with `expected`, `command`
    with a `check` and optional `files`), or an environment task by id (`terminal_task`, or no kind); a kind
    nothing can score is refused here rather than when the first reward is asked for."""
    if not isinstance(verifier, dict):
        return [("verifier", "wrong_type", f"`verifier` is a {json_type(verifier)}; make it an object.")]
    issues = check_verifier_kind(verifier, deterministic=deterministic)
    if issues:
        return issues
    kind = verifier.get("kind", "terminal_task")
    if "task_id" in verifier:
        issues += check_text(verifier, "task_id", prefix="verifier.")
    if kind == "exact_match":
        return issues + _inline_text(verifier, "expected", "the text a completion must match")
    if kind == "command":
        return (
            issues + _inline_text(verifier, "check", "the shell check run after the model's command") + _files(verifier)
        )
    if "task_id" not in verifier and not has_task_id:
        issues.append(("verifier.task_id", "missing_verifier", "Add `verifier.task_id` naming the environment task."))
    return issues


def _inline_text(verifier: dict[str, Any], name: str, what: str) -> list[Issue]:
    if name not in verifier:
        return [(f"verifier.{name}", "missing_verifier", f"Add `verifier.{name}`: {what}.")]
    return check_text(verifier, name, prefix="verifier.")


def _files(verifier: dict[str, Any]) -> list[Issue]:
    files = verifier.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return [("verifier.files", "wrong_type", "`verifier.files` maps file names to their text contents.")]
    return []


def check_verifier_kind(verifier: dict[str, Any], *, deterministic: bool) -> list[Issue]:
    """A known `kind` the trainer can score, and for rlvr nothing that declares itself nondeterministic."""
    kind, flag = verifier.get("kind"), verifier.get("deterministic", True)
    if "kind" in verifier and kind not in DETERMINISTIC_KINDS + NONDETERMINISTIC_KINDS:
        known = ", ".join(DETERMINISTIC_KINDS)
        return [("verifier.kind", "bad_verifier", f"Verifier kind {kind!r} is unknown; use one of {known}.")]
    if not isinstance(flag, bool):
        return [("verifier.deterministic", "wrong_type", "`verifier.deterministic` must be true or false.")]
    if deterministic and kind in NONDETERMINISTIC_KINDS:
        fix = "rlvr needs one that is: use kind command or exact_match, or train with grpo"
        return [("verifier.kind", "nondeterministic_verifier", f"Verifier kind {kind!r} is not deterministic; {fix}.")]
    if deterministic and not flag:
        fix = "rlvr needs one that is: use kind command or exact_match, or train with grpo"
        return [("verifier.deterministic", "nondeterministic_verifier", f"The verifier declares itself "
                 f"nondeterministic; {fix}.")]  # fmt: skip
    if kind in NONDETERMINISTIC_KINDS:
        return [
            (
                "verifier.kind",
                "bad_verifier",
                f"Verifier kind {kind!r} has no runner in this BashGym: nothing would score it. Use "
                f"{', '.join(DETERMINISTIC_KINDS)}.",
            )
        ]
    return []


def check_distillation(row: dict[str, Any], *, has_teacher_model: bool) -> list[Issue]:
    """distillation: a prompt, and the approved teacher output on the row or a pinned teacher model."""
    issues = check_prompt(row)
    if "teacher_response" in row:
        return issues + check_text(row, "teacher_response")
    if has_teacher_model:
        return issues
    return [
        *issues,
        (
            "teacher_response",
            "missing_teacher",
            "Add `teacher_response` (the approved teacher output) to the row, or pin the teacher with --teacher-model.",
        ),
    ]


SESSION_TEXT_FIELDS = ("record_id", "session_id", "original_context", "hinted_context", "hint_text", "target_text")


def check_session_distillation(row: dict[str, Any]) -> list[Issue]:
    """session_distillation: ids, contexts, a target span that matches its text, the mask policy, confidence."""
    issues: list[Issue] = []
    for name in SESSION_TEXT_FIELDS:
        issues += check_text(row, name)
    issues += check_step_index(row)
    issues += check_span(row)
    issues += check_policy(row)
    issues += check_confidence(row)
    return issues


def check_step_index(row: dict[str, Any]) -> list[Issue]:
    """`step_index` is an integer >= 0."""
    if "step_index" not in row:
        return [("step_index", "missing_field", "Add `step_index`, the 0-based step of the session this record is.")]
    value = row["step_index"]
    if not is_int(value):
        return [("step_index", "wrong_type", f"`step_index` is a {json_type(value)}; make it an integer >= 0.")]
    if value < 0:
        return [("step_index", "out_of_range", f"`step_index` is {value}; steps count from 0.")]
    return []


def check_span(row: dict[str, Any]) -> list[Issue]:
    """`target_span` is {start, end} and hinted_context[start:end] is exactly target_text."""
    span = row.get("target_span")
    if span is None:
        return [("target_span", "missing_field", "Add `target_span` ({start, end}) locating target_text.")]
    if not isinstance(span, dict):
        return [("target_span", "wrong_type", f"`target_span` is a {json_type(span)}; make it {{start, end}}.")]
    issues: list[Issue] = [
        (f"target_span.{end}", "wrong_type", f"`target_span.{end}` must be an integer character offset.")
        for end in ("start", "end")
        if not is_int(span.get(end))
    ]
    context, target = row.get("hinted_context"), row.get("target_text")
    if issues or not (isinstance(context, str) and isinstance(target, str)):
        return issues  # a field the span depends on is already reported
    return check_span_text(span["start"], span["end"], context, target)


def check_span_text(start: int, end: int, context: str, target: str) -> list[Issue]:
    """The span lies inside the context and covers exactly the target text."""
    if not 0 <= start < end <= len(context):
        problem = f"[{start}, {end}) is not inside hinted_context ({len(context)} characters)"
    elif context[start:end] != target:
        problem = f"hinted_context[{start}:{end}] is {excerpt(context[start:end])}, not target_text {excerpt(target)}"
    else:
        return []
    found = context.find(target)
    where = f"target_text occurs at [{found}, {found + len(target)})" if found >= 0 else "target_text is not in it"
    fix = "Recompute target_span in characters (code points), not bytes"
    return [("target_span", "span_mismatch", f"target_span {problem}; {where}. {fix}.")]


def check_policy(row: dict[str, Any]) -> list[Issue]:
    """`loss_mask.policy` is target_span_only: only the target span carries loss."""
    mask = row.get("loss_mask")
    if not isinstance(mask, dict):
        code: ErrorCode = "missing_field" if mask is None else "wrong_type"
        return [("loss_mask", code, f'Set `loss_mask` to {{"policy": "{SPAN_POLICY}"}}.')]
    policy = mask.get("policy")
    if policy != SPAN_POLICY:
        return [("loss_mask.policy", "bad_policy", f"`loss_mask.policy` is {policy!r}; set it to {SPAN_POLICY!r}.")]
    return []


def check_confidence(row: dict[str, Any]) -> list[Issue]:
    """`reader_confidence` is a number in [0, 1]."""
    if "reader_confidence" not in row:
        return [("reader_confidence", "missing_field", "Add `reader_confidence`, a number in [0, 1].")]
    value = row["reader_confidence"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [("reader_confidence", "wrong_type", f"`reader_confidence` is a {json_type(value)}; use a number.")]
    if not 0.0 <= value <= 1.0:  # also false for NaN
        return [("reader_confidence", "confidence_range", f"`reader_confidence` is {value}; use a number in [0, 1].")]
    return []


def check_prompt(row: dict[str, Any]) -> list[Issue]:
    """`prompt` is a non-empty string or a list of {role, content} messages."""
    prompt = row.get("prompt")
    if isinstance(prompt, list):
        return check_messages(prompt, "prompt", needs_assistant=False)
    if prompt is None or isinstance(prompt, str):
        return check_text(row, "prompt")
    return [("prompt", "wrong_type", f"`prompt` is a {json_type(prompt)}; make it a string or a messages list.")]


def check_messages(messages: Any, field: str, *, needs_assistant: bool) -> list[Issue]:
    """A non-empty list of {role, content} turns; with needs_assistant, one of them the assistant's."""
    if not isinstance(messages, list):
        return [(field, "wrong_type", f"`{field}` is a {json_type(messages)}; make it a list of {{role, content}}.")]
    if not messages:
        return [(field, "empty_text", f"`{field}` is an empty list; add the conversation's turns or drop the row.")]
    issues: list[Issue] = []
    for index, message in enumerate(messages):
        issues += check_message(message, f"{field}.{index}")
    roles = {m.get("role") for m in messages if isinstance(m, dict)}
    if needs_assistant and "assistant" not in roles:
        issues.append((field, "no_assistant_turn", f"`{field}` has no assistant turn to learn from; add one."))
    return issues


def check_message(message: Any, field: str) -> list[Issue]:
    """One turn: a known role and non-empty string content."""
    if not isinstance(message, dict):
        return [(field, "wrong_type", f"`{field}` is a {json_type(message)}; make it {{role, content}}.")]
    issues: list[Issue] = []
    role = message.get("role")
    if role is None:
        issues.append((f"{field}.role", "missing_field", f"Add `role` ({', '.join(ROLES)})."))
    elif role not in ROLES:
        issues.append((f"{field}.role", "bad_role", f"Role {role!r} is not one of {', '.join(ROLES)}; rename it."))
    return issues + check_text(message, "content", prefix=f"{field}.")


def check_text(row: dict[str, Any], name: str, *, prefix: str = "") -> list[Issue]:
    """`row[name]` is present and a string with something besides whitespace."""
    field = prefix + name
    if name not in row or row[name] is None:
        return [(field, "missing_field", f"Add `{field}` (a non-empty string) to the row.")]
    value = row[name]
    if not isinstance(value, str):
        return [(field, "wrong_type", f"`{field}` is a {json_type(value)}; make it a string.")]
    if not value.strip():
        return [(field, "empty_text", f"`{field}` is empty; fill it in or drop the row.")]
    return []


def is_int(value: Any) -> bool:
    """A JSON integer (true and false are not integers here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    match value:
        case None:
            return "null"
        case bool():
            return "boolean"
        case int() | float():
            return "number"
        case str():
            return "string"
        case list():
            return "array"
        case dict():
            return "object"
    return type(value).__name__


def excerpt(text: str, limit: int = 40) -> str:
    """A short repr of text for a message."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


class _Collector:
    """Keeps the first max_errors problems and counts all of them."""

    def __init__(self, file: str, max_errors: int) -> None:
        self.file = file
        self.max_errors = max(0, max_errors)
        self.errors: list[ContractError] = []
        self.counts: Counter[str] = Counter()

    def add(self, line: int, issues: list[Issue]) -> None:
        for field, code, message in issues:
            self.counts[code] += 1
            if len(self.errors) < self.max_errors:
                self.errors.append(ContractError(file=self.file, line=line, field=field, code=code, message=message))

    def report(self, method: str, rows: int) -> ContractReport:
        total = sum(self.counts.values())
        return ContractReport(
            file=self.file,
            method=method,
            rows=rows,
            errors=self.errors,
            truncated=total > len(self.errors),
            summary=dict(sorted(self.counts.items())),
            ok=total == 0,
        )


def format_report(report: ContractReport) -> str:
    """Human text: one "FILE:LINE field: message [code]" line per error, then a summary line."""
    lines = [format_error(error) for error in report.errors]
    if report.truncated:
        lines.append(f"(only the first {len(report.errors)} errors are listed; fix them and validate again)")
    lines.append(summary_line(report))
    return "\n".join(lines)


def format_error(error: ContractError) -> str:
    """One error as FILE:LINE field: message [code]; a whole-file error has no line, a whole-row one no field."""
    where = f"{error.file}:{error.line}" if error.line else error.file
    field = f" {error.field}" if error.field else ""
    return f"{where}{field}: {error.message} [{error.code}]"


def summary_line(report: ContractReport) -> str:
    """'N rows, M errors (code: count, ...)', most frequent code first."""
    total = sum(report.summary.values())
    line = f"{report.rows} rows, {total} errors"
    if not total:
        return line
    by_count = sorted(report.summary.items(), key=lambda item: (-item[1], item[0]))
    return f"{line} ({', '.join(f'{code}: {count}' for code, count in by_count)})"
