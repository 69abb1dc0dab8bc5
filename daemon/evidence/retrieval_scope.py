"""What a retriever's figures measure, in words for its RunCard: the main nDCG@10 is on unseen instances of the
training queries' templates, answered by documents trained on; the held-out-template slice (queries of new
templates whose documents no training row holds) is given beside it, or its absence is said.

Pure, over the results the card is built from (the card builder passes only those the daemon measured).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

RETRIEVAL_SUITE_KIND = "retrieval"
HELDOUT = "heldout_templates"


def retrieval_scope(results: Sequence[dict[str, Any]], suites: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One sentence per completed retrieval result: its main figure and, beside it, the held-out one."""
    return [
        _scope_of(result)
        for result in results
        if (suites.get(result["suite_id"]) or {}).get("kind") == RETRIEVAL_SUITE_KIND
        and result["status"] == "completed"
    ]


def _scope_of(result: dict[str, Any]) -> str:
    metrics = result.get("metrics") or {}
    main = (
        f"Retrieval result {result['result_id']}: nDCG@10 {_figure(metrics.get('ndcg@10'))} on "
        f"{result.get('sample_count', 0)} queries that are unseen instances of the training queries' templates, "
        "answered by documents the retriever trained on"
    )
    heldout = metrics.get(f"{HELDOUT}.ndcg@10")
    if heldout is None:
        return (
            f"{main}; no held-out-template figure was measured, so nothing shows how it meets a new kind of query "
            "(evaluate on the shipped split: bashgym eval run --run RUN)."
        )
    queries = int(metrics.get(f"{HELDOUT}_queries") or 0)
    beside = f"nDCG@10 {_figure(heldout)} on {queries} queries of held-out templates and documents"
    trained = metrics.get(f"{HELDOUT}.documents_trained")
    if trained is None:
        return f"{main}; {beside} (not checked against the training data, so not known to be held out)."
    if trained:
        return (
            f"{main}; {beside}, but the training data holds the document of {trained:.0f} of those queries, so "
            "that figure is not held out either."
        )
    return f"{main}; {beside}, none of them in the training data."


def _figure(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "n/a"
