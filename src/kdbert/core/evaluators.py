"""The evaluator of a task: :class:`~kdbert.core.qa_evaluate.QAEvaluator` (EM / F1 over windows) for
question answering, else :class:`~kdbert.core.evaluate.TaskEvaluator` (the task's metrics)."""

from __future__ import annotations

from kdbert.core.evaluate import TaskEvaluator
from kdbert.core.qa_evaluate import QAEvaluator
from kdbert.data.batching import ModelInputs
from kdbert.data.glue import TaskData
from kdbert.errors import KdbertError


def task_evaluator(data: TaskData, tokenizer, max_seq_len: int | None = None, batch_size: int = 64,
                   inputs: ModelInputs | None = None):
    """The evaluator of ``data``'s task: :class:`~kdbert.core.qa_evaluate.QAEvaluator` (EM / F1 over
    windows) for question answering, else :class:`TaskEvaluator`."""
    if data.spec.question_answering:
        if inputs is not None:
            raise KdbertError(f"{data.spec.name} is question answering, which needs a token-level student on the "
                              "teacher's tokenizer")
        return QAEvaluator(data, tokenizer, max_seq_len, batch_size)
    return TaskEvaluator(data, tokenizer, max_seq_len, batch_size, inputs)
