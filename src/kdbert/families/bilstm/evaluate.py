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
from kdbert.core.evaluate import SplitEvaluator


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


class WordTaskEvaluator(SplitEvaluator):
    """:class:`~kdbert.core.evaluate.SplitEvaluator` of word-level students: dev rows encoded once
    with the student's vocabulary (whole texts); same metrics and keys as the token-level one."""

    def __init__(self, data: TaskData, vocab: Vocab, batch_size: int = 256):
        super().__init__(data, lambda rows: encode_for_distillation(rows, vocab, data.spec.is_pair), batch_size)

    def predict(self, model, dataset: DistillationDataset) -> np.ndarray:
        return predict_words(model, dataset, self.batch_size)
