"""Step 2 of ``kdbert compress``, its start: a kept candidate built from the teacher.

A BERT-style candidate takes the teacher's weights by selection (its layers g(m) = ceil(m N / M),
evenly spaced hidden units, heads, head dimensions and FFN units:
:func:`kdbert.families.bert.select_teacher_weights`); a MobileBERT candidate its fitted embedding
layer and copied head (:func:`kdbert.families.mobilebert.init_from_teacher`). The student is saved
as an ordinary HF folder with the teacher's tokenizer, the starting point of its distillation
(``kdbert distill task --student FOLDER``). A family without ``from_teacher`` (the BiLSTM) is
built by its own method from the task's texts and word vectors.
"""

from __future__ import annotations

import os
from pathlib import Path

from kdbert.compress.speed import shape_context
from kdbert.core.atomic_io import save_hf_folder
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate, ShapeContext, family_of_folder

__all__ = ["build_from_teacher"]


def build_from_teacher(candidate: Candidate, teacher_dir: str | os.PathLike, task: TaskOptions,
                       folder: str | os.PathLike, context: ShapeContext | None = None,
                       teacher: tuple | None = None) -> Path:
    """``candidate`` initialised from the teacher in ``teacher_dir``, saved to ``folder`` (atomically,
    with the teacher's tokenizer and ``student_init.json`` naming the candidate and its shape);
    ``context``: :func:`~kdbert.compress.speed.shape_context` and ``teacher``: the teacher's
    ``(model, tokenizer)`` as loaded from ``teacher_dir``, when the caller has them (not changed)."""
    if candidate.from_teacher is None:
        raise KdbertError(f"candidate {candidate.name} is built by its own method (--method {candidate.family}), "
                          "not from the teacher's weights")
    teacher, tokenizer = teacher or family_of_folder(teacher_dir).load(Path(teacher_dir))
    student = candidate.from_teacher(teacher, context or shape_context(teacher_dir, task))
    report = {"candidate": candidate.name, "shape": dict(candidate.shape), "teacher": str(teacher_dir)}
    save_hf_folder(student, tokenizer, Path(folder), {"student_init.json": report})
    return Path(folder)
