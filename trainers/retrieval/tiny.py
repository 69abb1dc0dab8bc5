"""Build a deterministic tiny BERT retriever, offline, in seconds.

The retriever workflow's tests train a real SentenceTransformer on the CPU without a model hub, so they build
one here: a WordPiece tokenizer whose vocabulary is counted from the retrieval corpus and the training queries
(never the evaluation queries), a randomly initialised two-layer BERT, mean pooling and normalisation, saved
with `SentenceTransformer.save` so `SentenceTransformer(out_dir)` loads it like any hub retriever.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from bashgym.trainers.environments.retrieval import retrieval_rows
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# The order fixes the ids: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)
# Counts the special tokens and characters too; the corpus and training queries hold fewer words than this, so
# every word they hold is one token.
VOCAB_SIZE = 2048
MAX_LENGTH = 128
# Written by transformers into config.json as metadata only; dropping it keeps a build byte-identical across
# transformers patch releases.
VERSION_FIELD = "transformers_version"


@dataclass(frozen=True)
class RetrieverShape:
    """The size of the tiny encoder; the vocabulary comes from the tokenizer."""

    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 128


TINY_RETRIEVER = RetrieverShape()


def tokenizer_texts(*, seed: int = 0) -> list[str]:
    """What the tokenizer learns its vocabulary from: every corpus document and every training query."""
    split = retrieval_rows(seed=seed)
    return [row["text"] for row in split.corpus] + [row["query"] for row in split.train]


def count_vocabulary(texts: list[str], vocab_size: int = VOCAB_SIZE) -> dict[str, int]:
    """The WordPiece vocabulary of `texts`: special tokens, every character alone and as a `##` continuation, then
    whole words by frequency (ties by spelling), so an unseen word still splits into known pieces.

    It is counted here rather than by `tokenizers.trainers.WordPieceTrainer`, whose merges break ties in a hash
    map's order: two builds in one process gave different vocabularies, and so different models.
    """
    normalizer = normalizers.BertNormalizer(lowercase=True)
    splitter = pre_tokenizers.BertPreTokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in splitter.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({char for word in counts for char in word})
    pieces = [*SPECIAL_TOKENS, *chars, *(f"##{char}" for char in chars)]
    if len(pieces) > vocab_size:
        raise ValueError(f"The texts hold {len(chars)} distinct characters; raise vocab_size above {len(pieces)}.")
    words = [w for w, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])) if w not in set(pieces)]
    pieces += words[: vocab_size - len(pieces)]
    return {piece: index for index, piece in enumerate(pieces)}


def wordpiece_tokenizer(vocab: dict[str, int]) -> Tokenizer:
    """A lowercasing BERT WordPiece tokenizer over `vocab` that wraps each text in [CLS] ... [SEP]."""
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token=UNK_TOKEN))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{CLS_TOKEN} $A {SEP_TOKEN}",
        pair=f"{CLS_TOKEN} $A {SEP_TOKEN} $B:1 {SEP_TOKEN}:1",
        special_tokens=[(CLS_TOKEN, vocab[CLS_TOKEN]), (SEP_TOKEN, vocab[SEP_TOKEN])],
    )
    return tokenizer


def wrap_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap the trained tokenizer with its special tokens and length limit."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        cls_token=CLS_TOKEN,
        sep_token=SEP_TOKEN,
        mask_token=MASK_TOKEN,
        model_max_length=MAX_LENGTH,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def bert_config(shape: RetrieverShape, tokenizer: PreTrainedTokenizerFast) -> BertConfig:
    """A BERT config of `shape` whose vocabulary, length and padding id match `tokenizer`."""
    return BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        intermediate_size=shape.intermediate_size,
        max_position_embeddings=MAX_LENGTH,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def init_encoder(config: BertConfig, *, seed: int) -> BertModel:
    """A randomly initialised encoder; the same config and seed give the same weights."""
    # fork_rng: seeding here must not reset the random state of a caller that builds in-process.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # The pooler is unused (Pooling averages the tokens) but kept, so loading the encoder reports no missing
        # weights.
        return BertModel(config)


def assemble(encoder_dir: Path) -> SentenceTransformer:
    """Transformer, mean pooling and normalisation over the encoder saved in `encoder_dir`, on the CPU."""
    transformer = Transformer(str(encoder_dir), max_seq_length=MAX_LENGTH)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu")


def build_tiny_retriever(out_dir: Path, *, seed: int = 0) -> Path:
    """Build the tiny retriever into `out_dir` and return `out_dir`."""
    tokenizer = wrap_tokenizer(wordpiece_tokenizer(count_vocabulary(tokenizer_texts())))
    encoder = init_encoder(bert_config(TINY_RETRIEVER, tokenizer), seed=seed)
    with tempfile.TemporaryDirectory(prefix="bashgym-retriever-") as staging:
        encoder.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        model = assemble(Path(staging))
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save(str(out_dir))
    drop_version_field(out_dir / "config.json")
    return out_dir


def drop_version_field(path: Path) -> None:
    """Rewrite the JSON file at `path` without the transformers version it records."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop(VERSION_FIELD, None)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
