"""How near rows come to the training rows, by the words they share.

A text's nearness is its largest word-set Jaccard similarity to a training text,
``|a & b| / (|a| + |b| - |a & b|)`` over lower-cased words (runs of ``[a-z0-9]``); a row's is the
mean over its texts. CoLA's training file holds a linguistics paper's example sentences in groups
that differ by a word or two, so a training row drawn at random has a sibling left in training
(mean nearness 0.62, 67% of rows at 0.5 or more), where its dev rows come from elsewhere in those
papers (0.49, 42%); held-out rows drawn uniformly would then score a model on its training rows'
siblings (:mod:`kdbert.data.held_out`).

Cost: one ``CHUNK x training texts`` dense block at a time; the held-out rule computes it only up to
:data:`MAX_ROWS` training rows.
"""

from __future__ import annotations

import re

import numpy as np

from kdbert.data.glue import Example

CHUNK = 512  # texts compared at once
MAX_ROWS = 20_000  # training rows above which the held-out rule does not measure nearness (module doc)
WORD = re.compile(r"[a-z0-9]+")


def word_sets(texts: list[str], vocabulary: dict[str, int], grow: bool) -> tuple[sparse.csr_matrix, np.ndarray]:
    """One row per text, a 1 in the column of each distinct lower-cased word of ``vocabulary`` (which
    grows with the texts' new words where ``grow``), and each text's count of distinct words, those
    outside ``vocabulary`` included."""
    from scipy import sparse  # here: scipy takes seconds to import, which most commands never need

    rows, cols, sizes = [], [], np.zeros(len(texts))
    for i, text in enumerate(texts):
        found = set(WORD.findall(text.lower()))
        sizes[i] = len(found)
        for word in found:
            if grow:
                vocabulary.setdefault(word, len(vocabulary))
            if word in vocabulary:
                rows.append(i)
                cols.append(vocabulary[word])
    matrix = sparse.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                               shape=(len(texts), max(len(vocabulary), 1)))
    return matrix, sizes


class TrainingTexts:
    """The training rows' texts as word sets, to measure other rows' nearness to them."""

    def __init__(self, train: list[Example]):
        self.vocabulary: dict[str, int] = {}
        self.texts_per_row = len(train[0].texts) if train else 1
        sets, self.sizes = word_sets([text for row in train for text in row.texts], self.vocabulary, grow=True)
        self.sets_t = sets.T.tocsr()

    def nearness(self, rows: list[Example], leave_out_self: bool = False) -> np.ndarray:
        """Each of ``rows``' nearness (module doc), shape ``(len(rows),)``; ``leave_out_self``: ``rows``
        are the training rows themselves, each compared with every training row but its own."""
        texts = [text for row in rows for text in row.texts]
        sets, sizes = word_sets(texts, self.vocabulary, grow=False)  # words unseen in training match nothing
        nearest = np.zeros(len(texts))
        for start in range(0, len(texts), CHUNK):
            stop = min(start + CHUNK, len(texts))
            shared = (sets[start:stop] @ self.sets_t).toarray()
            jaccard = shared / np.maximum(sizes[start:stop, None] + self.sizes[None, :] - shared, 1.0)
            if leave_out_self:  # text i belongs to row i // n, whose texts are columns n * row ... n * row + n - 1
                own = np.arange(start, stop) // self.texts_per_row
                for offset in range(self.texts_per_row):
                    jaccard[np.arange(stop - start), own * self.texts_per_row + offset] = 0.0
            nearest[start:stop] = jaccard.max(axis=1)
        per_text = len(rows[0].texts) if rows else 1
        return nearest.reshape(len(rows), per_text).mean(axis=1)
