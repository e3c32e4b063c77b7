"""Sentence pairs mined from plain text by word overlap (``kdbert mine-pairs``): unlabelled rows for a
pair task that has no text of its own beyond its training file, which ``kdbert compress --unlabelled``
has the teacher label and every candidate distil on.

Paraphrase corpora are built this way (MRPC's pairs were drawn from news clusters by lexical
similarity), where ``--transfer-text`` pairs consecutive sentences, which rarely share a topic.
Every distinct sentence of ``MIN_WORDS``..``MAX_WORDS`` words in the corpus
(:func:`kdbert.compress.transfer.sentences` cuts the lines) is a TF-IDF vector (sublinear counts,
English stop words out, words seen in two sentences or more); each is paired with its nearest other
sentence by cosine, and a pair is kept when ``low <= cos < COPY`` (above, the two are copies). Each
unordered pair is kept once; the pairs are shuffled with ``seed``, the first ``rows`` kept and the
two sentences of each put in a random order.

Measured (BENCHMARKS.md, the recipe reading; MRPC, the 51 MB Wikipedia corpus): the defaults, all 24,584
pairs at cosine 0.5 or above, lifted a 30-minute one-core search's winner from 95.3% to 97.4% of the
teacher's dev over three seeds; 60,000 pairs at 0.4 or above lift a 1-layer student to 99.6% at equal
steps, but labelling them took seven of such a search's minutes and its winners read 91.6-98.1%.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kdbert.compress.transfer import sentences, text_lines
from kdbert.data.corpus import corpus_files
from kdbert.errors import KdbertError

MIN_WORDS, MAX_WORDS = 10, 40  # a mined pair's sentences
COPY = 0.95  # a pair at this cosine or above is a copy, never kept
LOW, ROWS = 0.5, 30000  # the setting a 30-minute search shipped best with (module doc)
CHUNK = 2000  # rows of the similarity matrix at once (sparse)

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import TfidfVectorizer


@dataclass
class MinedPairs:
    """What :func:`mine_pairs` found: the kept ``pairs`` and their ``cosines``, out of ``sentences``."""

    pairs: list[tuple[str, str]]
    cosines: np.ndarray
    sentences: int
    vectoriser: TfidfVectorizer

    def cosines_of(self, pairs: list[tuple[str, ...]]) -> np.ndarray:
        """The cosine of each pair's two texts under the mining's vectoriser (a task's own pairs, to compare)."""
        return pair_cosines(self.vectoriser, pairs)


def corpus_sentences(paths) -> list[str]:
    """The distinct sentences of ``MIN_WORDS``..``MAX_WORDS`` words in the text files ``paths`` (``.gz``
    too, folders expanded), in order."""
    found = (s for path in corpus_files(paths) for line in text_lines(path) for s in sentences(line))
    return [s for s in dict.fromkeys(found) if MIN_WORDS <= len(s.split()) <= MAX_WORDS]


def nearest(matrix) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest other row of the L2-normalised sparse ``matrix`` (index, cosine), copies
    (cosine >= :data:`COPY`, the row itself among them) left out."""
    transposed = matrix.T.tocsr()
    index, cosine = np.zeros(matrix.shape[0], np.int64), np.zeros(matrix.shape[0], np.float32)
    for start in range(0, matrix.shape[0], CHUNK):
        similar = matrix[start:start + CHUNK] @ transposed
        similar.data[similar.data >= COPY] = 0.0
        similar.eliminate_zeros()
        index[start:start + CHUNK] = np.asarray(similar.argmax(axis=1)).ravel()
        cosine[start:start + CHUNK] = similar.max(axis=1).toarray().ravel()
    return index, cosine


def mine(texts: list[str], low: float) -> tuple[TfidfVectorizer, list[tuple[int, int, float]]]:
    """The vectoriser fitted on ``texts`` and the unordered pairs ``(i, j, cosine)`` of each text and
    its nearest other (:func:`nearest`) at ``low`` or above, each pair once."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # loaded when mining, not with the command line

    vectoriser = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=2, dtype=np.float32)
    index, cosine = nearest(vectoriser.fit_transform(texts))
    pairs = {}
    for i, (j, c) in enumerate(zip(index, cosine)):
        if c >= low:
            pairs.setdefault((min(i, j), max(i, j)), float(c))
    return vectoriser, [(i, j, c) for (i, j), c in pairs.items()]


def pair_cosines(vectoriser: TfidfVectorizer, pairs: list[tuple[str, ...]]) -> np.ndarray:
    """The cosine of each pair's first two texts under ``vectoriser``."""
    left, right = vectoriser.transform([p[0] for p in pairs]), vectoriser.transform([p[1] for p in pairs])
    return np.asarray(left.multiply(right).sum(axis=1)).ravel()


def mine_pairs(corpus, low: float = LOW, rows: int = ROWS, seed: int = 0) -> MinedPairs:
    """At most ``rows`` sentence pairs of ``corpus`` (files or folders) at cosine ``low`` or above (module doc)."""
    if not 0.0 < low < COPY:
        raise KdbertError(f"--low {low}: give a cosine between 0 and {COPY} (pairs at {COPY} or above are copies)")
    texts = corpus_sentences(corpus)
    if len(texts) < 2:
        raise KdbertError(f"--corpus {' '.join(map(str, corpus))}: {len(texts)} sentence(s) of {MIN_WORDS}-"
                          f"{MAX_WORDS} words found; give plain text files (.txt or .gz) with many sentences")
    vectoriser, found = mine(texts, low)
    if not found:
        raise KdbertError(f"--low {low}: no two of the corpus's {len(texts):,} sentences are that alike; "
                          "lower --low or give more text")
    draw = random.Random(seed)
    draw.shuffle(found)
    pairs = [(texts[i], texts[j]) if draw.random() < 0.5 else (texts[j], texts[i]) for i, j, _ in found[:rows]]
    return MinedPairs(pairs, np.array([c for _, _, c in found[:rows]]), len(texts), vectoriser)


def write_rows(out: Path, fields: list[str], rows: list[tuple[str, ...]]) -> Path:
    """``out`` as JSONL, each row's texts under the task's text ``fields``, written atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text("".join(json.dumps(dict(zip(fields, row))) + "\n" for row in rows), encoding="utf-8")
    os.replace(partial, out)
    return out
