"""The protocol between the distillation front and a method: what a method receives and returns.

A method (registered in :mod:`kdbert.methods.registry`) is one :class:`Method` object: its typed
configs and the hooks the front (:mod:`kdbert.methods.front`) calls, in this order::

    task:     task_inputs(source, config) -> TaskInputs      (default: initial_student + the
                                                               teacher's tokens, student_inputs)
              build_task_plan(DistillContext) -> Plan
    general:  general_teacher(config) -> (teacher, path);  general_student(teacher, tokenizer, config)
              general_max_seq_len(config, teacher, student);  general_data(sequences, tokenizer, teacher,
              config) -> (dataset, collator, report);  build_general_plan(DistillContext) -> Plan

A method builds students and plans and does no I/O of its own beyond loading a student: the
front loads the data and models, trains and reports, and serves what needs files (the teacher's
stored logits, :meth:`TaskSource.teacher_logits`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from torch import nn

from kdbert.core.evaluators import task_evaluator
from kdbert.core.loading import vocabulary_mismatch
from kdbert.core.teacher_logits import stored_teacher_logits, unlabelled_store_folder
from kdbert.data.batching import EncodedDataset, ModelInputs, TaskCollator, TokenizerInputs, encode_task
from kdbert.data.glue import Example, TaskData
from kdbert.data.load import TaskOptions
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError

if TYPE_CHECKING:
    from kdbert.core.trainer import Stage

GENERAL_MAX_SEQ_LEN = 128


@dataclass
class Student:
    """The initial student and where it came from (``origin``, for reports and errors);
    ``copied_layers``: the 0-based teacher layers its layers were copied from, in order, when it was
    built so (``--student-layers``)."""

    model: nn.Module
    origin: str
    copied_layers: tuple[int, ...] | None = None


@dataclass
class TaskInputs:
    """What task distillation trains on, from :meth:`Method.task_inputs`.

    Attributes:
        student: the initial :class:`Student`.
        train_set: encoded training rows (``train_set.lengths`` orders the batches).
        collator: features -> batch (the student's inputs, labels, whatever the losses read).
        evaluator: ``evaluator(student) -> metrics`` on the dev split(s), with ``"score"``.
        saved_with_student: the teacher's tokenizer or the student's vocabulary: anything with
            ``save_pretrained(folder)``, written beside the saved student.
        report: facts for ``distill_report.json`` (vocabulary size, stored teacher logits...).
        teacher: the teacher the plan runs when it is not the loaded one (the
            :class:`~kdbert.core.teacher_logits.StoredTeacherLogits` of rows that carry them).
    """

    student: Student
    train_set: EncodedDataset
    collator: Callable
    evaluator: Callable
    saved_with_student: Any
    report: dict = field(default_factory=dict)
    teacher: nn.Module | None = None


@dataclass
class TaskSource:
    """What the front loaded for task distillation: the teacher (eval mode) and its tokenizer, the
    task, the training ``rows`` (``--max-train-examples`` applied; the last ``unlabelled`` of them
    the ``--unlabelled`` rows the teacher labelled) and the teacher's token limit."""

    teacher: nn.Module
    tokenizer: Any
    data: TaskData
    rows: list[Example]
    max_seq_len: int
    task: TaskOptions
    unlabelled: int = 0

    def teacher_logits(self, dtype: str = "float32", folder: str | None = None, onnx: str | None = None,
                       output: str = "logits"):
        """The teacher's logits (N, C) on ``rows``, computed once and stored (beside the training
        file, or in ``folder``: :func:`kdbert.core.teacher_logits.stored_teacher_logits`; the
        ``--unlabelled`` rows where their labelling stored them, :func:`unlabelled_store_folder`),
        by the teacher's export ``onnx`` when given, and the facts for the report; ``output``
        "sentence": its sentence vectors (N, d) instead, by the PyTorch teacher."""
        spec, kept = self.data.spec, len(self.rows) - self.unlabelled
        logits, facts = stored_teacher_logits(self.teacher, self.tokenizer, self.rows[:kept], self.task, spec,
                                              self.max_seq_len, dtype, folder, onnx, output)
        if self.unlabelled:
            store = str(unlabelled_store_folder(self.task, spec, folder))
            labelled, _ = stored_teacher_logits(self.teacher, self.tokenizer, self.rows[kept:], self.task, spec,
                                                self.max_seq_len, dtype, store, onnx, output)
            logits, facts["rows"] = np.concatenate([logits, labelled]), len(self.rows)
        return logits, facts


@dataclass
class DistillContext:
    """Inputs of a method's plan.

    Attributes:
        teacher: fine-tuned HF sequence classifier (task) or pre-trained encoder (general).
        student: the initial :class:`Student`.
        tokenizer: the teacher's tokenizer (the student's too, unless the batch carries its own inputs).
        spec: the task (``None`` for general distillation).
        train_set: encoded training rows.
        config: the method's typed config, task defaults resolved.
        seed: run seed.
    """

    teacher: nn.Module
    student: Student
    tokenizer: Any
    spec: TaskSpec | None
    train_set: EncodedDataset
    config: Any
    seed: int = 42


@dataclass
class Plan:
    """Output of a method: ``modules["student"]`` plus extra trainable modules (projections are
    added by the stages' losses on the first batch), frozen models (``{"teacher": ...}``), the
    stages, and facts for the report (layer map, loss weights...)."""

    modules: dict[str, nn.Module]
    frozen: dict[str, nn.Module]
    stages: list[Stage]
    report: dict = field(default_factory=dict)

    @property
    def matches(self) -> dict:
        return {s.config.name: list(getattr(s.loss_fn, "matches", [])) for s in self.stages}


class Method:
    """A distillation method (module docstring). Subclasses set ``name``, ``help``, ``config``
    (the task options, a :class:`kdbert.options.MethodConfig`) and, with a general stage,
    ``general_config``, and override the hooks they use."""

    name: str = ""
    help: str = ""
    config: type
    general_config: type | None = None

    # ------------------------------------------------------------------------- task distillation
    def initial_student(self, teacher: nn.Module, spec: TaskSpec, config) -> Student:
        """The student task distillation starts from (read by the default :meth:`task_inputs`)."""
        raise NotImplementedError(f"{self.name} builds its student in task_inputs")

    def student_inputs(self, student: Student, config, spec: TaskSpec) -> ModelInputs | None:
        """The student's own inputs (another vocabulary), or ``None``: it reads the teacher's tokens."""
        return None

    def task_inputs(self, source: TaskSource, config) -> TaskInputs:
        """:meth:`initial_student`; the rows encoded once by the teacher's tokenizer and, when
        :meth:`student_inputs` gives inputs of its own, by the student's too;
        :class:`~kdbert.data.batching.TaskCollator`, :func:`~kdbert.core.evaluators.task_evaluator`.
        A method whose student is built from the data itself (the BiLSTM's word vocabulary)
        overrides this."""
        teacher, tokenizer, spec = source.teacher, source.tokenizer, source.data.spec
        if config.student and Path(str(config.student)).is_dir():
            difference = vocabulary_mismatch(config.student, teacher, tokenizer)
            if difference is not None:
                raise KdbertError(f"--method {self.name} needs a student of the teacher's tokenizer (it matches what "
                                  f"they compute per token), but --student {config.student} uses a different "
                                  f"vocabulary ({difference}); --method kd distils a student of its own tokenizer "
                                  "from the teacher's logits per row")
        student = self.initial_student(teacher, spec, config)
        teacher_inputs = TokenizerInputs.for_task(tokenizer, source.max_seq_len, spec)
        student_inputs = self.student_inputs(student, config, spec)
        return TaskInputs(student, encode_task(source.rows, teacher_inputs, student_inputs),
                          TaskCollator(teacher_inputs, student_inputs, spec.is_regression),
                          task_evaluator(source.data, tokenizer, source.max_seq_len, inputs=student_inputs), tokenizer)

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        raise NotImplementedError

    # ------------------------------------------------------------------------- general distillation
    def general_teacher(self, config) -> tuple[nn.Module, str]:
        """The pre-trained teacher and the path it was loaded from."""
        raise NotImplementedError(f"{self.name} has no general distillation")

    def general_student(self, teacher: nn.Module, tokenizer, config) -> Student:
        raise NotImplementedError(f"{self.name} has no general distillation")

    def general_max_seq_len(self, config, teacher: nn.Module, student: Student) -> int:
        """``--max-seq-len``, by default 128 or the models' position limit, checked against it."""
        limit = min(teacher.config.max_position_embeddings, student.model.config.max_position_embeddings)
        max_seq_len = config.max_seq_len or min(GENERAL_MAX_SEQ_LEN, limit)
        if not 3 <= max_seq_len <= limit:
            raise KdbertError(f"--max-seq-len {max_seq_len} is out of range; the models take 3..{limit} tokens")
        return max_seq_len

    def general_data(self, sequences: list[list[int]], tokenizer, teacher: nn.Module, config):
        """``(dataset, collator, report)`` of the packed corpus ``sequences``."""
        raise NotImplementedError(f"{self.name} has no general distillation")

    def build_general_plan(self, ctx: DistillContext) -> Plan:
        raise NotImplementedError(f"{self.name} has no general distillation")
