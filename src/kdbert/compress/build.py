"""Step 2 of ``kdbert compress``, its start: a kept candidate built from the teacher.

A candidate of the teacher's architecture (``bert-2x256``, ``roberta-2x256``, ...) takes the
teacher's weights by selection (its layers g(m) = ceil(m N / M), evenly spaced hidden units, heads,
head dimensions and FFN units: :func:`kdbert.families.selection.select_teacher_weights`); a
MobileBERT candidate its fitted embedding layer and copied head (:func:`kdbert.families.mobilebert.init_from_teacher`). The student is saved
as an ordinary HF folder with the teacher's tokenizer (a student of its own tokenizer: with that
one), the starting point of its distillation (``kdbert distill task --student FOLDER``). A family without ``from_teacher`` (the BiLSTM) is
built by its own method from the task's texts and word vectors.

Where a general student of the candidate's shape was built for the teacher's base
(:mod:`kdbert.students`), the start takes its encoder instead (:func:`build_from_general`): the
classifier stays fresh (a general student's hidden units are not the teacher's, so the teacher's head,
which a cut from the teacher starts with under ``--head teacher``, would read other units).

A sentence-pair task's start reads the pair as ``pooling`` says (the teacher's students and a
``--student`` or pre-trained candidate alike; :mod:`kdbert.compress.start_pooling`, which the timing
follows too); a pair-pooled classifier's head starts as a threshold on its two sentences' cosine,
fitted on the training rows; ``student_init.json`` records the pooling and the head.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kdbert.compress.options import CompressConfig
from kdbert.compress.speed import shape_context
from kdbert.compress.start_pooling import fit_cosine_classifier, keeps_teacher_head, pool_as_started
from kdbert.core.atomic_io import save_hf_folder
from kdbert.core.loading import load_tokenizer
from kdbert.core.pooling import pooling_of
from kdbert.data.glue import TaskData
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate, ShapeContext, family_of_folder
from kdbert.families.selection import LAYER_CHOICES

__all__ = ["build_from_general", "build_from_teacher"]


def build_from_teacher(candidate: Candidate, teacher_dir: str | os.PathLike, task: TaskOptions,
                       folder: str | os.PathLike, context: ShapeContext | None = None,
                       teacher: tuple | None = None, pooling: str = CompressConfig.pooling,
                       data: TaskData | None = None) -> Path:
    """``candidate`` initialised from the teacher in ``teacher_dir``, saved to ``folder`` (atomically,
    with the teacher's tokenizer, or the candidate's own, and ``student_init.json`` naming the
    candidate and its shape);
    ``context``: :func:`~kdbert.compress.speed.shape_context` and ``teacher``: the teacher's
    ``(model, tokenizer)`` as loaded from ``teacher_dir``, when the caller has them (not changed);
    ``pooling``: the search's (module doc); ``data``: the task's rows, on whose training rows a
    pair-pooled classifier's cosine head is fitted (None: it starts at zero)."""
    if candidate.from_teacher is None:
        raise KdbertError(f"candidate {candidate.name} is built by its own method (--method {candidate.family}), "
                          "not from the teacher's weights")
    teacher, tokenizer = teacher or family_of_folder(teacher_dir).load(Path(teacher_dir))
    context = context or shape_context(teacher_dir, task)
    cut = candidate.family == "hf" and candidate.start == "teacher-weights"  # weight selection
    student = pool_as_started(candidate.from_teacher(teacher, context), context, pooling,
                              keeps_teacher_head(candidate, context))
    tokenizer = load_tokenizer(candidate.tokenizer) if candidate.tokenizer else tokenizer
    fitted = _fit_pair_head(student, tokenizer, data)
    report = {"candidate": candidate.name, "shape": dict(candidate.shape), "teacher": str(teacher_dir),
              "start": candidate.start, "pooling": pooling_of(student.config)}
    if cut:
        report["selection"] = "importance" if context.importance is not None else (
            context.layer_map if context.layer_map in LAYER_CHOICES else "even")
        report["head"] = context.head
    if pooling_of(student.config) == "pair":
        report["head"] = "cosine threshold fitted on the training rows (pair pooling)" if fitted else "cosine (pair pooling)"
    save_hf_folder(student, tokenizer, Path(folder), {"student_init.json": report})
    return Path(folder)


def _fit_pair_head(student, tokenizer, data: TaskData | None) -> bool:
    """Fit a pair-pooled classifier's cosine head on ``data``'s training rows
    (:func:`~kdbert.compress.start_pooling.fit_cosine_classifier`); whether it did."""
    fitted = data is not None and pooling_of(student.config) == "pair" and student.config.num_labels > 1
    if fitted:
        fit_cosine_classifier(student, tokenizer, data.train, data.spec.max_seq_len)
    return fitted


SHAPE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def build_from_general(candidate: Candidate, student_dir: str | os.PathLike, teacher_dir: str | os.PathLike,
                       task: TaskOptions, folder: str | os.PathLike, context: ShapeContext | None = None,
                       teacher: tuple | None = None, pooling: str = CompressConfig.pooling,
                       data: TaskData | None = None) -> Path:
    """``candidate``'s start with the encoder of the general student in ``student_dir`` (a bare
    ``BertModel`` of the same shape) and the task head of :func:`build_from_teacher` (pooling as
    ``pooling`` says, a pair-pooled classifier's head fitted on ``data``'s training rows); saved to
    ``folder`` with ``student_init.json`` saying so."""
    from transformers import BertModel

    teacher, tokenizer = teacher or family_of_folder(teacher_dir).load(Path(teacher_dir))
    context = context or shape_context(teacher_dir, task)
    student = pool_as_started(candidate.from_teacher(teacher, context), context, pooling)
    general = BertModel.from_pretrained(student_dir)
    differ = [name for name in SHAPE_FIELDS if getattr(general.config, name) != getattr(student.config, name)]
    if differ:
        raise KdbertError(f"general student {student_dir} does not have {candidate.name}'s shape ({', '.join(differ)} "
                          "differ); build it again from this teacher's base with `kdbert students build`")
    student.bert.load_state_dict(general.state_dict())
    _fit_pair_head(student, tokenizer, data)  # on the general student's encoder, which the cosine reads
    built = json.loads((Path(student_dir) / "student_init.json").read_text())
    report = {"candidate": candidate.name, "shape": dict(candidate.shape), "teacher": str(teacher_dir),
              "start": "general", "pooling": pooling_of(student.config), "general": {"folder": str(student_dir), **{k: built.get(k) for k in
                                                                              ("base", "key", "steps", "minutes")}}}
    save_hf_folder(student, tokenizer, Path(folder), {"student_init.json": report})
    return Path(folder)
