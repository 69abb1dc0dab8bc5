"""Build a deterministic tiny Llama-style model and tokenizer, offline, in seconds.

Tests and the e2e story train real models on the CPU without a model hub, so they build one here:
a byte-level BPE tokenizer trained on the bundled bash-task corpus, and a randomly initialised
`LlamaForCausalLM` saved as an ordinary Hugging Face directory. The student and the `--teacher`
share one tokenizer (the tokenizer does not depend on the seed), so distillation between them works.

    python -m bashgym.trainers.tiny --out DIR [--teacher] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS_PATH = Path(__file__).resolve().parent / "corpus" / "bash_tasks.txt"

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
SYSTEM_MARKER = "<|system|>"
USER_MARKER = "<|user|>"
ASSISTANT_MARKER = "<|assistant|>"
ROLE_MARKERS = (SYSTEM_MARKER, USER_MARKER, ASSISTANT_MARKER)
# The order fixes the ids: <pad>=0, <unk>=1, <s>=2, </s>=3, <|system|>=4, <|user|>=5, <|assistant|>=6.
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, *ROLE_MARKERS)

# Counts the special tokens too. It fills on the bundled corpus; a smaller one could leave it short.
TOKENIZER_VOCAB_SIZE = 768
MODEL_MAX_LENGTH = 512

# The assistant's content and its </s> sit inside {% generation %}: TRL's assistant_only_loss needs
# the markers, and it warns unless the end-of-turn token is in the loss, or the model never learns
# to stop. Nothing follows </s>, so a prompt rendered with add_generation_prompt is a token prefix
# of the same conversation with the answer appended.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|assistant|>\\n' }}"
    "{%- generation %}{{- message['content'] + eos_token }}{%- endgeneration %}"
    "{%- elif message['role'] == 'system' or message['role'] == 'user' %}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
    "{%- else %}"
    "{{- raise_exception('Unsupported chat role ' + message['role'] + '; use system, user or assistant.') }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"
)

# Written by transformers into config.json and generation_config.json as metadata only; dropping it
# keeps a build byte-identical across transformers patch releases.
VERSION_FIELD = "transformers_version"


@dataclass(frozen=True)
class TinyShape:
    """The size of one tiny model; the vocabulary comes from the tokenizer."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int


# The model that learns the terminal tasks on a CPU in minutes (bashgym demo, campaign tests): wide enough to
# copy file names and values from the prompt, with a tokenizer that knows the suite's words.
TASK_SHAPE = TinyShape(
    hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256
)
TASK_VOCAB_SIZE = 1024
TASK_MAX_LENGTH = 1024
# The tokenizer of the task model also reads prompts and gold commands of these suite seeds (never seed 0,
# the shipped evaluation suite): file stems and words become single tokens, prompts half as long.
TASK_TOKENIZER_SEEDS = (1, 2, 3)
STUDENT_SHAPE = TinyShape(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128
)
TEACHER_SHAPE = TinyShape(
    hidden_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=192
)


def train_tokenizer(corpus: str, vocab_size: int = TOKENIZER_VOCAB_SIZE) -> Tokenizer:
    """Train the byte-level BPE on `corpus`; the same text always gives the same merges."""
    tokenizer = Tokenizer(models.BPE())
    # Byte level: every string, emoji included, encodes without <unk> and decodes back unchanged.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # trim_offsets=False keeps character offsets exact, which the assistant-token mask relies on.
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Chat turns start an instruction at the beginning of a line, not after the corpus's "# ", so
    # the merges learn "Count" rather than only " Count".
    lines = [line.removeprefix("# ") for line in corpus.splitlines()]
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return tokenizer


def wrap_tokenizer(tokenizer: Tokenizer, max_length: int = MODEL_MAX_LENGTH) -> PreTrainedTokenizerFast:
    """Wrap the trained tokenizer with its special tokens, length limit and chat template."""
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        extra_special_tokens=list(ROLE_MARKERS),
        model_max_length=max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The tokenizer every tiny model shares, trained on the bundled corpus."""
    return wrap_tokenizer(train_tokenizer(CORPUS_PATH.read_text(encoding="utf-8")))


def build_task_tokenizer() -> PreTrainedTokenizerFast:
    """The task model's tokenizer: the same recipe on the corpus plus the task text of TASK_TOKENIZER_SEEDS."""
    from bashgym.trainers.environments.terminal_tasks import generate_suite, task_prompt

    task_text = [
        text
        for seed in TASK_TOKENIZER_SEEDS
        for t in generate_suite(seed=seed, per_family=20)
        for text in (task_prompt(t), t.gold)
    ]
    corpus = CORPUS_PATH.read_text(encoding="utf-8") + "\n" + "\n".join(task_text)
    return wrap_tokenizer(train_tokenizer(corpus, TASK_VOCAB_SIZE), max_length=TASK_MAX_LENGTH)


def llama_config(shape: TinyShape, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    """A Llama config of `shape` whose vocabulary, length and special ids match `tokenizer`."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        intermediate_size=shape.intermediate_size,
        max_position_embeddings=int(tokenizer.model_max_length),
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def init_model(config: LlamaConfig, *, seed: int) -> LlamaForCausalLM:
    """A randomly initialised model; the same config and seed give the same weights."""
    # fork_rng: seeding here must not reset the random state of a caller that builds in-process.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    return model


def drop_version_field(path: Path) -> None:
    """Rewrite the JSON file at `path` without the transformers version it records."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop(VERSION_FIELD, None)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def save_model(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    """Write weights (safetensors), configs and tokenizer files into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    for name in ("config.json", "generation_config.json"):
        drop_version_field(out_dir / name)


def count_parameters(model: torch.nn.Module) -> int:
    """The number of weights in `model`."""
    return sum(parameter.numel() for parameter in model.parameters())


def build_tiny(out_dir: Path, *, teacher: bool = False, task: bool = False, seed: int = 0) -> Path:
    """Build the tiny student (or teacher, or task model) into `out_dir` and return `out_dir`."""
    tokenizer = build_task_tokenizer() if task else build_tokenizer()
    shape = TASK_SHAPE if task else TEACHER_SHAPE if teacher else STUDENT_SHAPE
    model = init_model(llama_config(shape, tokenizer), seed=seed)
    save_model(model, tokenizer, out_dir)
    return out_dir


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Read the command line of `python -m bashgym.trainers.tiny`."""
    parser = argparse.ArgumentParser(
        prog="python -m bashgym.trainers.tiny", description="Build the deterministic tiny model."
    )
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model into")
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--teacher", action="store_true", help="build the larger teacher instead of the student")
    role.add_argument("--task", action="store_true", help="build the task model that learns the terminal tasks")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Build one tiny model and print a one-line JSON summary."""
    args = parse_args(argv)
    started = time.monotonic()
    out_dir = build_tiny(args.out, teacher=args.teacher, task=args.task, seed=args.seed)
    # Reading the saved config back reports what a trainer will actually load; the meta device
    # counts the weights without allocating them.
    config = LlamaConfig.from_pretrained(out_dir)
    with torch.device("meta"):
        parameters = count_parameters(LlamaForCausalLM(config))
    summary = {
        "out_dir": str(out_dir),
        "role": "teacher" if args.teacher else "task" if args.task else "student",
        "seed": args.seed,
        "parameters": parameters,
        "vocab_size": config.vocab_size,
        "build_s": round(time.monotonic() - started, 2),
    }
    print(json.dumps(summary), file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
