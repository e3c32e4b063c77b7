"""Rule-based data augmentation of the distilled BiLSTM (Tang et al. 2019, section 3.1).

The paper builds a larger transfer set for the teacher to label. For each example, ``n_iter``
synthetic versions are drawn; each one walks over the words (:func:`kdbert.families.bilstm.words.word_spans`)
in order, drawing X_i ~ U[0, 1] per word:

- X_i < p_mask: **masking**, the word becomes ``[MASK]`` (the teacher reads its mask token, the
  student the ``[MASK]`` id of its vocabulary, apart from unknown words);
- p_mask <= X_i < p_mask + p_pos: **POS-guided replacement**, the word becomes another word
  with the same part-of-speech tag, drawn from the training data's unigram distribution of
  that tag ("re-normalised by the POS tag"; the word itself excluded, a Title-case word gets a
  Title-case replacement; a tag with no other word leaves it unchanged);

(the two rules exclude each other). Then, with probability p_ng, **n-gram sampling**: n is
drawn from {1, ..., max_n} (clipped to the example's length) and a start position uniformly;
``ngram_mode="keep"`` (default, the paper: "equivalent to dropping out all other words")
keeps only those n words, ``"mask"`` (the reading in some summaries: "mask them together")
masks those n words instead. p_ng is :data:`P_NG` (the paper's 0.25) by default, and
:data:`PAIR_P_NG` for sentence pairs in :func:`kdbert.cli.augment.augment_task_bilstm` (the paper's
text says 0.25 for every task; the authors' pair augmenter uses 0). Duplicate versions, and
versions equal to the original, are dropped; the original comes first, so an example yields 1
to ``n_iter + 1`` rows.

Sentence pairs, as the paper: the versions cycle through augmenting the first sentence only
(the second held fixed), the second only, and both (version k: k mod 3), each sentence with
its own draws.

Tags are Penn Treebank tags from NLTK's averaged perceptron tagger (no download: point
``nltk_data`` at a folder holding ``taggers/averaged_perceptron_tagger_eng``), computed once per
distinct text on the words as written; candidate counts are per (lowercased word, tag) over
every text column of every training row.

Randomness: each example's versions come from a numpy Generator seeded with ``(seed,
hash(example's texts))``, so they do not depend on the example's position, the chunking or a
resumed run. Draw order per version and sentence: X (one per word), U (one per word, picks the
replacement), the n-gram coin, n, the start.

Output text: the original string with replaced words substituted in place (the rest of the
characters as written; a changed word that touched its neighbour, as in ``didn't`` -> ``did`` +
``n't``, is set apart by a space); a kept n-gram is the substring from its first to its last word.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kdbert.augment.tinybert import text_seed, write_augmented_rows
from kdbert.augment.pos_tagging import PosTagger
from kdbert.data.masking import MASK_TOKEN
from kdbert.families.bilstm.words import word_spans
from kdbert.errors import KdbertError

NGRAM_MODES = ("keep", "mask")
# n-gram sampling probability without --p-ng: the paper's 0.25, for sentence pairs too. The authors'
# pair augmenter uses 0; measured, it scored lower (STS-B at hidden 150: 74.0 against 76.0 +- 1.0;
# with hidden 300 on MRPC and RTE too: BENCHMARKS.md, distilled BiLSTM). Set PAIR_P_NG to switch.
P_NG = 0.25
PAIR_P_NG = 0.25


@dataclass(frozen=True)
class TaggedText:
    """A text's words as written, their character spans and their POS tags."""

    text: str
    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    tags: tuple[str, ...]


class PosCandidates:
    """For each POS tag, the lowercased training words with that tag and their counts."""

    def __init__(self, counts: dict[str, Counter]):
        self.words: dict[str, list[str]] = {}
        self.cumulative: dict[str, np.ndarray] = {}
        self.position: dict[str, dict[str, int]] = {}
        for tag, counter in counts.items():
            words = sorted(counter, key=lambda w: (-counter[w], w))
            self.words[tag] = words
            self.cumulative[tag] = np.cumsum([counter[w] for w in words])
            self.position[tag] = {w: i for i, w in enumerate(words)}

    def digest(self) -> str:
        """A hash of every (tag, word, count): identifies the candidates in resume fingerprints."""
        table = {tag: [self.words[tag], self.cumulative[tag].tolist()] for tag in sorted(self.words)}
        return hashlib.blake2b(json.dumps(table).encode("utf-8"), digest_size=16).hexdigest()

    @classmethod
    def from_tagged(cls, tagged: Sequence[TaggedText]) -> PosCandidates:
        """Counts of (lowercased word, tag) over ``tagged`` (repeat a text to count it twice)."""
        counts: dict[str, Counter] = defaultdict(Counter)
        for item in tagged:
            for word, tag in zip(item.words, item.tags):
                if word != MASK_TOKEN:
                    counts[tag][word.lower()] += 1
        return cls(counts)

    def draw(self, word: str, tag: str, u: float) -> str | None:
        """The word at quantile ``u`` in [0, 1) of ``tag``'s unigram distribution without ``word``
        (lowercased); ``None`` when ``tag`` has no other word."""
        cumulative = self.cumulative.get(tag)
        if cumulative is None:
            return None
        index = self.position[tag].get(word)
        own = 0 if index is None else int(cumulative[index] - (cumulative[index - 1] if index else 0))
        rest = int(cumulative[-1]) - own
        if rest <= 0:
            return None
        target = u * rest
        if index is not None and target >= (cumulative[index - 1] if index else 0):
            target += own  # skip the word's own interval
        return self.words[tag][int(np.searchsorted(cumulative, target, side="right"))]


def _match_case(new: str, old: str) -> str:
    return new.title() if old.istitle() else new


def synthesize(item: TaggedText, x: np.ndarray, u: np.ndarray, ngram: tuple[int, int] | None,
               candidates: PosCandidates, p_mask: float, p_pos: float, ngram_mode: str = "keep") -> str:
    """One synthetic version of ``item`` from explicit draws (the rules, without randomness).

    ``x``, ``u``: one value in [0, 1) per word (rule choice; replacement quantile); ``ngram``:
    ``(start, n)`` of the sampled n-gram, or ``None`` when n-gram sampling is not applied.
    """
    out = list(item.words)
    for i, word in enumerate(item.words):
        if x[i] < p_mask:
            out[i] = MASK_TOKEN
        elif x[i] < p_mask + p_pos:
            new = candidates.draw(word.lower(), item.tags[i], float(u[i]))
            if new is not None:
                out[i] = _match_case(new, word)
    first, last = 0, len(out) - 1
    if ngram is not None:
        start, n = ngram
        if ngram_mode == "keep":
            first, last = start, start + n - 1
        else:
            out[start:start + n] = [MASK_TOKEN] * n
    text, spans = item.text, item.spans
    pieces = [text[:spans[first][0]] if ngram is None or ngram_mode == "mask" else ""]
    for i in range(first, last + 1):
        if i > first:
            gap = text[spans[i - 1][1]:spans[i][0]]
            changed = out[i] != item.words[i] or out[i - 1] != item.words[i - 1]
            pieces.append(" " if changed and not gap else gap)
        pieces.append(out[i])
    pieces.append(text[spans[last][1]:] if ngram is None or ngram_mode == "mask" else "")
    return "".join(pieces)


class BiLSTMAugmenter:
    """The paper's augmentation; see the module docstring. Build it with :meth:`from_texts`."""

    def __init__(self, candidates: PosCandidates, tagger: PosTagger, p_mask: float = 0.1, p_pos: float = 0.1,
                 p_ng: float = P_NG, n_iter: int = 20, ngram_mode: str = "keep", max_n: int = 5, seed: int = 42):
        if min(p_mask, p_pos, p_ng) < 0 or p_mask + p_pos > 1 or p_ng > 1 or min(n_iter, max_n) < 1:
            raise KdbertError(f"need p_mask, p_pos, p_ng >= 0, p_mask + p_pos <= 1, p_ng <= 1, n_iter >= 1 and "
                              f"max_n >= 1 (got p_mask={p_mask}, p_pos={p_pos}, p_ng={p_ng}, n_iter={n_iter}, "
                              f"max_n={max_n})")
        if ngram_mode not in NGRAM_MODES:
            raise KdbertError(f"--ngram-mode {ngram_mode!r}: choose one of {', '.join(NGRAM_MODES)}")
        self.candidates, self.tagger = candidates, tagger
        self.p_mask, self.p_pos, self.p_ng, self.n_iter = p_mask, p_pos, p_ng, n_iter
        self.ngram_mode, self.max_n, self.seed = ngram_mode, max_n, seed
        self._tagged: dict[str, TaggedText] = {}

    @classmethod
    def from_texts(cls, texts: Sequence[str], tagger: PosTagger, **settings) -> BiLSTMAugmenter:
        """Tag the training ``texts`` (every text column of every row; repeats count) and use
        them as the POS candidates; ``settings`` are :class:`BiLSTMAugmenter`'s options."""
        augmenter = cls(PosCandidates({}), tagger, **settings)
        tagged = augmenter.tag(texts)
        augmenter.candidates = PosCandidates.from_tagged(tagged)
        return augmenter

    def settings(self) -> list:
        """What decides the output besides the rows augmented (for resume fingerprints): the rules'
        settings, the tagger and the POS candidates (which come from all training rows)."""
        return [self.p_mask, self.p_pos, self.p_ng, self.n_iter, self.ngram_mode, self.max_n, self.seed,
                self.tagger.name, self.candidates.digest()]

    def tag(self, texts: Sequence[str]) -> list[TaggedText]:
        """Words, spans and tags of ``texts``; each distinct text is tagged once (cached)."""
        new = [t for t in dict.fromkeys(texts) if t not in self._tagged]
        spans = [word_spans(t) for t in new]
        tags = self.tagger([[w for w, _, _ in s] for s in spans])
        for text, found, text_tags in zip(new, spans, tags):
            self._tagged[text] = TaggedText(text, tuple(w for w, _, _ in found),
                                            tuple((a, b) for _, a, b in found), tuple(text_tags))
        return [self._tagged[t] for t in texts]

    def augment(self, examples: Sequence[tuple[str, ...]]) -> list[list[tuple[str, ...]]]:
        """For each example (one or two texts): the original, then its distinct new versions."""
        self.tag([t for texts in examples for t in texts])
        return [self._versions(tuple(texts)) for texts in examples]

    def _versions(self, texts: tuple[str, ...]) -> list[tuple[str, ...]]:
        items = [self._tagged[t] for t in texts]
        rng = np.random.default_rng(text_seed(self.seed, "\x1f".join(texts)))
        cycle = [(0,)] if len(texts) == 1 else [(0,), (1,), (0, 1)]
        out, seen = [texts], {texts}
        for k in range(self.n_iter):
            version = list(texts)
            for side in cycle[k % len(cycle)]:
                if items[side].words:
                    version[side] = self._one(items[side], rng)
            version = tuple(version)
            if version not in seen:
                seen.add(version)
                out.append(version)
        return out

    def _one(self, item: TaggedText, rng: np.random.Generator) -> str:
        length = len(item.words)
        x, u = rng.random(length), rng.random(length)
        coin, n, start = rng.random(), rng.integers(1, self.max_n + 1), rng.random()
        ngram = None
        if coin < self.p_ng:
            n = min(int(n), length)
            ngram = (int(start * (length - n + 1)), n)
        return synthesize(item, x, u, ngram, self.candidates, self.p_mask, self.p_pos, self.ngram_mode)


def augment_rows(rows: list[dict], columns: list[str], out_path: str | os.PathLike, augmenter: BiLSTMAugmenter,
                 chunk_size: int = 1024, write_header: bool = True) -> int:
    """Augment ``rows`` (dicts; ``columns``: the one or two text columns, augmented together as
    one example) into ``out_path`` in their own format (``.jsonl``, else TSV), resumably.

    Each row is written as is, then once per new version with the text columns replaced and the
    other columns (the label too) copied: the copied labels of synthetic rows are not gold
    labels, the teacher's outputs are what trains on them. Resume, atomic completion and the
    chunked ``.partial`` / ``.progress.json`` protocol are those of
    :func:`kdbert.augment.tinybert.write_augmented_rows`.
    """
    if not 1 <= len(columns) <= 2:
        raise KdbertError(f"BiLSTM augmentation reads one text column or a pair, not {len(columns)} ({columns})")
    digest = hashlib.blake2b(json.dumps(rows, sort_keys=True).encode("utf-8"), digest_size=16).hexdigest()
    fingerprint = json.dumps({"method": "bilstm", "rows": digest, "columns": columns,
                              "settings": augmenter.settings()})

    def expand(chunk: list[dict]) -> list[dict]:
        versions = augmenter.augment([tuple(str(row[c]) for c in columns) for row in chunk])
        out = []
        for row, row_versions in zip(chunk, versions):
            out.append(row)
            out += [{**row, **dict(zip(columns, texts))} for texts in row_versions[1:]]
        return out

    return write_augmented_rows(rows, columns, out_path, expand, fingerprint, chunk_size, write_header)
