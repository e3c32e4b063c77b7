"""Transfer sets cut from the Wikipedia corpus for the recipe study (``recipe_ablation.py``): rows the
teacher labels, drawn to resemble a task's own.

    python benchmarks/wiki_transfer.py --task mrpc --rows 30000 --out runs/mined/mrpc-pairs.jsonl
    python benchmarks/wiki_transfer.py --task cola --rows 30000 --out runs/mined/cola-sentences.jsonl

*Sentences like a single-text task's* (:func:`sentences_like`): the corpus's sentences of 4-64 words
(:func:`kdbert.compress.transfer.sentences`) drawn so that their word counts follow the training rows'
(each count's share of the training rows times ``rows``, as far as the corpus holds them).

*Pairs mined by word overlap*, as paraphrase corpora are built (:func:`mined_pairs`): MRPC's pairs
were drawn from news clusters by lexical similarity, and its training pairs share many words, where
``--transfer-text`` pairs consecutive sentences. Every sentence of 10-40 words in the corpus is a
TF-IDF vector (sublinear counts, English stop words out, words seen twice or more); each is paired
with its nearest other sentence by cosine, and a pair is kept when ``low <= cos < 0.95`` (above,
they are copies). The kept pairs, each unordered pair once, shuffled with seed 0, the two sentences
of each in a random order, are written as JSONL rows with the task's text fields. The summary
compares their cosines with the task's own training pairs' under the same vectoriser.

Both files are written once, atomically; a rerun reuses them.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from paths import CORPUS, GLUE_DIR

from kdbert.compress.transfer import sentences, text_lines
from kdbert.data.load import TaskOptions, load_task

MIN_WORDS, MAX_WORDS = 10, 40  # a mined pair's sentences
COPY = 0.95  # a pair at this cosine or above is a copy, never kept
CHUNK = 2000  # rows of the similarity matrix at once (sparse)


def corpus_sentences(path: str) -> list[str]:
    """The distinct sentences of a text file (:func:`kdbert.compress.transfer.sentences`: 4-64 words), in order."""
    return list(dict.fromkeys(s for line in text_lines(Path(path)) for s in sentences(line)))


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


def mine(texts: list[str], low: float):
    """The vectoriser fitted on ``texts`` and the unordered pairs ``(i, j, cosine)`` of each text and
    its nearest other (:func:`nearest`) at ``low`` or above, each pair once."""
    vectoriser = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=2, dtype=np.float32)
    index, cosine = nearest(vectoriser.fit_transform(texts))
    pairs = {}
    for i, (j, c) in enumerate(zip(index, cosine)):
        if c >= low:
            pairs.setdefault((min(i, j), max(i, j)), float(c))
    return vectoriser, [(i, j, c) for (i, j), c in pairs.items()]


def pair_cosines(vectoriser, pairs: list[tuple[str, str]]) -> np.ndarray:
    """The cosine of each pair's two texts under ``vectoriser``."""
    left, right = vectoriser.transform([a for a, _ in pairs]), vectoriser.transform([b for _, b in pairs])
    return np.asarray(left.multiply(right).sum(axis=1)).ravel()


def mined_pairs(out: Path, task: TaskOptions, rows: int, corpus: str = CORPUS, low: float = 0.5) -> Path:
    """``out`` (JSONL, the task's two text fields a row; written once, atomically): at most ``rows``
    mined pairs (module doc)."""
    if out.is_file():
        return out
    data = load_task(task)
    fields = list(data.spec.text_fields)
    texts = [s for s in corpus_sentences(corpus) if MIN_WORDS <= len(s.split()) <= MAX_WORDS]
    vectoriser, pairs = mine(texts, low)
    shuffle = random.Random(0)
    shuffle.shuffle(pairs)
    pairs = pairs[:rows]
    own = pair_cosines(vectoriser, [example.texts for example in data.train])
    kept = np.array([c for _, _, c in pairs])
    quartiles = lambda values: " ".join(f"{q:.2f}" for q in np.percentile(values, [5, 25, 50, 75, 95]))
    print(f"mined: {len(pairs):,} pairs of {len(texts):,} sentences (cosine >= {low}); cosine 5/25/50/75/95%: "
          f"mined {quartiles(kept)}, {data.spec.name}'s training pairs {quartiles(own)}", flush=True)
    lines = []
    for i, j, _ in pairs:
        first, second = (texts[i], texts[j]) if shuffle.random() < 0.5 else (texts[j], texts[i])
        lines.append(json.dumps(dict(zip(fields, (first, second)))) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    partial.write_text("".join(lines))
    partial.replace(out)
    return out


def sentences_like(out: Path, task: TaskOptions, rows: int, corpus: str = CORPUS) -> Path:
    """``out`` (JSONL, the task's text field a row; written once, atomically): about ``rows`` corpus
    sentences whose word counts follow the task's training rows' (module doc), shuffled with seed 0."""
    if out.is_file():
        return out
    data = load_task(task)
    (field,) = data.spec.text_fields
    lengths = Counter(len(example.texts[0].split()) for example in data.train)
    by_length: dict[int, list[str]] = {}
    for sentence in corpus_sentences(corpus):
        by_length.setdefault(len(sentence.split()), []).append(sentence)
    draw = random.Random(0)
    chosen = []
    for length, count in sorted(lengths.items()):
        found = by_length.get(length, [])
        chosen += draw.sample(found, min(len(found), round(rows * count / len(data.train))))
    draw.shuffle(chosen)
    words = lambda texts: sum(len(t.split()) for t in texts) / len(texts)
    print(f"sentences: {len(chosen):,} of the corpus, {words(chosen):.1f} words on average; {data.spec.name}'s "
          f"training rows {words([e.texts[0] for e in data.train]):.1f}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    partial.write_text("".join(json.dumps({field: sentence}) + "\n" for sentence in chosen))
    partial.replace(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="mrpc", help="a GLUE task: a pair task's pairs are mined, a single "
                        "text task's sentences drawn like its rows")
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--low", type=float, default=0.5, help="pairs: the least cosine a kept pair has")
    parser.add_argument("--out", required=True)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    task = TaskOptions(task=args.task, data_dir=args.data_dir)
    if len(load_task(task).spec.text_fields) == 2:
        mined_pairs(Path(args.out), task, args.rows, low=args.low)
    else:
        sentences_like(Path(args.out), task, args.rows)


if __name__ == "__main__":
    main()
