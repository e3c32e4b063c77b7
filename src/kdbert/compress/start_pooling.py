"""What a search's start reads for a sentence pair, decided in one place for the start that trains
(:mod:`kdbert.compress.build`) and the random-weight copy that is timed (:mod:`kdbert.compress.speed`):
a pair-pooled graph masks each sentence's attention to itself, which ONNX Runtime does not fuse as it
fuses a padding mask (bert-1x384-ffn192 on STS-B rows, int8, one thread: 6.3x the teacher's speed
pair-pooled against 8.2x plain; ``benchmarks/timing_trained.py``), so a shape timed unpooled is admitted
up to 1.3x faster than it ships.

With ``pooling`` "pair" (compress's default) on a sentence-pair task, a start whose architecture marks
the second sentence (:data:`~kdbert.core.pooling.PAIR_POOLED_TYPES`: BERT by its token types, RoBERTa,
XLM-R and MPNet by their separators) encodes the two sentences apart and reads their normalised means
multiplied, its head starting as their cosine (:func:`~kdbert.core.pooling.pool_pairs`; a classifier's
as a threshold on it, :func:`fit_cosine_classifier`, where the build has the training rows). "auto" does the same, except
for a classifier cut from the teacher that starts with the teacher's head: that one reads the pair as
one sequence, pooled as the teacher pools, as its head did (a regression's head starts as the cosine
either way).
"""

from __future__ import annotations

import torch

from kdbert.core.evaluate import predict
from kdbert.core.pooling import PAIR_POOLED_TYPES, cosine_head, pool_pairs
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.families.registry import Candidate, ShapeContext


def keeps_teacher_head(candidate: Candidate, context: ShapeContext) -> bool:
    """Whether ``candidate``'s start is a cut of the teacher's weights carrying its task head."""
    return candidate.family == "hf" and candidate.start == "teacher-weights" and context.head == "teacher"


def reads_pairs_apart(model, context: ShapeContext, pooling: str, teacher_head: bool = False) -> bool:
    """Whether a start of ``model``'s architecture pools pairs under ``pooling`` (module doc):
    ``teacher_head``, the start carries the teacher's task head, which "auto" keeps on a classifier."""
    keeps_teacher_reading = teacher_head and context.num_labels > 1
    wanted = pooling == "pair" or (pooling == "auto" and not keeps_teacher_reading)
    model_type = getattr(getattr(model, "config", None), "model_type", None)  # a BiLSTM has none
    return wanted and context.pair and model_type in PAIR_POOLED_TYPES


def pool_as_started(student, context: ShapeContext, pooling: str, teacher_head: bool = False):
    """``student`` pooling pairs where :func:`reads_pairs_apart` says. Returns ``student``."""
    if reads_pairs_apart(student, context, pooling, teacher_head):
        pool_pairs(student)
    return student


FIT_ROWS = 2000
"""Training rows, at most, on which a pair-pooled classifier's cosine head is fitted (evenly strided)."""


def fit_cosine_classifier(student, tokenizer, rows: list, max_seq_len: int, limit: int = FIT_ROWS):
    """A pair-pooled classifier's head fitted as logit_c = a_c cos(u, v) + b_c (:func:`cosine_head`)
    to the labels of up to ``limit`` of ``rows`` (training :class:`~kdbert.data.glue.Example` rows,
    evenly strided): the start reads a threshold on its own sentences' cosine, which a cut of a
    sentence encoder already draws well, where a zero head starts every row at a tie (MRPC:
    ``benchmarks/recipe_ablation.py`` variants ``importance-pair-cosine-head`` and
    ``importance-pair-zero-head``). Returns ``student``; a regression, or rows without labels, leave
    it as it is."""
    classes = student.config.num_labels
    labelled = [row for row in rows if row.label is not None]
    if classes < 2 or not labelled:
        return student
    picked = labelled[::max(1, len(labelled) // limit)][:limit]
    cosine_head(student, torch.ones(classes), torch.zeros(classes))  # every logit reads cos(u, v)
    dataset = encode_examples(tokenizer, picked, max_seq_len)
    cosines = torch.from_numpy(predict(student, dataset, PaddingCollator(tokenizer.pad_token_id))[:, 0])
    labels = torch.tensor([int(row.label) for row in picked])
    return cosine_head(student, *one_feature_logistic(cosines, labels, classes))


def one_feature_logistic(values: torch.Tensor, labels: torch.Tensor, classes: int,
                         l2: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b), each (C,), minimising mean_n CE(a values_n + b, labels_n) + l2 |a|^2 (multinomial
    logistic regression on one feature; the penalty fixes the shift softmax ignores in a)."""
    values = values.to(torch.float64)
    scale = values.std().clamp(min=1e-6)  # fit on standardised values, then map back
    z = (values - values.mean()) / scale
    a = torch.zeros(classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([a, b], max_iter=200, line_search_fn="strong_wolfe")

    def loss():
        optimizer.zero_grad()
        value = torch.nn.functional.cross_entropy(z.unsqueeze(1) * a + b, labels) + l2 * (a * a).sum()
        value.backward()
        return value

    optimizer.step(loss)
    a, b = a.detach(), b.detach()
    return (a / scale).float(), (b - a * values.mean() / scale).float()
