"""Dataset contracts refuse rows a strategy cannot train on, naming file, line and field; the CLI exits 0 or 7."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import bashgym.cli.training  # noqa: F401  (registers `bashgym training validate`)
import pytest
from bashgym.cli import main as cli
from bashgym.trainers.contracts.datasets import ContractReport, format_report, validate_dataset

HINTED = "$ ls\nREADME.md\n# hint: check the path first\n$ cat README.md\n"
TARGET = "$ cat README.md"
START = HINTED.index(TARGET)


def write_jsonl(tmp_path: Path, rows: list[Any], name: str = "data.jsonl") -> Path:
    """Write rows one per line; a str row is written verbatim (for malformed lines)."""
    path = tmp_path / name
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def codes(report: ContractReport) -> list[tuple[int, str, str]]:
    return [(e.line, e.field, e.code) for e in report.errors]


def session_row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "record_id": "rec-1",
        "session_id": "sess-1",
        "step_index": 3,
        "original_context": "$ ls\nREADME.md\n",
        "hinted_context": HINTED,
        "hint_text": "# hint: check the path first",
        "target_text": TARGET,
        "target_span": {"start": START, "end": START + len(TARGET)},
        "loss_mask": {"policy": "target_span_only"},
        "reader_confidence": 0.8,
    }
    row.update(overrides)
    return row


CHAT = [{"role": "user", "content": "list files"}, {"role": "assistant", "content": "ls"}]

# The instructions of the training tasks the RL rows name: a row's prompt asks what its task scores.
COUNT_CATALOG = "Count the lines in catalog.txt. Print only the number."
COUNT_OTHER = "Count the lines in report.log that mention ERROR. Print only the number."
SUM_TASK = "Each line of notes.txt is a name and an amount; sum the amounts. Print just the number."

VALID: dict[str, list[dict[str, Any]]] = {
    "sft": [{"messages": [{"role": "system", "content": "be terse"}, *CHAT]}, {"text": "$ ls\nREADME.md"}],
    "dpo": [
        {"prompt": "list files", "chosen": "ls -la", "rejected": "rm -rf /"},
        {"prompt": CHAT[:1], "chosen": "ls", "rejected": "dir"},
    ],
    "grpo": [
        {"prompt": f"{COUNT_CATALOG}\nAnswer with one shell command.", "task_id": "count_lines-s1-000"},
        # The documented inline verifiers need no task id: the trainer never reads one for them.
        {"prompt": CHAT[:1], "verifier": {"kind": "exact_match", "expected": "ls"}},
        {"prompt": "count", "verifier": {"kind": "command", "files": {"a.txt": "x\n"}, "check": "test -s a.txt"}},
        {
            "prompt": [{"role": "user", "content": SUM_TASK}],
            "verifier": {"kind": "terminal_task", "task_id": "sum_column-s2-004"},
        },
    ],
    "rlvr": [
        {"prompt": COUNT_OTHER, "task_id": "count_lines-s1-001"},
        {"prompt": "sum", "verifier": {"task_id": "t2", "kind": "exact_match", "expected": "5", "deterministic": True}},
    ],
    "distillation": [{"prompt": "explain ls", "teacher_response": "ls lists a directory."}],
    "session_distillation": [session_row(), session_row(step_index=0, reader_confidence=1)],
}


@pytest.mark.parametrize("strategy", sorted(VALID))
def test_valid_file_passes(tmp_path: Path, strategy: str) -> None:
    path = write_jsonl(tmp_path, [*VALID[strategy], ""])  # a trailing blank line is skipped
    report = validate_dataset(strategy, path)
    assert report.ok, format_report(report)
    assert report.rows == len(VALID[strategy])
    assert report.errors == [] and report.summary == {} and not report.truncated
    assert format_report(report) == f"{len(VALID[strategy])} rows, 0 errors"


def test_malformed_lines_name_their_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, [{"text": "ok"}, "", "{not json", "[1, 2]", '"just a string"', {"text": "ok"}])
    report = validate_dataset("sft", path)
    assert codes(report) == [(3, "", "invalid_json"), (4, "", "not_an_object"), (5, "", "not_an_object")]
    assert report.rows == 2 and not report.ok
    assert report.summary == {"invalid_json": 1, "not_an_object": 2}


def test_bad_utf8_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\n')
    assert codes(validate_dataset("sft", path)) == [(2, "", "invalid_encoding")]


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    report = validate_dataset("sft", path)
    assert codes(report) == [(0, "", "empty_file")]
    assert not report.ok and report.rows == 0
    assert format_report(report).splitlines()[0].startswith(f"{path}: ")


def test_missing_file_raises_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl does not exist"):
        validate_dataset("sft", tmp_path / "nope.jsonl")


def test_unknown_strategy_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use one of sft, dpo"):
        validate_dataset("ppo", write_jsonl(tmp_path, [{"text": "x"}]))


def test_sft_rows(tmp_path: Path) -> None:
    rows = [
        {"prompt": "no messages or text"},
        {"text": "   "},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "human", "content": "hi"}, {"role": "assistant", "content": ""}]},
        {"messages": "hi"},
        {"messages": [{"role": "assistant"}, "turn"]},
        {"messages": []},
    ]
    report = validate_dataset("sft", write_jsonl(tmp_path, rows))
    assert codes(report) == [
        (1, "messages", "missing_field"),
        (2, "text", "empty_text"),
        (3, "messages", "no_assistant_turn"),
        (4, "messages.0.role", "bad_role"),
        (4, "messages.1.content", "empty_text"),
        (5, "messages", "wrong_type"),
        (6, "messages.0.content", "missing_field"),
        (6, "messages.1", "wrong_type"),
        (7, "messages", "empty_text"),
    ]
    assert report.rows == 0


def test_dpo_rows(tmp_path: Path) -> None:
    rows = [
        {"prompt": "p", "chosen": "same answer", "rejected": "  same answer "},
        {"prompt": "p", "chosen": "x" * 500, "rejected": "no"},
        {"prompt": "p", "chosen": "yes, do it", "rejected": "no"},  # short: the ratio guard does not apply
        {"chosen": "a", "rejected": ""},
        {"prompt": 3, "chosen": ["a"], "rejected": "b"},
    ]
    report = validate_dataset("dpo", write_jsonl(tmp_path, rows))
    assert codes(report) == [
        (1, "rejected", "identical_pair"),
        (2, "", "length_ratio"),
        (4, "prompt", "missing_field"),
        (4, "rejected", "empty_text"),
        (5, "prompt", "wrong_type"),
        (5, "chosen", "wrong_type"),
    ]
    assert report.rows == 1
    assert "500 characters" in report.errors[1].message


def test_grpo_needs_a_verifier_reference(tmp_path: Path) -> None:
    rows = [
        {"prompt": "p"},
        {"prompt": "p", "verifier": {"kind": "command"}},
        {"prompt": "p", "verifier": "run tests"},
        {"prompt": "p", "verifier": {"task_id": "t", "kind": "vibes"}},
        {"prompt": "p", "task_id": ""},
        {"prompt": "p", "verifier": {"kind": "exact_match"}},
        {"prompt": "p", "verifier": {"kind": "command", "check": "true", "files": {"a": 1}}},
        {"prompt": "p", "verifier": {"kind": "terminal_task"}},
        {"prompt": "p", "verifier": {"task_id": "t", "kind": "llm_judge"}},
    ]
    report = validate_dataset("grpo", write_jsonl(tmp_path, rows))
    assert codes(report) == [
        (1, "verifier", "missing_verifier"),
        (2, "verifier.check", "missing_verifier"),
        (3, "verifier", "wrong_type"),
        (4, "verifier.kind", "bad_verifier"),
        (5, "task_id", "empty_text"),
        (6, "verifier.expected", "missing_verifier"),
        (7, "verifier.files", "wrong_type"),
        (8, "verifier.task_id", "missing_verifier"),
        (9, "verifier.kind", "bad_verifier"),
    ]
    assert "no runner" in report.errors[-1].message, "a kind nothing scores is refused before the run"


def test_a_task_rows_prompt_must_ask_what_its_task_scores(tmp_path: Path) -> None:
    """Issue 51, item 11: a GRPO task_id row's prompt was never checked against the task's instruction."""
    rows = [
        {"prompt": "write a haiku about the sea", "task_id": "count_lines-s1-000"},
        {
            "prompt": [{"role": "user", "content": "sum it"}],
            "verifier": {"kind": "terminal_task", "task_id": "sum_column-s2-004"},
        },
        {"prompt": f"Please:  {COUNT_CATALOG}", "task_id": "count_lines-s1-000"},  # spacing apart, it asks the task
    ]
    report = validate_dataset("grpo", write_jsonl(tmp_path, rows))
    assert codes(report) == [(1, "prompt", "prompt_not_the_task"), (2, "prompt", "prompt_not_the_task")]
    assert COUNT_CATALOG in report.errors[0].message


def test_rlvr_refuses_nondeterministic_verifiers(tmp_path: Path) -> None:
    rows = [
        {"prompt": "p", "verifier": {"task_id": "t", "kind": "llm_judge"}},
        {"prompt": "p", "verifier": {"task_id": "t", "kind": "model"}},
        {"prompt": "p", "verifier": {"task_id": "t", "kind": "command", "deterministic": False}},
        {"prompt": "p", "task_id": "t", "verifier": {"deterministic": "yes"}},
    ]
    report = validate_dataset("rlvr", write_jsonl(tmp_path, rows))
    assert codes(report) == [
        (1, "verifier.kind", "nondeterministic_verifier"),
        (2, "verifier.kind", "nondeterministic_verifier"),
        (3, "verifier.deterministic", "nondeterministic_verifier"),
        (4, "verifier.deterministic", "wrong_type"),
    ]
    assert "grpo" in report.errors[0].message


def test_distillation_needs_a_teacher(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, [{"prompt": "p"}, {"prompt": "p", "teacher_response": ""}, {"teacher_response": "t"}])
    report = validate_dataset("distillation", path)
    assert codes(report) == [
        (1, "teacher_response", "missing_teacher"),
        (2, "teacher_response", "empty_text"),
        (3, "prompt", "missing_field"),
    ]
    pinned = validate_dataset("distillation", path, teacher_model="org/teacher-7b")
    assert codes(pinned) == [(2, "teacher_response", "empty_text"), (3, "prompt", "missing_field")]


def test_session_distillation_span_must_match_target_text(tmp_path: Path) -> None:
    rows = [
        session_row(target_span={"start": START + 1, "end": START + 1 + len(TARGET)}),
        session_row(target_span={"start": 0, "end": len(HINTED) + 5}),
        session_row(target_span={"start": 5, "end": 5}),
        session_row(target_span={"start": "0", "end": 4}),
        session_row(target_span=None),
    ]
    report = validate_dataset("session_distillation", write_jsonl(tmp_path, rows))
    assert codes(report) == [
        (1, "target_span", "span_mismatch"),
        (2, "target_span", "span_mismatch"),
        (3, "target_span", "span_mismatch"),
        (4, "target_span.start", "wrong_type"),
        (5, "target_span", "missing_field"),
    ]
    assert f"occurs at [{START}, {START + len(TARGET)})" in report.errors[0].message


def test_session_distillation_fields(tmp_path: Path) -> None:
    rows = [
        session_row(loss_mask={"policy": "all_tokens"}),
        session_row(reader_confidence=1.5),
        session_row(reader_confidence="high"),
        session_row(step_index=-1),
        session_row(step_index=True, hint_text=""),
        {k: v for k, v in session_row().items() if k not in ("record_id", "loss_mask")},
    ]
    report = validate_dataset("session_distillation", write_jsonl(tmp_path, rows))
    assert codes(report) == [
        (1, "loss_mask.policy", "bad_policy"),
        (2, "reader_confidence", "confidence_range"),
        (3, "reader_confidence", "wrong_type"),
        (4, "step_index", "out_of_range"),
        (5, "hint_text", "empty_text"),
        (5, "step_index", "wrong_type"),
        (6, "record_id", "missing_field"),
        (6, "loss_mask", "missing_field"),
    ]


def test_errors_are_capped_but_all_counted(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, [{"text": ""}] * 7 + ["nope"] * 3)
    report = validate_dataset("sft", path, max_errors=4)
    assert len(report.errors) == 4 and report.truncated
    assert report.summary == {"empty_text": 7, "invalid_json": 3}
    text = format_report(report)
    assert "only the first 4 errors" in text
    assert text.splitlines()[-1] == "0 rows, 10 errors (empty_text: 7, invalid_json: 3)"


def test_format_report_names_file_line_and_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, [{"text": "ok"}, {"messages": [{"role": "bot", "content": "x"}]}])
    lines = format_report(validate_dataset("sft", path)).splitlines()
    assert lines[0].startswith(f"{path}:2 messages.0.role: Role 'bot' is not one of")
    assert lines[0].endswith("[bad_role]")
    assert lines[-1] == "1 rows, 2 errors (bad_role: 1, no_assistant_turn: 1)"


def cli_env(tmp_path: Path) -> dict[str, str]:
    return {"BASHGYM_HOME": str(tmp_path / "home")}


def test_cli_exits_0_on_a_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path, VALID["dpo"])
    code = cli.run(["training", "validate", "--method", "dpo", "--dataset", str(path)], cli_env(tmp_path))
    assert code == 0
    assert capsys.readouterr().out.strip() == "2 rows, 0 errors"


def test_cli_exits_7_naming_file_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path, [*VALID["dpo"], {"prompt": "p", "chosen": "a", "rejected": "a"}])
    code = cli.run(["training", "validate", "--strategy", "dpo", "--dataset", str(path)], cli_env(tmp_path))
    captured = capsys.readouterr()
    assert code == 7
    assert f"{path}:3 rejected: " in captured.err and "[identical_pair]" in captured.err
    assert captured.out == ""


def test_cli_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path, [{"prompt": "p"}])
    argv = ["training", "validate", "--strategy", "distillation", "--dataset", str(path), "--json"]
    assert cli.run(argv, cli_env(tmp_path)) == 7
    body = json.loads(capsys.readouterr().out)
    assert body["ok"] is False and body["summary"] == {"missing_teacher": 1}
    assert body["errors"][0] | {"message": ""} == {
        "file": str(path),
        "line": 1,
        "field": "teacher_response",
        "code": "missing_teacher",
        "message": "",
    }
    assert cli.run([*argv, "--teacher-model", "org/teacher"], cli_env(tmp_path)) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_cli_missing_file_is_a_usage_error_with_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.jsonl"
    code = cli.run(["training", "validate", "--strategy", "sft", "--dataset", str(missing)], cli_env(tmp_path))
    assert code == 2
    err = capsys.readouterr().err
    assert f"no such file: {missing}" in err and err.startswith("usage: bashgym training validate")


def test_cli_unknown_strategy_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "x.jsonl"
    dataset.write_text("{}\n")
    code = cli.run(["training", "validate", "--strategy", "ppo", "--dataset", str(dataset)], cli_env(tmp_path))
    assert code == 2
    assert "invalid choice: 'ppo'" in capsys.readouterr().err
