"""Evaluation of word-level students (the distilled BiLSTM) on a task's dev split(s).

The counterpart of :class:`kdbert.core.evaluate.TaskEvaluator` for students that read word ids from
their own vocabulary instead of the teacher's tokenizer; same metrics, same keys.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from kdbert.data.glue import TaskData
from kdbert.families.bilstm.batching import DistillationCollator, DistillationDataset, encode_for_distillation
from kdbert.families.bilstm.words import Vocab
from kdbert.core.evaluate import to_predictions
from kdbert.core.metrics import compute_metrics, split_prefix, task_score


@torch.no_grad()
def predict_words(model, dataset: DistillationDataset, batch_size: int = 256) -> np.ndarray:
    """Logits (N, C) of a word-level ``model`` on ``dataset``, in the dataset's order (batches of
    similar lengths). ``model`` is a PyTorch student or its ONNX export
    (:class:`kdbert.deploy.onnx_runtime.OnnxClassifier`, which takes the same inputs as arrays)."""
    if isinstance(model, nn.Module):
        model.eval()
        device = next(model.parameters()).device

        def logits_of(student: dict) -> np.ndarray:
            return model(**{k: v.to(device) for k, v in student.items()}).logits.float().cpu().numpy()
    else:
        def logits_of(student: dict) -> np.ndarray:
            return model({k: v.numpy() for k, v in student.items()})
    collator = DistillationCollator()
    lengths = dataset.lengths
    order = sorted(range(len(dataset)), key=lambda i: lengths[i])
    outputs = None
    for begin in range(0, len(order), batch_size):
        indices = order[begin:begin + batch_size]
        logits = logits_of(collator([{"student": dataset[i]["student"]} for i in indices])["student"])
        if outputs is None:
            outputs = np.zeros((len(dataset), logits.shape[-1]), dtype=np.float32)
        outputs[indices] = logits
    return outputs


class WordTaskEvaluator:
    """Callable ``evaluator(model) -> metrics`` over a task's dev split(s), encoded once with the
    student's vocabulary; metrics in percent plus ``score`` (as :class:`kdbert.core.evaluate.TaskEvaluator`)."""

    def __init__(self, data: TaskData, vocab: Vocab, batch_size: int = 256):
        self.spec = data.spec
        self.splits = {name: encode_for_distillation(rows, vocab, data.spec.is_pair) for name, rows in data.dev.items()}
        self.references = {name: np.array([ex.label for ex in rows]) for name, rows in data.dev.items()}
        self.batch_size = batch_size

    def __call__(self, model) -> dict[str, float]:
        metrics = {}
        splits = tuple(self.splits)
        for name, dataset in self.splits.items():
            predictions = to_predictions(self.spec, predict_words(model, dataset, self.batch_size))
            metrics.update(compute_metrics(self.spec.metrics, predictions, self.references[name],
                                           split_prefix(name, splits)))
        metrics["score"] = task_score(metrics, self.spec.metrics, splits)
        return metrics
