"""The held-out-templates slice of the shipped retrieval split: queries whose wording AND answer document the
training data never holds.

The main evaluation queries are unseen instances of the training queries' templates, answered by documents that
are training positives: a retriever that memorises the eleven task families scores near 1.0 there (60 steps of the
tiny retriever reach nDCG@10 1.000) and says little about a query of a new kind. These queries are written from
templates of their own, each answered by a document that is no training query's positive and that the training
rows never use as a hard negative either (retrieval.py keeps HELDOUT_COMMANDS out of its negative pool). They are
searched in the same corpus, so the model must tell a document it never trained on from the thirty it did.

Torch-free, like the rest of the split.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

# The row field that marks a held-out-template query in eval.jsonl; rows without it are the main evaluation.
SLICE_FIELD = "slice"
HELDOUT_SLICE = "heldout_templates"

# Command -> its query templates. None of these commands solves a training task, so none of their documents is a
# training positive; `{file}` and `{dir}` take each of NAMES in turn.
HELDOUT_TEMPLATES: dict[str, tuple[str, str]] = {
    "cp": (
        "Make a copy of {file}.txt named {file}_backup.txt and leave the original where it is.",
        "Duplicate the whole {dir}/ folder, with everything inside it, as {dir}_copy/.",
    ),
    "diff": (
        "Show which lines differ between {file}_old.txt and {file}_new.txt.",
        "Are {dir}/a.conf and {dir}/b.conf the same? Print what changed as a patch.",
    ),
    "du": (
        "How much disk space does {dir}/ take up? Print one human-readable total.",
        "Report how big each subdirectory of {dir}/ is, one level deep.",
    ),
    "gzip": (
        "Compress {file}.log to save space, keeping the original file as well.",
        "Shrink {file}.csv into a .gz file.",
    ),
    "head": (
        "Print the first 5 lines of {file}.txt.",
        "Show only the opening line of {file}.csv.",
    ),
    "ln": (
        "Create a symbolic link called current that points to {dir}/.",
        "Make {file}.conf reachable under a second name, latest.conf, without copying it.",
    ),
    "ls": (
        "Show the hidden files in {dir}/ too, with their sizes and permissions.",
        "Which files in {dir}/ changed most recently? List them newest first.",
    ),
    "mkdir": (
        "Create the folder {dir}/archive/2024, making any missing parents on the way.",
        "Make a new empty folder called {dir}_tmp.",
    ),
    "rm": (
        "Delete {file}.tmp for good.",
        "Get rid of the {dir}/cache folder and all of its contents.",
    ),
    "tail": (
        "Print the last 5 lines of {file}.log.",
        "Keep watching {file}.log and print new lines as they are appended.",
    ),
    "uniq": (
        "For each distinct line of the already sorted {file}.txt, print how many times it occurs.",
        "Print only the lines that appear more than once in the already sorted {file}.txt.",
    ),
    "xargs": (
        "Run wc -l on every file named in {file}.list, passing the names as arguments.",
        "Feed the NUL-separated paths that find -print0 prints under {dir}/ to a command, a few at a time.",
    ),
}
HELDOUT_COMMANDS = frozenset(HELDOUT_TEMPLATES)
# Names the training tasks never use, so no instance repeats a training query's file or folder either.
NAMES = (("ledger", "photos"), ("recipes", "projects"))


class Doc(Protocol):
    @property
    def doc_id(self) -> str: ...

    @property
    def text(self) -> str: ...


def heldout_rows(docs: Mapping[str, Doc]) -> list[dict[str, str]]:
    """The held-out-template queries as evaluation rows, each marked `slice: heldout_templates`."""
    rows = []
    for command, templates in sorted(HELDOUT_TEMPLATES.items()):
        doc = docs[command]
        for number, template in enumerate(templates, start=1):
            for instance, (file, folder) in enumerate(NAMES, start=1):
                rows.append(
                    {
                        "query_id": f"heldout-{command}-t{number}-{instance}",
                        "query": template.format(file=file, dir=folder),
                        "positive": doc.text,
                        "positive_id": doc.doc_id,
                        "family": f"heldout_{command}",
                        SLICE_FIELD: HELDOUT_SLICE,
                    }
                )
    return rows


def is_heldout(row: Mapping[str, object]) -> bool:
    """Whether an evaluation row is a held-out-template query (not one of the main evaluation's)."""
    return row.get(SLICE_FIELD) == HELDOUT_SLICE
