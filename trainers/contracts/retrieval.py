"""The words retrieval compares: the text normalisation the contamination check uses, and the content words a
query and a passage share (the hard slice takes them out of the query).

Standard library only, so the daemon and the CLI read it without loading torch. A retrieval row's contract is
trainers/contracts/datasets.py `check_retrieval_example`, with every other method's.
"""

from __future__ import annotations

import re

# Words too common to say that a query and a passage are about the same thing.
STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "into",
        "each",
        "every",
        "one",
        "are",
        "its",
        "their",
        "than",
        "then",
        "them",
        "what",
        "which",
        "when",
        "where",
        "how",
        "does",
        "not",
        "but",
        "all",
        "any",
        "can",
        "you",
        "your",
        "use",
        "print",
        "only",
        "just",
        "file",
        "files",
    ]
)
_WORD = re.compile(r"[a-z0-9]+")
MIN_WORD_LENGTH = 3


def normalise_text(text: str) -> str:
    """Text as contamination compares it: case and runs of whitespace do not make a new example."""
    return " ".join(text.split()).casefold()


def content_words(text: str) -> frozenset[str]:
    """The lowercase alphanumeric words of `text` of 3 or more characters, stopwords left out."""
    return frozenset(w for w in _WORD.findall(text.lower()) if len(w) >= MIN_WORD_LENGTH and w not in STOPWORDS)
