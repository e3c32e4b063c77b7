"""Evaluation: run a classifier over a task's dev split(s) and compute its GLUE metrics."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from kdbert.data.batching import EncodedDataset, ModelInputs, TokenizerInputs, pool_windows, predict_rows
from kdbert.data.glue import TaskData
from kdbert.data.tasks import TaskSpec
from kdbert.core.metrics import (bootstrap_standard_error, compute_metrics, paired_bootstrap_standard_error, split_prefix,
                                 task_score)
from kdbert.core.trace import model_inputs, output_logits


@torch.no_grad()
def predict(model, dataset: EncodedDataset, collator, batch_size: int = 64) -> np.ndarray:
    """Logits (N, C) of ``model`` on ``dataset`` in the dataset's order (length-sorted batches); a QA
    model's start and end logits (N, 2, n_max) (:func:`~kdbert.data.batching.predict_rows`).

    ``model`` is an ``nn.Module`` or an exported model with its own ``predict(dataset,
    collator, batch_size)`` (:class:`kdbert.deploy.onnx_runtime.OnnxClassifier`).
    """
    if not isinstance(model, torch.nn.Module):
        return model.predict(dataset, collator, batch_size)
    model.eval()
    device = next(model.parameters()).device

    def outputs_of(batch: dict) -> np.ndarray:
        output = model(**model_inputs(model, {k: v.to(device) for k, v in batch.items()}))
        return output_logits(output).float().cpu().numpy()

    return predict_rows(dataset, collator, batch_size, outputs_of)


def to_predictions(spec: TaskSpec, logits: np.ndarray) -> np.ndarray:
    """Class ids (argmax) for classification, the single output for regression."""
    return logits[:, 0] if spec.is_regression else logits.argmax(axis=-1)


def agreement(spec: TaskSpec, student_logits: np.ndarray, teacher_logits: np.ndarray) -> float:
    """How closely a student follows its teacher on the same rows, in percent: the share of rows
    whose predicted class is the teacher's, or for regression the Pearson correlation of their
    scores (x 100)."""
    student, teacher = to_predictions(spec, student_logits), to_predictions(spec, teacher_logits)
    if spec.is_regression:
        return 100.0 * float(np.corrcoef(student, teacher)[0, 1])
    return 100.0 * float(np.mean(student == teacher))


def held_out_loss(spec: TaskSpec, logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean loss of ``logits`` (N, C) against the gold ``labels`` (N,): classification, the
    cross-entropy ``logsumexp(logits[i]) - logits[i, labels[i]]`` (natural log); regression, the
    squared error ``(logits[i, 0] - labels[i]) ** 2``. Unlike a metric of the predictions, it still
    orders models that predict the same (all the majority class, say)."""
    from scipy.special import logsumexp  # here: scipy takes seconds to import, which predict and serve never need

    logits = np.asarray(logits, dtype=np.float64)
    if spec.is_regression:
        return float(np.mean((logits[:, 0] - labels) ** 2))
    return float(np.mean(logsumexp(logits, axis=-1) - logits[np.arange(len(labels)), labels]))


# How many standard errors of the top-ranked evaluation's score (its ``selection_se``) a later one may fall short
# of it and still be kept. One picked run on the main job (SST-2, bert-2x384-ffn192, scored on its moving average) read
# 86.34 on its 344 picking rows at step 1,600, 85.76 at 3,351 and 85.17 at 4,588 (se 1.88), where the rows that decide
# read 82.56, 84.30 and 84.59 and dev 83.03, 83.49 and 84.29: the maximum kept the 1,600-step student (2026-12-02).
CHECKPOINT_SE = 1.0


def selection_key(metrics: dict[str, float]) -> tuple[float, float]:
    """What ranks evaluations, higher is better: ``selection_score`` (else ``score``), ties broken by
    the lower ``selection_loss`` (an evaluation without one ranks last among its ties)."""
    return (metrics.get("selection_score", metrics["score"]), -metrics.get("selection_loss", math.inf))


def replaces_checkpoint(latest: dict[str, float], kept: dict[str, float] | None, top: dict[str, float]) -> bool:
    """Whether the ``latest`` evaluation replaces the ``kept`` one as a run's checkpoint, ``top`` the
    highest-ranked of all so far (:func:`selection_key`, ``latest`` included): the latest evaluation
    stands while its score is within ``CHECKPOINT_SE`` standard errors of the top one's (``top``'s
    ``selection_se``, the bootstrap error over the rows that pick), so a student trained longer is
    not given up for an earlier one that read higher by noise::

        score(latest) >= score(top) - CHECKPOINT_SE * se(top)

    Without a standard error (no held-out rows, or a score constant on every resample), the highest
    by :func:`selection_key` is kept, as before."""
    if kept is None:
        return True
    margin = CHECKPOINT_SE * top.get("selection_se", 0.0)
    if margin > 0:
        return selection_key(latest)[0] >= selection_key(top)[0] - margin
    return selection_key(latest) > selection_key(kept)


class Scored(NamedTuple):
    """A model's metrics from an evaluator and its logits on each dev split (name -> (N, C); empty
    where the evaluator does not give them)."""

    metrics: dict[str, float]
    logits: dict[str, np.ndarray]


def scored_with_logits(evaluator, model) -> Scored:
    """``evaluator(model)``'s metrics and ``model``'s logits on each dev split, read off the same
    predictions where ``evaluator`` is a :class:`SplitEvaluator` (any other callable: no logits)."""
    if isinstance(evaluator, SplitEvaluator):
        logits: dict[str, np.ndarray] = {}
        return Scored(evaluator.scored(model, logits)[0], logits)
    return Scored(evaluator(model), {})


class SplitEvaluator:
    """Callable ``evaluator(model) -> metrics`` over a task's dev split(s), encoded once by
    ``encode(rows)`` (``splits``: name -> rows); subclasses say how a model predicts them.

    Metrics are in percent, keyed by name (MNLI: ``dev_matched/accuracy`` ...), plus ``score``,
    the mean of the task's metrics. With held-out training rows (``data.held_out``) they are
    scored too, as ``held-out/<metric>``, with their mean loss (:func:`held_out_loss`, not in
    percent) as ``held-out/loss`` and ``selection_loss``; ``selection_score`` (their score), ties
    broken by the lower ``selection_loss`` (:func:`selection_key`), picks the best checkpoint
    instead of ``score``, so that dev only scores the checkpoint it did not pick. With rows that
    decide (``data.decide``, ``--decide-share``) they are scored as ``decide/<metric>`` and
    ``decide_score``, never picking anything here. ``selection_se`` and ``decide_se``: the
    bootstrap standard error of those scores over their rows
    (:func:`~kdbert.core.metrics.bootstrap_standard_error`); with another model's predictions on
    the rows that decide (``data.decide_baseline``), ``decide_paired_se``: the paired bootstrap
    standard error of ``decide_score - baseline's score`` on the same resamples
    (:func:`~kdbert.core.metrics.paired_bootstrap_standard_error`).
    """

    def __init__(self, data: TaskData, encode, batch_size: int):
        self.spec = data.spec
        self.splits = {name: encode(rows) for name, rows in data.dev.items()}
        self.references = {name: np.array([ex.label for ex in rows]) for name, rows in data.dev.items()}
        self.held_out = (encode(data.held_out), np.array([ex.label for ex in data.held_out])) if data.held_out else None
        self.decide = (encode(data.decide), np.array([ex.label for ex in data.decide])) if data.decide else None
        self.decide_baseline = data.decide_baseline if data.decide else None
        self.batch_size = batch_size

    def predict(self, model, dataset) -> np.ndarray:
        """Logits (N, C) of ``model`` on one of ``splits``."""
        raise NotImplementedError

    def __call__(self, model) -> dict[str, float]:
        return self.scored(model)[0]

    def scored(self, model, logits: dict | None = None) -> tuple[dict[str, float], np.ndarray | None]:
        """The metrics ``evaluator(model)`` returns and ``model``'s predictions (class ids; regression:
        scores) on the held-out rows that decide, in their order (None without such rows), for a
        paired comparison with another model's on the same rows. ``logits``: where given, filled with
        ``model``'s logits on each dev split (name -> (N, C)), for a caller that compares them with
        another model's on the same rows (the export's parity check) without predicting them again."""
        metrics = {}
        splits = tuple(self.splits)
        for name, dataset in self.splits.items():
            split_logits = self.predict(model, dataset)
            if logits is not None:
                logits[name] = split_logits
            predictions = to_predictions(self.spec, split_logits)
            metrics.update(compute_metrics(self.spec.metrics, predictions, self.references[name],
                                           split_prefix(name, splits)))
        if splits:
            metrics["score"] = task_score(metrics, self.spec.metrics, splits)
        if self.held_out is not None:
            dataset, references = self.held_out
            logits = self.predict(model, dataset)
            held = self._scored(to_predictions(self.spec, logits), references, "held-out", metrics)
            loss = held_out_loss(self.spec, logits, references)
            metrics["held-out/loss"] = loss
            metrics.update(selection_score=held[0], selection_se=held[1], selection_loss=loss)
        decide = None
        if self.decide is not None:
            decide = to_predictions(self.spec, self.predict(model, self.decide[0]))
            metrics["decide_score"], metrics["decide_se"] = self._scored(decide, self.decide[1], "decide", metrics)
            if self.decide_baseline is not None:
                metrics["decide_paired_se"] = paired_bootstrap_standard_error(
                    self.spec.metrics, decide, self.decide_baseline, self.decide[1])
        return metrics, decide

    def _scored(self, predictions: np.ndarray, references: np.ndarray, prefix: str, metrics: dict) -> tuple[float, float]:
        """The task score of ``predictions`` on rows apart from dev and its bootstrap standard error; each
        metric added to ``metrics`` as ``<prefix>/<metric>``."""
        scores = compute_metrics(self.spec.metrics, predictions, references, "")
        metrics.update({f"{prefix}/{name}": value for name, value in scores.items()})
        return (task_score(scores, self.spec.metrics, (prefix,)),
                bootstrap_standard_error(self.spec.metrics, predictions, references))


class TaskEvaluator(SplitEvaluator):
    """:class:`SplitEvaluator` of token-level models: rows encoded with the model's inputs
    (``inputs``; default: ``tokenizer``'s, cut to ``max_seq_len`` by the task's truncation); a text
    read in windows is scored by the mean of its windows' logits (:func:`~kdbert.data.batching.pool_windows`)."""

    def __init__(self, data: TaskData, tokenizer, max_seq_len: int | None = None, batch_size: int = 64,
                 inputs: ModelInputs | None = None):
        self.max_seq_len = max_seq_len or data.spec.max_seq_len
        inputs = inputs or TokenizerInputs.for_task(tokenizer, self.max_seq_len, data.spec)
        super().__init__(data, lambda rows: EncodedDataset(inputs.encode(rows)), batch_size)
        self.collator = inputs.collate

    def predict(self, model, dataset: EncodedDataset) -> np.ndarray:
        """Logits (N_texts, C) of ``model`` on one of ``splits``."""
        return pool_windows(predict(model, dataset, self.collator, self.batch_size), dataset)
