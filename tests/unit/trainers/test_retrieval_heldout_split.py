"""The shipped retrieval split holds a second slice beside its main evaluation: queries whose templates and answer
documents no training row holds, so a retriever that memorised the training templates cannot score well there."""

from __future__ import annotations

import re

import pytest
from bashgym.trainers.environments.retrieval import build_retrieval_corpus, retrieval_rows
from bashgym.trainers.environments.retrieval_heldout import HELDOUT_SLICE, is_heldout

MAIN_QUERIES = 88


def _skeleton(query: str) -> str:
    """A query's template: its wording with the file and folder names (any word with a dot, slash or digit) and
    the instance names taken out."""
    words = [w for w in query.lower().split() if not re.search(r"[./0-9_]", w)]
    return " ".join(words)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_training_row_holds_a_heldout_document_or_query(seed: int) -> None:
    split = retrieval_rows(seed=seed)
    heldout = [row for row in split.eval if is_heldout(row)]
    assert len(heldout) >= 40, "enough held-out queries to say something"
    trained_texts = {row[name] for row in split.train for name in ("query", "positive", "negative")}
    trained_ids = {row["positive_id"] for row in split.train}
    assert not {row["positive"] for row in heldout} & trained_texts, "a held-out document is in a training row"
    assert not {row["positive_id"] for row in heldout} & trained_ids
    assert not {row["query"] for row in heldout} & trained_texts
    assert not {row["family"] for row in heldout} & {row["family"] for row in split.train}


def test_heldout_templates_are_no_training_template() -> None:
    split = retrieval_rows(seed=0)
    trained = {_skeleton(row["query"]) for row in split.train}
    heldout = {_skeleton(row["query"]) for row in split.eval if is_heldout(row)}
    main = {_skeleton(row["query"]) for row in split.eval if not is_heldout(row)}
    assert not heldout & trained
    # The main evaluation is unseen instances of trained templates: what the held-out slice is measured beside.
    assert main & trained


def test_the_main_evaluation_is_unchanged_and_the_manifest_counts_both(tmp_path) -> None:  # type: ignore[no-untyped-def]
    split = retrieval_rows(seed=0)
    main = [row for row in split.eval if not is_heldout(row)]
    assert len(main) == MAIN_QUERIES and all("slice" not in row for row in main)
    assert {row["slice"] for row in split.eval if is_heldout(row)} == {HELDOUT_SLICE}
    assert len({row["query_id"] for row in split.eval}) == len(split.eval)
    manifest = build_retrieval_corpus(tmp_path)
    assert manifest["rows"]["eval"] == MAIN_QUERIES
    assert manifest["rows"]["eval_heldout_templates"] == len(split.eval) - MAIN_QUERIES
    assert manifest["heldout_templates"]["documents"] == sorted(
        {row["positive_id"] for row in split.eval[MAIN_QUERIES:]}
    )
