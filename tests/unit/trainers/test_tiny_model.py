"""The tiny model builder: loadable offline, usable for chat training, and byte-identical per seed."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bashgym.trainers.tiny import (
    ASSISTANT_MARKER,
    BOS_TOKEN,
    EOS_TOKEN,
    MODEL_MAX_LENGTH,
    PAD_TOKEN,
    ROLE_MARKERS,
    SPECIAL_TOKENS,
    build_tiny,
)
from jinja2 import TemplateError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from trl import chat_template_utils

from tests.support.factories import TINY_CONFIG_DIGEST

pytestmark = pytest.mark.timeout(30)

CHAT = [
    {"role": "system", "content": "You write one bash command."},
    {"role": "user", "content": "Count the lines in notes.txt"},
    {"role": "assistant", "content": "wc -l notes.txt"},
]


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("student"))


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("teacher"), teacher=True)


@pytest.fixture(scope="module")
def tokenizer(student_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(student_dir, local_files_only=True)


@pytest.fixture(scope="module")
def student(student_dir: Path) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(student_dir, local_files_only=True)


def digests(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def count_parameters(model: PreTrainedModel) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def test_student_loads_by_path_with_the_requested_shape(
    student_dir: Path, student: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    config = student.config
    assert type(student).__name__ == "LlamaForCausalLM"
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (64, 2, 128)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert config.max_position_embeddings == MODEL_MAX_LENGTH
    assert config.tie_word_embeddings is False
    assert config.vocab_size == len(tokenizer)
    assert 512 <= len(tokenizer) <= 1024
    assert (student_dir / "model.safetensors").is_file()
    assert not list(student_dir.glob("*.bin"))


def test_tokenizer_has_special_tokens_and_training_settings(tokenizer: PreTrainedTokenizerBase) -> None:
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)
    assert tokenizer.unk_token is not None
    assert tokenizer.model_max_length == MODEL_MAX_LENGTH
    assert tokenizer.padding_side == "right"
    for token in SPECIAL_TOKENS:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1


def test_generation_config_names_eos_and_pad(student: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    assert student.generation_config.eos_token_id == tokenizer.eos_token_id
    assert student.generation_config.pad_token_id == tokenizer.pad_token_id


def test_any_text_round_trips_through_the_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    text = "awk -F, '{s += $2} END {print s}' données.csv  # 🚀 ünïcode\n\ttab"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == text


def test_chat_template_renders_role_markers_and_eos(tokenizer: PreTrainedTokenizerBase) -> None:
    rendered = tokenizer.apply_chat_template(CHAT, tokenize=False)
    assert rendered == (
        "<s><|system|>\nYou write one bash command.\n<|user|>\nCount the lines in notes.txt\n"
        "<|assistant|>\nwc -l notes.txt</s>"
    )
    prompt = tokenizer.apply_chat_template(CHAT[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|user|>\nCount the lines in notes.txt\n<|assistant|>\n")


def test_chat_tokenizes_with_single_id_markers_and_a_prefix_prompt(tokenizer: PreTrainedTokenizerBase) -> None:
    full = tokenizer.apply_chat_template(CHAT, tokenize=True, return_dict=True)["input_ids"]
    prompt = tokenizer.apply_chat_template(CHAT[:2], tokenize=True, return_dict=True, add_generation_prompt=True)
    marker_ids = tokenizer.convert_tokens_to_ids(list(ROLE_MARKERS))
    assert set(marker_ids) <= set(full)
    assert full[: len(prompt["input_ids"])] == prompt["input_ids"]
    assert full[-1] == tokenizer.eos_token_id


def test_assistant_mask_covers_the_answer_and_its_eos(tokenizer: PreTrainedTokenizerBase) -> None:
    # TRL's assistant_only_loss trains on exactly these tokens, so the model also learns to stop.
    out = tokenizer.apply_chat_template(CHAT, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    masked = [token for token, keep in zip(out["input_ids"], out["assistant_masks"], strict=True) if keep]
    assert tokenizer.decode(masked) == "wc -l notes.txt" + EOS_TOKEN
    assert tokenizer.convert_tokens_to_ids(ASSISTANT_MARKER) not in masked


def test_chat_template_meets_trl_assistant_only_loss_checks(tokenizer: PreTrainedTokenizerBase) -> None:
    assert chat_template_utils.has_generation_markers(tokenizer.chat_template)
    assert chat_template_utils.is_chat_template_stop_token_trained(tokenizer)


def test_chat_template_rejects_an_unknown_role(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(TemplateError, match="Unsupported chat role tool"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_forward_pass_on_a_chat_gives_finite_logits(
    student: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    ids = tokenizer.apply_chat_template(CHAT, tokenize=True, return_dict=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = student(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()


def test_two_builds_with_the_same_seed_are_byte_identical(student_dir: Path, tmp_path: Path) -> None:
    again = digests(build_tiny(tmp_path / "again", seed=0))
    assert again == digests(student_dir)
    assert "model.safetensors" in again


def test_another_seed_changes_weights_but_not_the_tokenizer(student_dir: Path, tmp_path: Path) -> None:
    first, other = digests(student_dir), digests(build_tiny(tmp_path / "seed1", seed=1))
    assert other["model.safetensors"] != first["model.safetensors"]
    assert other["tokenizer.json"] == first["tokenizer.json"]


def test_saved_files_carry_no_path_or_transformers_version(student_dir: Path) -> None:
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        text = (student_dir / name).read_text()
        assert "transformers_version" not in text
        assert str(student_dir) not in text


def test_teacher_shares_the_vocabulary_and_is_larger(
    teacher_dir: Path, student: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, local_files_only=True)
    teacher_tokenizer = AutoTokenizer.from_pretrained(teacher_dir, local_files_only=True)
    assert teacher_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert teacher.config.vocab_size == student.config.vocab_size
    assert teacher.config.hidden_size > student.config.hidden_size
    assert count_parameters(teacher) > count_parameters(student)


# Most of this test is the child interpreter importing torch and transformers (about 10 s here),
# so it gets room for a slow CI machine.
@pytest.mark.timeout(90)
def test_cli_builds_the_same_model_and_prints_a_json_summary(student_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    # A fresh process also checks determinism across interpreters (hash seeds, thread pools).
    done = subprocess.run(
        [sys.executable, "-m", "bashgym.trainers.tiny", "--out", str(out), "--seed", "0"],
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["out_dir"] == str(out)
    assert summary["vocab_size"] == len(AutoTokenizer.from_pretrained(out, local_files_only=True))
    assert summary["parameters"] > 0
    assert digests(out) == digests(student_dir)


def test_the_task_tokenizer_knows_the_suites_words_and_fits_its_prompts() -> None:
    from bashgym.trainers.environments.terminal_tasks import default_suite, task_prompt
    from bashgym.trainers.tiny import TASK_MAX_LENGTH, build_task_tokenizer

    tokenizer = build_task_tokenizer()
    assert tokenizer.model_max_length == TASK_MAX_LENGTH
    for word in ("inventory", "payroll", "quartz"):
        assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) <= 2, word
    longest = max(len(tokenizer(task_prompt(t), add_special_tokens=False)["input_ids"]) for t in default_suite().tasks)
    assert longest < 512, "the evaluation suite's prompts fit with room for the answer"


def test_the_students_config_digest_is_the_one_test_contexts_state(student_dir: Path) -> None:
    # Launch holds a new model version's model_config_digest to base_model's config.json: the factories' default
    # context states this one, so it must stay the file's (a transformers upgrade that rewrites it changes both).
    assert hashlib.sha256((student_dir / "config.json").read_bytes()).hexdigest() == TINY_CONFIG_DIGEST
