"""A retriever's RunCard says what its figures measure: the main nDCG@10 is on unseen instances of trained
templates and documents, and the held-out-template figure stands beside it (or its absence is said)."""

from __future__ import annotations

from typing import Any

from bashgym.daemon.evidence.promotion import build_runcard

from tests.unit.daemon.evidence.test_workflow_gates import RETRIEVAL_SUITE, evidence_for, retrieval_result


def card_lines(result: dict[str, Any]) -> list[str]:
    evidence = evidence_for("embedding_retriever", result, RETRIEVAL_SUITE)
    card = build_runcard(evidence, claim_tier="narrow", decision="undecided", limitations=["mine"], creator="rita")
    return list(card["known_limitations"])


def scope_of(result: dict[str, Any]) -> str:
    lines = card_lines(result)
    assert lines[0] == "mine"
    return next(line for line in lines if line.startswith("Retrieval result cand"))


def heldout(ndcg: float, trained: float | None) -> dict[str, Any]:
    metrics = {"heldout_templates.ndcg@10": ndcg, "heldout_templates_queries": 48.0}
    return metrics if trained is None else {**metrics, "heldout_templates.documents_trained": trained}


def test_the_card_gives_the_heldout_figure_beside_the_main_one() -> None:
    result = {**retrieval_result(**heldout(0.412, 0.0)), "sample_count": 88}
    scope = scope_of(result)
    assert "nDCG@10 0.600 on 88 queries that are unseen instances of the training queries' templates" in scope
    assert "answered by documents the retriever trained on" in scope
    assert "nDCG@10 0.412 on 48 queries of held-out templates and documents, none of them in the training data" in scope


def test_the_card_says_when_no_heldout_figure_was_measured_or_it_is_not_held_out() -> None:
    assert "no held-out-template figure was measured" in scope_of(retrieval_result())
    assert "the training data holds the document of 3 of those queries" in scope_of(retrieval_result(**heldout(0.9, 3)))
    assert "not checked against the training data" in scope_of(retrieval_result(**heldout(0.5, None)))


def test_an_imported_retrieval_result_says_nothing_on_the_card() -> None:
    lines = card_lines({**retrieval_result(**heldout(0.99, 0.0)), "provenance": "asserted"})
    assert not any(line.startswith("Retrieval result") for line in lines)
