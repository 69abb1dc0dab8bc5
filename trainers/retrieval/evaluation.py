"""Judge a retriever on a frozen split: the library's ranking metrics, per-query nDCG@10 for the paired bootstrap,
a hard slice, what the index costs, and contamination against the training rows.

The aggregate figures are sentence-transformers' own (`InformationRetrievalEvaluator`), so they read like any
published retriever's. The bootstrap needs one number per query, which the evaluator does not expose, so they are
computed here from the same embeddings and the same tie order (score, then corpus id), and their mean must equal
the library's nDCG@10: a mismatch means one of the two ranks differently, and no figure is reported.

Rows marked `slice: heldout_templates` (the shipped split's queries of templates and documents never trained on)
are judged apart, against the same corpus, and reported beside the main figures as `heldout_templates.*`: the main
figures and the per-query scores the bootstrap compares stay those of the main queries.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from bashgym.trainers.contracts.retrieval import content_words, normalise_text
from bashgym.trainers.environments.retrieval_heldout import HELDOUT_SLICE, is_heldout
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

K = 10
RECALL_AT = (1, 5, 10)
MEAN_TOLERANCE = 1e-6
EVALUATOR = "InformationRetrievalEvaluator"


class RankingMismatch(RuntimeError):
    """The per-query nDCG@10 computed here disagrees with the library's aggregate."""


def contamination(
    eval_rows: Sequence[Mapping[str, Any]], train_rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Every evaluation query whose text (case and whitespace aside) is anywhere in the training rows, and every
    judged evaluation pair (query and positive) the training rows hold. The corpus itself is shared: a document
    the retriever searches may be a training positive, as in any retrieval benchmark; an evaluation query or its
    judgement may not."""
    texts = {
        normalise_text(str(row[name]))
        for row in train_rows
        for name in ("query", "positive", "negative")
        if name in row
    }
    pairs = {(normalise_text(str(row["query"])), normalise_text(str(row["positive"]))) for row in train_rows}
    found = []
    for row in eval_rows:
        query, positive = normalise_text(str(row["query"])), normalise_text(str(row["positive"]))
        if (query, positive) in pairs:
            found.append({"query_id": str(row["query_id"]), "what": "pair"})
        elif query in texts:
            found.append({"query_id": str(row["query_id"]), "what": "query"})
    return found


def load_retriever_model(model_dir: str) -> SentenceTransformer:
    """The retriever in `model_dir` (a full model, or a LoRA adapter over one), on a GPU where there is one."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return SentenceTransformer(model_dir, device=device)


def _relevant(eval_rows: Sequence[Mapping[str, Any]], corpus: Mapping[str, str]) -> dict[str, str]:
    """Each query's positive document id: the row's positive_id, else the document whose text is the positive."""
    by_text = {text: doc_id for doc_id, text in corpus.items()}
    relevant: dict[str, str] = {}
    for row in eval_rows:
        query_id = str(row["query_id"])
        if query_id in relevant:
            raise ValueError(
                f"Query id {query_id!r} appears twice in the evaluation rows; give every query its own id."
            )
        doc_id = row.get("positive_id") or by_text.get(str(row["positive"]))
        if doc_id not in corpus:
            raise ValueError(
                f"The positive of query {query_id!r} ({doc_id or 'no positive_id'}) is not in the corpus; "
                "evaluate against the corpus the split was built with (corpus.jsonl beside eval.jsonl)."
            )
        relevant[query_id] = str(doc_id)
    return relevant


def _encode(model: SentenceTransformer, texts: list[str], *, query: bool, batch_size: int) -> torch.Tensor:
    # The same calls the evaluator makes (encode_query / encode_document, tensors, one batch size), so the
    # embeddings, and with them the rankings, are the same numbers.
    encode = model.encode_query if query else model.encode_document
    return encode(texts, batch_size=batch_size, show_progress_bar=False, convert_to_tensor=True)


def _timed_corpus(model: SentenceTransformer, texts: list[str], *, batch_size: int) -> tuple[torch.Tensor, float]:
    """The corpus embeddings and the milliseconds they took, after one warm-up batch."""
    _encode(model, texts[:batch_size], query=False, batch_size=batch_size)
    started = time.perf_counter()
    embeddings = _encode(model, texts, query=False, batch_size=batch_size)
    return embeddings, (time.perf_counter() - started) * 1000.0


def _rank_of(scores: list[float], doc_ids: list[str], target: str) -> int:
    """1-based rank of `target` under the evaluator's order: higher score first, then the lower corpus id."""
    order = sorted(range(len(doc_ids)), key=lambda i: (-scores[i], doc_ids[i]))
    return next(rank for rank, i in enumerate(order, start=1) if doc_ids[i] == target)


def _per_query(
    query_ids: list[str], query_scores: torch.Tensor, doc_ids: list[str], relevant: Mapping[str, str]
) -> dict[str, dict[str, float]]:
    """Each query's nDCG@10 and reciprocal rank at 10; one relevant document, so the ideal DCG is 1."""
    scored = query_scores.cpu().tolist()
    per_query = {}
    for query_id, scores in zip(query_ids, scored, strict=True):
        rank = _rank_of(scores, doc_ids, relevant[query_id])
        hit = rank <= K
        per_query[query_id] = {
            "ndcg@10": 1.0 / math.log2(rank + 1) if hit else 0.0,
            "rr@10": 1.0 / rank if hit else 0.0,
        }
    return per_query


def _library_metrics(
    model: SentenceTransformer,
    queries: dict[str, str],
    corpus: dict[str, str],
    relevant: Mapping[str, str],
    *,
    batch_size: int,
) -> dict[str, float]:
    # The evaluator types its texts as any modality; these are all text.
    texts_by_query: dict[str, Any] = dict(queries)
    texts_by_doc: dict[str, Any] = dict(corpus)
    evaluator = InformationRetrievalEvaluator(
        queries=texts_by_query,
        corpus=texts_by_doc,
        relevant_docs={query_id: {doc_id} for query_id, doc_id in relevant.items()},
        mrr_at_k=[K],
        ndcg_at_k=[K],
        accuracy_at_k=list(RECALL_AT),
        precision_recall_at_k=list(RECALL_AT),
        map_at_k=[K],
        batch_size=batch_size,
        write_csv=False,
    )
    results = evaluator(model)
    prefix = f"{model.similarity_fn_name}_"
    return {key.removeprefix(prefix): float(value) for key, value in results.items()}


def _check_same_ranking(per_query: Mapping[str, Mapping[str, float]], library_ndcg: float) -> None:
    ours = statistics.fmean(scores["ndcg@10"] for scores in per_query.values())
    if abs(ours - library_ndcg) > MEAN_TOLERANCE:
        raise RankingMismatch(
            f"The mean per-query nDCG@10 is {ours:.9f} but {EVALUATOR} reports {library_ndcg:.9f}; the two rank "
            "differently (a changed tie order or similarity in sentence-transformers?). Compare _rank_of with "
            "InformationRetrievalEvaluator.compute_metrics before trusting either figure."
        )


def without_overlap(query: str, positive: str) -> str:
    """The query with every word it shares with its positive taken out (case aside): what is left can find the
    positive by meaning only, never by spelling."""
    shared = {word.lower() for word in re.findall(r"[A-Za-z0-9]+", positive)}
    return " ".join(word for word in query.split() if re.sub(r"[^A-Za-z0-9]", "", word).lower() not in shared)


def _hard_slice(
    model: SentenceTransformer,
    eval_rows: Sequence[Mapping[str, Any]],
    doc_embeddings: torch.Tensor,
    doc_ids: list[str],
    relevant: Mapping[str, str],
    *,
    batch_size: int,
) -> dict[str, dict[str, float]]:
    """Per-query nDCG@10 of the queries with their lexical overlap removed (a query left with no words drops out)."""
    stripped = {str(row["query_id"]): without_overlap(str(row["query"]), str(row["positive"])) for row in eval_rows}
    kept = [query_id for query_id, text in stripped.items() if content_words(text)]
    if not kept:
        return {}
    embeddings = _encode(model, [stripped[q] for q in kept], query=True, batch_size=batch_size)
    return _per_query(kept, model.similarity(embeddings, doc_embeddings), doc_ids, relevant)


def _heldout_templates(
    model: SentenceTransformer,
    rows: Sequence[Mapping[str, Any]],
    corpus: dict[str, str],
    doc_embeddings: torch.Tensor,
    train_rows: Sequence[Mapping[str, Any]] | None,
    *,
    batch_size: int,
) -> tuple[dict[str, float | int | None], dict[str, Any]]:
    """The held-out-template slice's metrics (`heldout_templates.*`) and its details: the library's figures, each
    query's nDCG@10, and how many of its positives the training rows hold after all (then it is not held out)."""
    relevant = _relevant(rows, corpus)
    queries = {str(row["query_id"]): str(row["query"]) for row in rows}
    embeddings = _encode(model, list(queries.values()), query=True, batch_size=batch_size)
    per_query = _per_query(list(queries), model.similarity(embeddings, doc_embeddings), list(corpus), relevant)
    library = _library_metrics(model, queries, corpus, relevant, batch_size=batch_size)
    _check_same_ranking(per_query, library["ndcg@10"])
    trained = _trained_positives(rows, train_rows) if train_rows is not None else None
    metrics: dict[str, float | int | None] = {
        f"{HELDOUT_SLICE}.{name}": library[name] for name in ("ndcg@10", "mrr@10", "recall@1", "recall@10")
    }
    metrics[f"{HELDOUT_SLICE}_queries"] = len(rows)
    metrics[f"{HELDOUT_SLICE}.documents_trained"] = None if trained is None else len(trained)
    details = {
        "what": "queries of templates no training query uses, answered by documents no training row holds",
        "queries": len(rows),
        "documents": sorted(set(relevant.values())),
        "documents_trained": trained,
        "per_query": {q: scores["ndcg@10"] for q, scores in per_query.items()},
    }
    return metrics, details


def _trained_positives(rows: Sequence[Mapping[str, Any]], train_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The query ids whose positive document is in a training row (as any field): those are not held out."""
    texts = {normalise_text(str(value)) for row in train_rows for value in row.values() if isinstance(value, str)}
    return [str(row["query_id"]) for row in rows if normalise_text(str(row["positive"])) in texts]


def evaluate_retriever(
    model_dir: str,
    eval_rows: list[dict[str, Any]],
    corpus_rows: list[dict[str, Any]],
    *,
    train_rows: list[dict[str, Any]] | None = None,
    batch_size: int = 64,
) -> dict[str, Any]:
    """The retrieval summary of the model in `model_dir` on `eval_rows` against `corpus_rows`.

    `per_task` holds each main query's nDCG@10 under "pass@1" too, the key the paired bootstrap and the gate read.
    Held-out-template rows are scored apart (`heldout_templates.*` and `heldout_templates`), and only when present.
    The contamination figure (over every row) is None when no training rows were given to check against.
    """
    main = [row for row in eval_rows if not is_heldout(row)]
    heldout = [row for row in eval_rows if is_heldout(row)]
    if not main or not corpus_rows:
        raise ValueError(
            "evaluate_retriever needs evaluation rows (besides any held-out-template ones) and corpus rows; build "
            "them with bashgym.trainers.environments.retrieval.build_retrieval_corpus."
        )
    model = load_retriever_model(model_dir)
    corpus = {str(row["doc_id"]): str(row["text"]) for row in corpus_rows}
    relevant = _relevant(main, corpus)
    query_ids = [str(row["query_id"]) for row in main]
    queries = {str(row["query_id"]): str(row["query"]) for row in main}
    doc_ids = list(corpus)
    doc_embeddings, encode_ms = _timed_corpus(model, list(corpus.values()), batch_size=batch_size)
    query_embeddings = _encode(model, [queries[q] for q in query_ids], query=True, batch_size=batch_size)
    per_query = _per_query(query_ids, model.similarity(query_embeddings, doc_embeddings), doc_ids, relevant)
    library = _library_metrics(model, queries, corpus, relevant, batch_size=batch_size)
    _check_same_ranking(per_query, library["ndcg@10"])
    hard = _hard_slice(model, main, doc_embeddings, doc_ids, relevant, batch_size=batch_size)
    contaminated = contamination(eval_rows, train_rows) if train_rows is not None else []
    families = {str(row["query_id"]): str(row.get("family") or "unknown") for row in main}
    metrics = {
        "ndcg@10": library["ndcg@10"],
        "mrr@10": library["mrr@10"],
        **{f"recall@{k}": library[f"recall@{k}"] for k in RECALL_AT},
        "hard.ndcg@10": statistics.fmean(scores["ndcg@10"] for scores in hard.values()) if hard else None,
        "hard_queries": len(hard),
        "encode_ms_per_1k_docs": encode_ms * 1000.0 / len(doc_ids),
        "index_bytes_per_1k_docs": doc_embeddings.to(torch.float32).numel() * 4 * 1000 / len(doc_ids),
        "contamination": len(contaminated) if train_rows is not None else None,
    }
    summary: dict[str, Any] = {
        "kind": "retrieval",
        "metrics": metrics,
        "per_task": {q: {"family": families[q], "pass@1": per_query[q]["ndcg@10"], **per_query[q]} for q in query_ids},
        "rows": len(main),
        "contaminated": contaminated,
        "library": {"evaluator": EVALUATOR, "ndcg@10": library["ndcg@10"]},
        "hard_slice": {
            "what": "each query with the words it shares with its positive removed",
            "queries": len(hard),
            "per_query": {q: scores["ndcg@10"] for q, scores in hard.items()},
        },
    }
    if heldout:
        held_metrics, summary[HELDOUT_SLICE] = _heldout_templates(
            model, heldout, corpus, doc_embeddings, train_rows, batch_size=batch_size
        )
        metrics.update(held_metrics)
    return summary
