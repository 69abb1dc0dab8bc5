"""The retrieval environment that ships with BashGym: terminal-task instructions are the queries, documentation of
the shell commands their gold solutions use is the corpus.

The split is frozen by query: evaluation queries are the default suite's tasks (seed 0, every family), training
queries another seed's tasks of the same families, and a training query whose text is an evaluation query's is
dropped. The corpus is shared, as in any retrieval benchmark: the model is judged on finding the right document
for queries it never saw, and a document is what it searches, not an evaluation item. What would contaminate the
evaluation is an evaluation query (or its judged pair) in the training data, and that is what is checked
(trainers/retrieval/evaluation.py `contamination`). Unseen wording is judged by the hard slice: each query with
the words it shares with its positive taken out.

The main evaluation queries are unseen instances of the training queries' templates, answered by documents that
are training positives: its figure says how well the retriever learned those families, not how it meets a new
kind of query. eval.jsonl therefore holds a second slice after them (retrieval_heldout.py): queries from templates
of their own whose documents no training row holds, as positive or as hard negative, marked
`slice: heldout_templates` and reported beside the main figure.

Torch-free, like the terminal-task suite it is built from, so the daemon builds the split it evaluates on
(`shipped_retrieval_split`) without loading a model.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bashgym.trainers.contracts.retrieval import content_words, normalise_text
from bashgym.trainers.environments.retrieval_heldout import HELDOUT_COMMANDS, heldout_rows, is_heldout
from bashgym.trainers.environments.terminal_tasks import TerminalTask, default_suite, generate_suite

COMMAND_DOCS_PATH = Path(__file__).resolve().parent.parent / "corpus" / "command_docs.jsonl"
# Training tasks come from suite seed 1 + `seed`: never 0, the evaluation suite's.
TRAIN_SUITE_SEED = 1
# 24 cycles every family's variants (3 or 4 of them) evenly.
TRAIN_PER_FAMILY = 24
# A hard negative is drawn from the documents sharing the most words with the query, this many of them.
NEGATIVE_POOL = 3
FILES = ("corpus.jsonl", "train.jsonl", "eval.jsonl")

# The split's version, in the name of the directory a daemon builds it in: v2 added the held-out-template slice and
# kept its documents out of the training negatives, so a home holding v1 builds v2 beside it.
SHIPPED_SPLIT = "shipped-v2"

# Words that only wrap or feed the command that does the work: the `cd` and loop around a rename, the `tail`
# that drops a CSV header before a sort.
_WRAPPERS = frozenset({"cd", "for", "done"})
_HEADER_SKIP = ["tail", "-n", "+2"]
_STAGE_BREAK = re.compile(r"\|\||&&|;|\|")


@dataclass(frozen=True)
class CommandDoc:
    """One document of the corpus: what a shell command does."""

    doc_id: str
    command: str
    text: str


@dataclass(frozen=True)
class RetrievalSplit:
    """The corpus and both sides of the frozen split, as rows ready to write."""

    corpus: list[dict[str, str]]
    train: list[dict[str, str]]
    eval: list[dict[str, str]]
    families: dict[str, list[str]]
    train_seed: int
    dropped_train_rows: int


def load_command_docs(path: Path = COMMAND_DOCS_PATH) -> dict[str, CommandDoc]:
    """The command documents shipped with the product, by command name."""
    docs: dict[str, CommandDoc] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            docs[row["command"]] = CommandDoc(doc_id=row["doc_id"], command=row["command"], text=row["text"])
    return docs


def main_command(gold: str) -> str:
    """The command that does the work in a gold solution: the first command of its first stage that is not a
    wrapper (`cd`, a `for` loop's keywords) or a header skip (`tail -n +2`)."""
    for stage in _STAGE_BREAK.split(gold):
        words = stage.split()
        if words[:1] == ["do"]:
            words = words[1:]
        if not words or words[0] in _WRAPPERS or words[:3] == _HEADER_SKIP:
            continue
        return words[0]
    raise ValueError(f"Found no command in the gold solution {gold!r}; give the task a gold shell command.")


def positive_doc(task: TerminalTask, docs: Mapping[str, CommandDoc]) -> CommandDoc:
    """The document of the command that solves `task`."""
    command = main_command(task.gold)
    if command not in docs:
        raise ValueError(
            f"Task {task.task_id} is solved by {command!r}, which has no document in {COMMAND_DOCS_PATH.name}; "
            f'add a row {{"doc_id": "cmd-{command}", "command": "{command}", "text": ...}} there.'
        )
    return docs[command]


def _query_row(query_id: str, task: TerminalTask, doc: CommandDoc) -> dict[str, str]:
    return {
        "query_id": query_id,
        "query": task.instruction,
        "positive": doc.text,
        "positive_id": doc.doc_id,
        "family": task.task_family,
    }


def _hard_negative(query: str, candidates: Sequence[CommandDoc], rng: random.Random) -> CommandDoc:
    """One of the NEGATIVE_POOL documents that share the most words with the query: close, but wrong."""
    words = content_words(query)
    ranked = sorted(candidates, key=lambda doc: (-len(words & content_words(doc.text)), doc.doc_id))
    return rng.choice(ranked[:NEGATIVE_POOL])


def _eval_rows(docs: Mapping[str, CommandDoc]) -> list[dict[str, str]]:
    return [_query_row(t.task_id, t, positive_doc(t, docs)) for t in default_suite().tasks]


def _train_rows(
    docs: Mapping[str, CommandDoc], banned: set[str], *, train_seed: int, seed: int
) -> tuple[list[dict[str, str]], int]:
    """Rows of the training tasks, less those whose query text is in `banned` (an evaluation query's), and how
    many went."""
    # The held-out slice's documents are never a training negative either: its figure is on documents never trained on.
    negatives = [doc for command, doc in docs.items() if command not in HELDOUT_COMMANDS]
    rows, dropped = [], 0
    for task in generate_suite(seed=train_seed, per_family=TRAIN_PER_FAMILY):
        doc = positive_doc(task, docs)
        if normalise_text(task.instruction) in banned:
            dropped += 1
            continue
        query_id = f"{task.task_family}-s{train_seed}-{task.task_id.rsplit('-', 1)[1]}"
        rng = random.Random(f"{seed}:{query_id}")
        negative = _hard_negative(task.instruction, [d for d in negatives if d.doc_id != doc.doc_id], rng)
        rows.append({**_query_row(query_id, task, doc), "negative": negative.text})
    return rows, dropped


def retrieval_rows(*, seed: int = 0) -> RetrievalSplit:
    """The corpus and the frozen split in memory; `seed` picks the training tasks and their hard negatives."""
    if seed < 0:
        raise ValueError(f"seed is {seed}; give a seed >= 0 (training tasks use suite seed {TRAIN_SUITE_SEED} + seed).")
    docs = load_command_docs()
    families = tuple(sorted({t.task_family for t in default_suite().tasks}))
    eval_rows = [*_eval_rows(docs), *heldout_rows(docs)]
    banned = {normalise_text(row["query"]) for row in eval_rows}
    train_seed = TRAIN_SUITE_SEED + seed
    train_rows, dropped = _train_rows(docs, banned, train_seed=train_seed, seed=seed)
    corpus = [{"doc_id": doc.doc_id, "text": doc.text} for doc in sorted(docs.values(), key=lambda d: d.doc_id)]
    return RetrievalSplit(
        corpus=corpus,
        train=train_rows,
        eval=eval_rows,
        families={"train": list(families), "eval": list(families)},
        train_seed=train_seed,
        dropped_train_rows=dropped,
    )


def _write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> str:
    """Write rows as JSON lines and return the sha256 of the bytes written."""
    data = "".join(json.dumps(row, ensure_ascii=True) + "\n" for row in rows).encode("ascii")
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def build_retrieval_corpus(out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Write corpus.jsonl, train.jsonl, eval.jsonl and manifest.json into `out_dir`; return the manifest.

    The same seed writes the same bytes on every call and machine.
    """
    split = retrieval_rows(seed=seed)
    heldout = [row for row in split.eval if is_heldout(row)]
    out_dir.mkdir(parents=True, exist_ok=True)
    contents = dict(zip(FILES, (split.corpus, split.train, split.eval), strict=True))
    digests = {name: _write_jsonl(out_dir / name, rows) for name, rows in contents.items()}
    manifest = {
        "eval_suite_seed": 0,
        "train_suite_seed": split.train_seed,
        "seed": seed,
        "families": split.families,
        "digests": digests,
        "heldout_templates": {
            "what": "queries of templates no training query uses, answered by documents no training row holds",
            "documents": sorted({row["positive_id"] for row in heldout}),
        },
        "rows": {
            "corpus": len(split.corpus),
            "train": len(split.train),
            "eval": len(split.eval) - len(heldout),
            "eval_heldout_templates": len(heldout),
            "train_dropped_as_evaluation_queries": split.dropped_train_rows,
        },
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="ascii")
    return manifest


@dataclass(frozen=True)
class ShippedSplit:
    root: Path

    @property
    def corpus(self) -> Path:
        return self.root / "corpus.jsonl"

    @property
    def train(self) -> Path:
        return self.root / "train.jsonl"

    @property
    def eval(self) -> Path:
        return self.root / "eval.jsonl"

    @property
    def manifest(self) -> dict[str, object]:
        loaded: dict[str, object] = json.loads((self.root / "manifest.json").read_text())
        return loaded


def shipped_retrieval_split(parent: Path) -> ShippedSplit:
    """`parent/shipped-v2`, built on first use: written beside it and renamed into place, so a reader never sees
    half a split and two builders racing leave one."""
    split = ShippedSplit(parent / SHIPPED_SPLIT)
    if (split.root / "manifest.json").is_file():
        return split
    parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=parent, prefix=f".{SHIPPED_SPLIT}."))
    try:
        build_retrieval_corpus(building)
        os.replace(building, split.root)
    except OSError:
        if not (split.root / "manifest.json").is_file():  # not another builder's finished split: a real failure
            raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return split
