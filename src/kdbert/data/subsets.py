"""Which training rows a run reads when ``--max-train-examples N`` caps them (``--train-subset``).

``first`` (the default): the file's first ``N`` rows (after the hold-out).

``like-dev``: where the training rows' lengths differ from dev's
(:func:`~kdbert.data.held_out.lengths_differ`, the test that draws held-out rows), the rows whose
lengths follow dev's come first (:func:`~kdbert.data.held_out.length_matched_indices` over dev's
length deciles, a bin giving up to all of its rows), then the others in the file's order, the
first ``N`` of them kept; where the lengths do not differ, ``first``. SST-2's training file is
mostly phrases cut from its sentences' parse trees (median 7 words, dev's sentences 19): its first
16,000 rows average 9.5 words, the ``like-dev`` ones 17.6. A student distilled on them learns from
the teacher's outputs on text like what it will meet: on the main job's student and teacher
(bert-2x384-ffn192, 1,800 steps, ``benchmarks/recipe_ablation.py``) it scored better on dev, on
the rows that pick and on those that decide; but each step reads longer rows (on SST-2 1.67x the
padded tokens, a step 1.35-1.4x longer), and within the main job's fixed minutes it came out
level, so ``first`` stays the default.

Either way the rows keep the file's order among themselves, so that a run's batches depend only on
which rows it reads and its seed.
"""

from __future__ import annotations

from kdbert.data.glue import Example, TaskData
from kdbert.data.held_out import length_matched_indices, lengths_differ
from kdbert.errors import KdbertError
from kdbert.options import TRAIN_SUBSETS

__all__ = ["TRAIN_SUBSETS", "training_rows"]


def training_rows(data: TaskData, count: int | None, subset: str = "first") -> list[Example]:
    """``data.train`` cut to ``count`` rows as ``subset`` says (module doc); all of them when
    ``count`` is None or not below their number."""
    if subset not in TRAIN_SUBSETS:
        raise KdbertError(f"--train-subset {subset} is unknown; choose one of {', '.join(TRAIN_SUBSETS)}")
    if not count or count >= len(data.train):
        return data.train
    dev = [row for rows in data.dev.values() for row in rows]
    if subset == "first" or not lengths_differ(data.train, dev):
        return data.train[:count]
    matched = length_matched_indices(data.train, dev, count, max_share=1.0)
    chosen = set(matched)
    order = matched + [i for i in range(len(data.train)) if i not in chosen]
    return [data.train[i] for i in sorted(order[:count])]
