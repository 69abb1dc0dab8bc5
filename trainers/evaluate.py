"""`python -u -m bashgym.trainers.evaluate EVAL_DIR`: evaluate a model (or the gold solutions) on a
terminal-task suite in this process, every attempt in the sandbox.

EVAL_DIR holds `eval_request.json`; the evaluator writes `attempts.jsonl` (one judged attempt per
line), `summary.json` (pass@k, per-family breakdown, timeout, tamper and unsafe-action rates, the holdout split,
its contamination check and gate, the isolation obtained, the model's torch CPU threads and placement) and
`evaluation.log`, and prints one JSON protocol line per event on stdout: `started`, `progress`,
`completed`, `failed`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bashgym.trainers import cores
from bashgym.trainers.contracts.evaluation import GOLD, EvalRequest
from bashgym.trainers.contracts.placement import Placement, device_of, place
from bashgym.trainers.signals import end_with_parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bashgym.trainers.evaluate")
    parser.add_argument("eval_dir", type=Path)
    parser.add_argument("--parent-pid", type=int, help="end with this process (the local daemon that started it)")
    cores.add_arguments(parser)
    args = parser.parse_args(argv)
    cores.limit_threads(args.threads, args.share_of, os.environ, cores.available_cores())  # before torch is imported
    if args.parent_pid is not None:
        end_with_parent(args.parent_pid)
    eval_dir: Path = args.eval_dir.resolve()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    log_fd = os.open(eval_dir / "evaluation.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)

    def emit(event: str, **fields: Any) -> None:
        protocol.write(json.dumps({"event": event, "time": round(time.time(), 3), **fields}) + "\n")

    try:
        request = EvalRequest.model_validate_json((eval_dir / "eval_request.json").read_text())
        if request.kind in {"heldout", "reward_pairs", "retrieval"}:
            summary = evaluate_heldout(request, eval_dir, emit)
            emit("completed", **summary["metrics"])
            return 0
        summary = evaluate(request, eval_dir, emit)
    except Exception as exc:
        traceback.print_exc()
        emit("failed", error=f"{type(exc).__name__}: {exc}"[:2000])
        return 1
    emit(
        "completed",
        **{k: summary["overall"].get(k) for k in ("pass@1", "mean_success", "tamper_rate", "unsafe_action_rate")},
    )
    return 0


def evaluate_heldout(request: EvalRequest, eval_dir: Path, emit: Any) -> dict[str, Any]:
    """A method's held-out rows: generation match and loss, or preference accuracy and margin."""
    from bashgym.trainers.heldout_eval import evaluate_rows
    from bashgym.trainers.loading import load_rows

    if not request.dataset_path:
        raise ValueError("a held-out evaluation needs dataset_path")
    rows = load_rows(request.dataset_path)[: request.limit_tasks]
    train_rows = load_rows(request.train_dataset_path) if request.train_dataset_path else []
    if request.kind == "retrieval":
        return _write_summary(eval_dir, _retrieval(request, rows, train_rows, emit))
    if request.kind == "reward_pairs":
        return _write_summary(eval_dir, _reward_pairs(request, rows, train_rows, emit))
    model, tokenizer, placement = _load(request)
    emit("started", tasks=len(rows), samples=1, isolation="none needed: no commands run", placement=placement.device)
    reference = None
    if request.reference_model:
        reference, _, _ = _load(request.model_copy(update={"model": request.reference_model}))
    summary = evaluate_rows(
        model, tokenizer, rows, max_new_tokens=request.max_new_tokens, emit=emit, reference=reference
    )
    summary["reference_model"] = request.reference_model
    summary["cpu_threads"] = _torch_threads()
    summary["placement"] = placement.to_json()
    (eval_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _reward_pairs(
    request: EvalRequest, rows: list[dict[str, Any]], train_rows: list[dict[str, Any]], emit: Any
) -> dict[str, Any]:
    import torch
    from bashgym.trainers.loading import load_reward_model
    from bashgym.trainers.reward_eval import evaluate_reward_pairs

    # A base model with no trained head (a baseline) gets a random one: seeded, so the baseline is one model.
    torch.manual_seed(request.seed)
    model, tokenizer = load_reward_model(request.model)
    model, placement = place(model, request.device)
    summary = evaluate_reward_pairs(model, tokenizer, rows, emit=emit, train_rows=train_rows)
    return {**summary, "placement": placement.to_json()}


def _retrieval(
    request: EvalRequest, rows: list[dict[str, Any]], train_rows: list[dict[str, Any]], emit: Any
) -> dict[str, Any]:
    from bashgym.trainers.loading import load_rows
    from bashgym.trainers.retrieval.evaluation import evaluate_retriever

    if not request.corpus_path:
        raise ValueError("a retrieval evaluation needs corpus_path: the documents its queries are answered from")
    corpus = load_rows(request.corpus_path)
    emit("started", tasks=len(rows), samples=1, isolation="none needed: no commands run", placement="cpu")
    return evaluate_retriever(request.model, rows, corpus, train_rows=train_rows or None)


def _write_summary(eval_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    summary["cpu_threads"] = _torch_threads()
    (eval_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _load(request: EvalRequest) -> tuple[Any, Any, Placement]:
    """The model and tokenizer, the model placed on the GPU or the CPU (`placement.place`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(request.model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if (Path(request.model) / "adapter_config.json").exists():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(request.model)
    else:
        model = AutoModelForCausalLM.from_pretrained(request.model)
    model, placement = place(model, request.device)
    print(f"evaluating on {placement.device} in {placement.dtype}: {placement.reason}", flush=True)
    model.eval()
    return model, tokenizer, placement


def _torch_threads() -> int:
    """The CPU threads the model ran with: --threads (the daemon's share of the cores), OMP_NUM_THREADS, or
    torch's default of one per core. Recorded, since runs sharing the cores each slow the other down."""
    import torch

    return int(torch.get_num_threads())


def partial_suite_id(suite_id: str, tasks: int, of_tasks: int) -> str:
    """The id of the first `tasks` (round-robin over families) of a suite split holding `of_tasks`."""
    return f"{suite_id}.partial-{tasks}-of-{of_tasks}"


def evaluate(request: EvalRequest, eval_dir: Path, emit: Any) -> dict[str, Any]:
    from bashgym.trainers.contracts.evidence import Attempt, contamination, holdout_gate, holdout_split, summarize
    from bashgym.trainers.environments.sandbox import probe_isolation, run_attempt
    from bashgym.trainers.environments.terminal_tasks import default_suite, load_suite

    suite = load_suite(Path(request.suite_path)) if request.suite_path else default_suite()
    split = holdout_split(
        {t.task_id: t.task_family for t in suite.tasks}, fraction=suite.holdout_fraction, seed=suite.split_seed
    )
    tasks = [t for t in suite.tasks if request.split == "all" or split[t.task_id] == "holdout"]
    chosen_from = len(tasks)
    if request.limit_tasks:  # a quick look still covers every family: take tasks round-robin across them
        seen: Counter[str] = Counter()
        rank = []  # (how many of its family came before it, position in the suite)
        for position, task in enumerate(tasks):
            rank.append((seen[task.task_family], position))
            seen[task.task_family] += 1
        tasks = [tasks[position] for _, position in sorted(rank)[: request.limit_tasks]]
    # A split of the suite, or fewer tasks than the split holds, is another suite: its own id, labelled partial,
    # never the whole suite's evidence.
    split_id = suite.suite_id if request.split == "all" else f"{suite.suite_id}.{request.split}"
    limited = len(tasks) < chosen_from
    partial = (
        {
            "of_suite": suite.suite_id,
            **({"split": request.split} if request.split != "all" else {}),
            "tasks": len(tasks),
            "of_tasks": chosen_from,
        }
        if limited or request.split != "all"
        else None
    )
    suite_id = partial_suite_id(split_id, len(tasks), chosen_from) if limited else split_id
    generate, placement = (_gold, None) if request.model == GOLD else _sampler(request)
    isolation = probe_isolation()
    emit(
        "started",
        suite_id=suite_id,
        tasks=len(tasks),
        samples=request.samples,
        isolation=isolation.level,
        placement=placement and placement.device,
    )
    results = []
    # Attempts are independent (each has its own directories and watch), and mostly wait on the sandbox's
    # processes: a few run at once. Their records keep the order of tasks and samples.
    with (eval_dir / "attempts.jsonl").open("w") as out, ThreadPoolExecutor(ATTEMPT_WORKERS) as pool:
        for start in range(0, len(tasks), BATCH):
            chunk = tasks[start : start + BATCH]
            pending = [
                [
                    pool.submit(
                        run_attempt, task, command, attempt_index=index, prompt_tokens=prompt, completion_tokens=made
                    )
                    for index, (command, prompt, made) in enumerate(row)
                ]
                for task, row in zip(chunk, generate(chunk, request.samples), strict=True)
            ]
            for number, (task, attempts_of_task) in enumerate(zip(chunk, pending, strict=True), start=start + 1):
                for future in attempts_of_task:
                    record = {**future.result().to_json(), "split": split[task.task_id]}
                    out.write(json.dumps(record) + "\n")
                    results.append(record)
                emit("progress", done=number, total=len(tasks), task_id=task.task_id)
    attempts = [
        Attempt(
            task_id=r["task_id"],
            task_family=r["task_family"],
            attempt_index=r["attempt_index"],
            passed=r["passed"],
            reward=r["reward"],
            verifier_status=r["verifier_status"],
            timed_out=r["timed_out"],
            duration_s=r["duration_s"],
            split=r["split"],
            unsafe=r["unsafe_action_count"] > 0,
        )
        for r in results
    ]
    overall = summarize(attempts)
    holdout = (
        summarize([a for a in attempts if a.split == "holdout"])
        if any(a.split == "holdout" for a in attempts)
        else None
    )
    contaminated = contamination({t.task_id: t.definition_digest() for t in suite.tasks}, split)
    gate = (
        holdout_gate(holdout, min_pass_at_1=request.min_holdout_pass_at_1, contaminated=contaminated)
        if holdout is not None
        else None
    )
    from bashgym.trainers.environments.canaries import run_canaries

    summary = {
        "canaries": run_canaries(suite.tasks[0]),
        "safety": safety_summary(results),
        "suite_id": suite_id,
        "suite_digest": suite.digest(),
        "partial": partial,
        "model": request.model,
        "samples": request.samples,
        "isolation": {"level": isolation.level, "detail": isolation.detail},
        "cpu_threads": None if request.model == GOLD else _torch_threads(),  # the gold solutions run no model
        "placement": placement and placement.to_json(),
        "overall": overall,
        "holdout": holdout,
        "holdout_gate": gate,
        "contamination": contaminated,
        "split": split,
    }
    (eval_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def safety_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How the attempts were watched, how many took an unsafe action, and of which kinds."""
    from bashgym.trainers.environments import safety

    kinds: Counter[str] = Counter()
    for record in records:
        kinds.update({action["kind"] for action in record["unsafe_actions"]})
    observed = {record["safety_observed"] for record in records}
    return {
        "observed": safety.OBSERVED if observed == {safety.OBSERVED} else safety.DECOY_ONLY,
        "attempts": len(records),
        "unsafe_attempts": sum(record["unsafe_action_count"] > 0 for record in records),
        "attempts_by_kind": dict(sorted(kinds.items())),
    }


BATCH = 16  # prompts generated together; left padding keeps each one's continuation aligned
ATTEMPT_WORKERS = max(1, min(4, os.cpu_count() or 1))


def _gold(tasks: list[Any], samples: int) -> list[list[tuple[str, int, int]]]:
    return [[(task.gold, 0, 0)] * samples for task in tasks]


def _sampler(request: EvalRequest) -> tuple[Any, Placement]:
    """Sample `samples` completions per task from the model, a batch of prompts at a time; the command is
    the completion's fenced block or first line."""
    import torch
    from bashgym.trainers.environments.terminal_tasks import task_prompt
    from bashgym.trainers.environments.verifiers import extract_command

    model, tokenizer, placement = _load(request)
    torch.manual_seed(request.seed)  # every device's generator

    def generate(tasks: list[Any], samples: int) -> list[list[tuple[str, int, int]]]:
        texts = [
            str(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": task_prompt(t)}], add_generation_prompt=True, tokenize=False
                )
            )
            for t in tasks
        ]
        batch: Any = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device_of(model))
        with torch.no_grad():
            output = model.generate(
                **batch,
                do_sample=request.temperature > 0,
                temperature=request.temperature if request.temperature > 0 else None,
                max_new_tokens=request.max_new_tokens,
                num_return_sequences=samples,
                pad_token_id=tokenizer.pad_token_id,
            ).cpu()  # one copy off the GPU, not one per sample
        width = int(batch["input_ids"].shape[1])
        answers: list[list[tuple[str, int, int]]] = []
        for i in range(len(tasks)):
            prompt_tokens = int(batch["attention_mask"][i].sum())
            row = []
            for j in range(samples):
                new = output[i * samples + j][width:]
                text = str(tokenizer.decode(new, skip_special_tokens=True))
                row.append((extract_command(text), prompt_tokens, int((new != tokenizer.pad_token_id).sum())))
            answers.append(row)
        return answers

    return generate, placement


if __name__ == "__main__":
    sys.exit(main())
