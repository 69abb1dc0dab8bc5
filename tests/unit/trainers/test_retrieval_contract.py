"""The words retrieval compares: contamination's normalisation and the content words of the hard slice."""

from __future__ import annotations

from bashgym.trainers.contracts.retrieval import content_words, normalise_text


def test_normalised_text_ignores_case_and_runs_of_whitespace() -> None:
    assert normalise_text("  Count   the LINES\n of notes.txt ") == "count the lines of notes.txt"


def test_content_words_drop_short_words_and_stopwords() -> None:
    assert content_words("Print the lines of a.txt, sorted A-Z") == frozenset({"lines", "txt", "sorted"})
