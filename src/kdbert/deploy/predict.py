"""Run a trained model or its export on text: ``kdbert predict`` and :func:`kdbert.load`.

A model is a folder of any family (an HF classifier, the distilled BiLSTM) run in PyTorch, or an
export of ``kdbert export`` (its folder: ``model.onnx``; or one ``.onnx`` file in it) run in ONNX
Runtime. Texts are encoded by the family's own encoder and evaluator path, so a row reads exactly
as ``kdbert evaluate`` reads it, and rows are batched by length with their order kept.

Each prediction is a dict: ``{"label", "probability"}`` (the softmax of the logits at the top
label) for a classifier, ``{"score"}`` for a regressor, ``{"answer", "score"}`` for a QA model
(a question and its context in, the answer span of the context out). Label names come from the model's
``id2label``, else from the task recorded beside it (``run_config.json``, ``distill_report.json``
or ``compress_report.json`` in the folder or the one above it), else ``LABEL_i``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kdbert.data.glue import Example, TaskData
from kdbert.data.tasks import (DOC_STRIDE, GLUE_TASKS, IMDB_TASK, SQUAD_TASKS, TEXT_COLUMNS_KEY, TaskSpec,
                               canonical_task_name)
from kdbert.errors import KdbertError

TASK_RECORDS = ("run_config.json", "distill_report.json", "compress_report.json")
DEFAULT_MAX_SEQ_LEN = 512  # for a model recorded without its task and with no position limit of its own

__all__ = ["Predictor", "load"]


def load(path: str | os.PathLike, threads: int | None = None, batch_size: int = 64) -> Predictor:
    """The model at ``path`` (a model folder, an export folder or an ``.onnx`` file), ready to
    :meth:`Predictor.predict` texts; ``threads``: ONNX Runtime's CPU threads (None: its default)."""
    return Predictor(path, threads, batch_size)


def _recorded_task(folder: Path) -> TaskSpec | None:
    """The known task (GLUE, IMDb, SQuAD) a report in ``folder`` or its parent names, if any."""
    for where in (folder, folder.parent):
        for name in TASK_RECORDS:
            record = where / name
            if not record.is_file():
                continue
            try:
                task = json.loads(record.read_text()).get("task")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(task, str):
                known = GLUE_TASKS.get(canonical_task_name(task) or "") or SQUAD_TASKS.get(task)
                return known or (IMDB_TASK if task == IMDB_TASK.name else None)
    return None


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise KdbertError(f"{folder} is not a model folder (no config.json); pass a folder saved by kdbert "
                          "(finetune, distill, compress) or an export of `kdbert export`")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise KdbertError(f"{path}: not valid JSON ({exc.msg}); pass a model folder saved by kdbert") from None
    if not isinstance(config, dict):
        raise KdbertError(f"{path}: not a model config; pass a model folder saved by kdbert")
    return config


def _label_names(config: dict, num_labels: int, task: TaskSpec | None) -> tuple[str, ...]:
    """The model's ``id2label`` unless it holds HF's placeholders, else the recorded task's labels,
    else ``LABEL_i``."""
    placeholders = tuple(f"LABEL_{i}" for i in range(num_labels))
    id2label = {int(k): str(v) for k, v in (config.get("id2label") or {}).items()}
    named = tuple(id2label.get(i, "") for i in range(num_labels))
    if all(named) and named != placeholders:
        return named
    if task is not None and task.labels is not None and len(task.labels) == num_labels:
        return task.labels
    return placeholders


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


class Predictor:
    """A model with the encoder that reads its text; ``predict(texts_or_pairs)`` gives one record
    per text (see the module docstring). ``text_fields`` are the column names a file's rows are read
    from by default: the recorded task's (a QA model's: ``question``, ``context``), else ``text``
    (``text``, ``text_pair`` for a model that reads pairs only)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None, batch_size: int = 64):
        from kdbert.deploy.onnx_runtime import OnnxClassifier, is_onnx_model
        from kdbert.families.registry import family_of_folder

        path = Path(path).expanduser()
        if not path.exists():
            raise KdbertError(f"model {path} does not exist; pass a model folder or an export of `kdbert export` "
                              "(its folder or .onnx file)")
        if batch_size < 1:
            raise KdbertError(f"--batch-size must be a positive integer (got {batch_size})")
        self.batch_size = batch_size
        if is_onnx_model(path):
            self.model = OnnxClassifier(path, threads=threads)
            self.folder, self.family, self.encoder = self.model.folder, self.model.family, self.model.encoder
            config = _read_config(self.folder)
            input_names = tuple(self.model.input_names)
            limit = self.model.max_seq_len
        else:
            if not path.is_dir():
                raise KdbertError(f"{path} is neither a model folder nor an .onnx file; pass a model folder or an "
                                  "export of `kdbert export`")
            config = _read_config(path)
            self.folder, self.family = path, family_of_folder(path)
            self.model, self.encoder = self.family.load(path)
            spec = self.family.input_spec(self.model)
            input_names, limit = spec.names, spec.max_positions
        self.task = _recorded_task(self.folder)
        self.question_answering = any(a.endswith("ForQuestionAnswering") for a in config.get("architectures") or [])
        if self.question_answering and (self.task is None or not self.task.question_answering):
            self.task = SQUAD_TASKS["squad"]
        self.pair_only = "input_ids_b" in input_names
        num_labels = len(config["id2label"]) if config.get("id2label") else int(config.get("num_labels", 2))
        self.num_labels, self.regression = num_labels, num_labels == 1 and not self.question_answering
        self.labels = None if self.regression or self.question_answering else _label_names(config, num_labels,
                                                                                            self.task)
        recorded = config.get(TEXT_COLUMNS_KEY)  # the columns it was trained on, where recorded
        if recorded:
            self.text_fields = tuple(recorded)
        elif self.task is not None:
            self.text_fields = self.task.text_fields
        else:
            self.text_fields = ("text", "text_pair") if self.pair_only else ("text",)
        wanted = self.task.max_seq_len if self.task is not None else DEFAULT_MAX_SEQ_LEN
        self.max_seq_len = min(wanted, limit or wanted)

    def _run(self, texts_or_pairs: Sequence[str | Sequence[str]]):
        """The examples, the encoded rows and the model's outputs on them, in the order given."""
        examples = [Example(_texts(item, index), None) for index, item in enumerate(texts_or_pairs)]
        if not examples:
            raise KdbertError("no texts to predict; pass at least one text or pair")
        widths = {len(example.texts) for example in examples}
        if len(widths) > 1:
            raise KdbertError("mix of single texts and pairs; pass all single texts or all pairs")
        if (self.pair_only or self.question_answering) and widths != {2}:
            what = "(question, context) pairs" if self.question_answering else "sentence pairs"
            raise KdbertError(f"{self.folder} reads {what}; pass two texts per item (--text-columns A,B)")
        fields = ("text_a", "text_b") if widths == {2} else ("text",)
        truncation, doc_stride = (self.task.truncation, self.task.doc_stride) if self.task else ("head", DOC_STRIDE)
        spec = TaskSpec("the input", fields, self.labels, (), self.max_seq_len, truncation=truncation,
                        doc_stride=min(doc_stride, self.max_seq_len // 4),
                        question_answering=self.question_answering)
        if not self.question_answering:
            self.family.check_fits(str(self.folder), self.num_labels, self.pair_only, spec)
        data = TaskData(spec, [], {"predict": examples})
        evaluator = self.family.evaluator(data, self.encoder, self.max_seq_len, self.batch_size)
        rows = evaluator.splits["predict"]
        return examples, rows, evaluator.predict(self.model, rows)

    def logits(self, texts_or_pairs: Sequence[str | Sequence[str]]) -> np.ndarray:
        """The model's logits for each text or pair, in the order given: (N, C) for a classifier, a
        QA model's start and end logits per window (N_windows, 2, n_max)."""
        return self._run(texts_or_pairs)[2]

    def predict(self, texts_or_pairs: Sequence[str | Sequence[str]]) -> list[dict]:
        """One record per text or (text, text) pair, in the order given: ``{"label", "probability"}``
        for a classifier, ``{"score"}`` for a regressor, ``{"answer", "score"}`` for a QA model
        given (question, context) pairs."""
        examples, rows, logits = self._run(texts_or_pairs)
        if self.question_answering:
            windows: list[list] = [[] for _ in examples]
            for index, row in enumerate(rows.features):
                n = len(row["input_ids"])
                windows[row["example"]].append((logits[index, 0, :n], logits[index, 1, :n], row["offsets"]))
            allow_empty = self.task.name == "squad2"
            return [_answer(example.texts[1], spans, allow_empty) for example, spans in zip(examples, windows)]
        if self.regression:
            return [{"score": float(row[0])} for row in logits]
        probabilities = _softmax(logits.astype(np.float64))
        best = probabilities.argmax(axis=-1)
        return [{"label": self.labels[i], "probability": float(p[i])} for i, p in zip(best, probabilities)]


def _texts(item, index: int) -> tuple[str, ...]:
    """A text as ``(text,)``, a pair as ``(a, b)``; anything else refused, naming the item."""
    if isinstance(item, str):
        return (item,)
    if isinstance(item, Sequence) and len(item) == 2 and all(isinstance(text, str) for text in item):
        return tuple(item)
    raise KdbertError(f"item {index} is {type(item).__name__} {str(item)[:60]!r}; pass a string or a pair of "
                      "strings per item")


def _answer(context: str, windows: list[tuple[np.ndarray, np.ndarray, list]], allow_empty: bool) -> dict:
    """``{"answer", "score"}`` of one question: the span :func:`~kdbert.core.qa_evaluate.best_answer`
    picks (the highest start + end logit over its windows), scored by its probability in its window
    (softmax of the start logits at its start times softmax of the end logits at its end); with
    ``allow_empty`` (SQuAD 2.0) "" when the lowest [CLS] score beats it, scored the same way at [CLS]."""
    from kdbert.core.qa_evaluate import MAX_ANSWER_TOKENS, N_BEST

    best, null = None, None
    for start, end, offsets in windows:
        starts, ends = _softmax(start.astype(np.float64)), _softmax(end.astype(np.float64))
        if null is None or start[0] + end[0] < null[0]:
            null = (float(start[0] + end[0]), float(starts[0] * ends[0]))
        for i in np.argsort(start)[::-1][:N_BEST]:
            for j in np.argsort(end)[::-1][:N_BEST]:
                if offsets[i] is None or offsets[j] is None or j < i or j - i + 1 > MAX_ANSWER_TOKENS:
                    continue
                if best is None or start[i] + end[j] > best[0]:
                    best = (float(start[i] + end[j]), context[offsets[i][0]:offsets[j][1]], float(starts[i] * ends[j]))
    if best is None or (allow_empty and null[0] > best[0]):
        return {"answer": "", "score": null[1]}
    return {"answer": best[1], "score": best[2]}
