"""Word vectors read off a pre-trained encoder: ``--word-vectors encoder:MODEL``.

Each word of the student's vocabulary goes through the encoder alone (``[CLS] word [SEP]``, the
word cut into the encoder's sub-word tokens), and its vector is the mean of the last layer's
hidden states over those tokens (B words, T tokens, H hidden)::

    v_w = sum_t m_t h_t / sum_t m_t        h: (B, T, H), m: the attention mask (B, T)

the pooling of sentence encoders such as all-MiniLM-L6-v2, applied to one word: static vectors
distilled from a sentence encoder, as Model2Vec does (Tulkens and van Dongen, 2024). The vectors
are then scaled by one factor so that their entries' standard deviation is :data:`TARGET_STD`, the
order of GloVe's (0.74 over GloVe 6B 50d's 2,000 most frequent words), so the LSTM's gates start
about where they do with GloVe. Unlike
a GloVe file, every word gets a vector: the encoder reads any word through its sub-words.

``MODEL`` is what ``--teacher`` takes: ``default`` (the packaged all-MiniLM-L6-v2), a folder, or a hub
id. Use the base encoder, not a fine-tuned classifier: a classifier's single-word outputs carry its
task more than the word (measured in BENCHMARKS.md). The vectors of a vocabulary are computed once
and stored under ``<folder>/word-vectors/<key>.safetensors``, the key a hash of the encoder's
fingerprint and the words, so a search's later runs of the same student read them back.

An encoder has no word frequencies of its own; its tokenizer's vocabulary stands in for them
(:func:`tokenizer_words`). A WordPiece vocabulary (BERT's, all-MiniLM-L6-v2's) lists its
continuation pieces with ``##`` and was built by frequency: after its block of single characters
(the alphabet in code-point order), its whole words come most frequent first. Measured against
GloVe 6B's frequency order, the median GloVe rank of all-MiniLM-L6-v2's whole words rises steadily
with their position: 1,158 for its first 2,000 words, 8,226 for words 6,000-8,000, 26,932 for
22,000-22,688. Byte-level BPE and SentencePiece vocabularies mark word starts (``Ġ``, ``▁``)
instead; their order (the merges') also roughly follows frequency, not measured here. The
vocabulary caps the count: all-MiniLM-L6-v2 has 22,688 whole words of two characters or more.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from kdbert.families.bilstm.words import WordVectors, is_vocab_word

PREFIX = "encoder:"
TARGET_STD = 0.6
BATCH_SIZE = 256
CONTINUATION = "##"  # WordPiece's mark of a piece that continues a word
WORD_STARTS = ("\u0120", "\u2581")  # byte-level BPE's "Ġ" and SentencePiece's "▁": a piece that starts a word


def is_encoder_source(word_vectors: str | os.PathLike | None) -> bool:
    """Whether ``--word-vectors`` names an encoder (``encoder:MODEL``) rather than a file."""
    return isinstance(word_vectors, str) and word_vectors.startswith(PREFIX)


def encoder_name(word_vectors: str) -> str:
    """``MODEL`` of ``encoder:MODEL`` (``default`` when empty)."""
    return word_vectors[len(PREFIX):] or "default"


def tokenizer_words(vocab: dict[str, int]) -> list[str]:
    """The whole words of a sub-word vocabulary (piece -> id), lowercased, in id order (module doc):
    the pieces marked as word starts (the mark removed) where the vocabulary marks them, else the
    pieces without WordPiece's ``##``; only those of two characters or more (not the alphabet block)
    that a vocabulary can hold (:func:`~kdbert.families.bilstm.words.is_vocab_word`: not ``[CLS]``)."""
    pieces = sorted(vocab, key=vocab.__getitem__)
    marked = [piece[1:] for piece in pieces if piece.startswith(WORD_STARTS)]
    words = marked or [piece for piece in pieces if not piece.startswith(CONTINUATION)]
    return list(dict.fromkeys(w.lower() for w in words if len(w) > 1 and is_vocab_word(w)))


def encoder_frequent_words(word_vectors: str, count: int, known: set[str]) -> list[str]:
    """The first ``count`` whole words of the tokenizer of the encoder ``word_vectors`` names
    (:func:`tokenizer_words`, its most frequent first) that are not in ``known``."""
    from kdbert.core.loading import load_tokenizer

    words = tokenizer_words(load_tokenizer(encoder_name(word_vectors)).get_vocab())
    return [w for w in words if w not in known][:count]


def encoder_dim(word_vectors: str) -> int:
    """The encoder's hidden size, from its config alone."""
    from transformers import AutoConfig

    from kdbert.core.loading import resolve_model_path

    return AutoConfig.from_pretrained(resolve_model_path(encoder_name(word_vectors))).hidden_size


@torch.no_grad()
def pooled_word_vectors(model, tokenizer, words: list[str], batch_size: int = BATCH_SIZE) -> np.ndarray:
    """(len(words), H) float32: each word alone through ``model``, its last hidden states mean-pooled
    over the attention mask (module doc), unscaled."""
    model.eval()
    rows = []
    for start in range(0, len(words), batch_size):
        batch = tokenizer(words[start:start + batch_size], padding=True, return_tensors="pt")
        hidden = model(**batch).last_hidden_state  # (B, T, H)
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        rows.append(((hidden * mask).sum(dim=1) / mask.sum(dim=1)).float().numpy())
    return np.concatenate(rows) if rows else np.zeros((0, model.config.hidden_size), np.float32)


def scaled(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` times the one factor that makes their entries' standard deviation :data:`TARGET_STD`."""
    spread = float(vectors.std()) if vectors.size else 0.0
    return (vectors * (TARGET_STD / spread) if spread > 0 else vectors).astype(np.float32)


def cache_key(model, words: list[str]) -> str:
    """A hash of the encoder's fingerprint (:func:`kdbert.students.store.fingerprint`) and the words."""
    from kdbert.students.store import fingerprint

    digest = hashlib.sha256(fingerprint(model).numpy().tobytes())
    digest.update("\n".join(words).encode("utf-8"))
    return digest.hexdigest()[:24]


def encoder_word_vectors(word_vectors: str, words: list[str], folder: str | os.PathLike | None) -> WordVectors:
    """The vectors of ``words`` from the encoder ``word_vectors`` names (``encoder:MODEL``), read from
    ``folder/word-vectors`` when stored there, else computed and stored (``folder`` None: not stored)."""
    from kdbert.core.loading import load_encoder, load_tokenizer

    name = encoder_name(word_vectors)
    model, path = load_encoder(name, option="--word-vectors encoder:")
    stored = None if folder is None else Path(folder) / "word-vectors" / f"{cache_key(model, words)}.safetensors"
    if stored is not None and stored.is_file():
        return WordVectors(list(words), load_file(str(stored))["vectors"], word_vectors)
    vectors = scaled(pooled_word_vectors(model, load_tokenizer(path), words))
    if stored is not None:
        stored.parent.mkdir(parents=True, exist_ok=True)
        tmp = stored.with_name(stored.name + ".tmp")
        save_file({"vectors": vectors}, str(tmp))
        os.replace(tmp, stored)
    return WordVectors(list(words), vectors, word_vectors)
