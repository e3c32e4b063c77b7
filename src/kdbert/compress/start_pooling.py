"""What a search's start reads for a sentence pair, decided in one place for the start that trains
(:mod:`kdbert.compress.build`) and the random-weight copy that is timed (:mod:`kdbert.compress.speed`):
a pair-pooled graph masks each sentence's attention to itself, which ONNX Runtime does not fuse as it
fuses a padding mask (bert-1x384-ffn192 on STS-B rows, int8, one thread: 6.3x the teacher's speed
pair-pooled against 8.2x plain; ``benchmarks/timing_trained.py``), so a shape timed unpooled is admitted
up to 1.3x faster than it ships.

With ``pooling`` "pair" on a sentence-pair task, a start whose architecture marks the second sentence
(:data:`~kdbert.core.pooling.PAIR_POOLED_TYPES`: BERT by its token types, RoBERTa, XLM-R and MPNet by
their separators) encodes the two sentences apart and reads their normalised means multiplied, its
head starting as their cosine (:func:`~kdbert.core.pooling.pool_pairs`). "auto" does the same, except
for a classifier cut from the teacher that starts with the teacher's head: that one reads the pair as
one sequence, pooled as the teacher pools, as its head did (a regression's head starts as the cosine
either way).
"""

from __future__ import annotations

from kdbert.core.pooling import PAIR_POOLED_TYPES, pool_pairs
from kdbert.families.registry import Candidate, ShapeContext


def keeps_teacher_head(candidate: Candidate, context: ShapeContext) -> bool:
    """Whether ``candidate``'s start is a cut of the teacher's weights carrying its task head."""
    return candidate.family == "hf" and candidate.start == "teacher-weights" and context.head == "teacher"


def pool_as_started(student, context: ShapeContext, pooling: str, teacher_head: bool = False):
    """``student`` pooling pairs where ``pooling`` asks it on a pair task and its architecture can
    (module doc); ``teacher_head``: the start carries the teacher's task head, which "auto" keeps on a
    classifier. Returns ``student``."""
    keeps_teacher_reading = teacher_head and context.num_labels > 1
    wanted = pooling == "pair" or (pooling == "auto" and not keeps_teacher_reading)
    model_type = getattr(getattr(student, "config", None), "model_type", None)  # a BiLSTM has none
    if wanted and context.pair and model_type in PAIR_POOLED_TYPES:
        pool_pairs(student)
    return student
