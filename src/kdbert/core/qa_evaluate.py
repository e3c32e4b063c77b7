"""Extractive QA scored as the official SQuAD evaluation: the best span of every question over its
windows, exact match and F1 on normalised answers.

Normalisation (the official ``evaluate-v1.1.py`` / ``v2.0``): lower case, punctuation removed, the
articles a / an / the removed, whitespace collapsed. Per question, against each gold answer::

    EM = [norm(pred) == norm(gold)]
    F1 = 2 P R / (P + R),  P = common / |pred tokens|,  R = common / |gold tokens|
         (common: the multiset overlap of tokens; 1 if both are empty, 0 if only one is)

and the question's score is the best over its gold answers; an unanswerable question's only gold
answer is "". Figures are percentages over questions. A span is chosen as BERT's SQuAD recipe:
the highest ``start_logit[i] + end_logit[j]`` over the ``N_BEST`` best starts and ends of every
window, ``i <= j`` inside the context, at most ``MAX_ANSWER_TOKENS`` tokens; with unanswerable
questions (SQuAD 2.0) "" wins when the lowest [CLS] score ``start[0] + end[0]`` of the question's
windows beats the best span.
"""

from __future__ import annotations

import collections
import math
import re
import string

import numpy as np

from kdbert.core.evaluate import predict
from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.data.glue import Example, TaskData
from kdbert.data.qa_windows import encode_qa

N_BEST, MAX_ANSWER_TOKENS = 20, 30
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official normalisation (see the module docstring)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not wanted:
        return float(predicted == wanted)
    common = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def question_scores(predictions: list[str], examples: list[Example]) -> tuple[np.ndarray, np.ndarray]:
    """Each question's exact match and F1 (0-1, the best over its gold answers)."""
    em, f1 = [], []
    for prediction, example in zip(predictions, examples):
        golds = [text for text, _ in example.label] or [""]
        em.append(max(exact_match(prediction, gold) for gold in golds))
        f1.append(max(f1_score(prediction, gold) for gold in golds))
    return np.array(em, dtype=float), np.array(f1, dtype=float)


def squad_scores(predictions: list[str], examples: list[Example]) -> dict[str, float]:
    """``exact_match`` and ``f1`` (percent) of ``predictions`` against the examples' gold answers."""
    em, f1 = question_scores(predictions, examples)
    count = max(len(examples), 1)
    return {"exact_match": 100.0 * float(em.sum()) / count, "f1": 100.0 * float(f1.sum()) / count}


def score_and_error(predictions: list[str], examples: list[Example]) -> tuple[float, float]:
    """The QA score, the mean of exact match and F1 (percent), and its standard error over the
    questions, ``100 sd(s_i) / sqrt(n)`` with ``s_i = (em_i + f1_i) / 2`` (what the bootstrap of a
    mean estimates)."""
    em, f1 = question_scores(predictions, examples)
    per_question = (em + f1) / 2
    error = per_question.std(ddof=1) / math.sqrt(len(per_question)) if len(per_question) > 1 else 0.0
    return 100.0 * float(per_question.mean()), 100.0 * float(error)


def best_answer(context: str, windows: list[tuple[np.ndarray, np.ndarray, list]], allow_empty: bool) -> str:
    """The answer text of one question from its windows' ``(start_logits, end_logits, offsets)``."""
    best_score, best_span, null_score = -np.inf, None, np.inf
    for start, end, offsets in windows:
        null_score = min(null_score, float(start[0] + end[0]))
        for i in np.argsort(start)[::-1][:N_BEST]:
            for j in np.argsort(end)[::-1][:N_BEST]:
                if offsets[i] is None or offsets[j] is None or j < i or j - i + 1 > MAX_ANSWER_TOKENS:
                    continue
                score = float(start[i] + end[j])
                if score > best_score:
                    best_score, best_span = score, (offsets[i][0], offsets[j][1])
    if best_span is None or (allow_empty and null_score > best_score):
        return ""
    return context[best_span[0]:best_span[1]]


def answer_agreement(ours: list[str], theirs: list[str]) -> float:
    """How closely a student follows its teacher, in percent: the share of dev questions whose
    predicted answer text (``ours``, each model's from its own evaluator, its tokenizer and windows:
    :meth:`QAEvaluator.dev_answers`) is the teacher's (``theirs``)."""
    return 100.0 * sum(a == b for a, b in zip(ours, theirs)) / len(ours)


class QAEvaluator:
    """Callable ``evaluator(model) -> metrics`` of a QA task: ``exact_match``, ``f1`` and ``score``
    (their mean) on dev, and on held-out training rows as ``held-out/...`` with ``selection_score``
    (:class:`kdbert.core.evaluate.SplitEvaluator`'s contract). ``model``: a PyTorch QA model or an
    export (:class:`~kdbert.deploy.onnx_runtime.OnnxClassifier`); ``splits`` holds each split's
    encoded windows, ``predict(model, windows)`` their start and end logits (N, 2, n_max)."""

    def __init__(self, data: TaskData, tokenizer, max_seq_len: int | None = None, batch_size: int = 64):
        self.spec = data.spec
        self.max_seq_len = max_seq_len or data.spec.max_seq_len
        self.tokenizer, self.batch_size = tokenizer, batch_size
        self.collator = PaddingCollator(tokenizer.pad_token_id)
        self.examples = dict(data.dev)
        self.splits = {name: self.encode(rows) for name, rows in data.dev.items()}
        self.held_out = (data.held_out, self.encode(data.held_out)) if data.held_out else None
        self.decide = (data.decide, self.encode(data.decide)) if data.decide else None

    def encode(self, examples: list[Example]) -> EncodedDataset:
        return EncodedDataset(encode_qa(self.tokenizer, examples, self.max_seq_len, self.spec.doc_stride))

    def predict(self, model, windows: EncodedDataset) -> np.ndarray:
        return predict(model, windows, self.collator, self.batch_size)

    def answers(self, model, examples: list[Example], windows: EncodedDataset) -> list[str]:
        """The predicted answer text of every example."""
        logits = self.predict(model, windows)
        spans: list[list] = [[] for _ in examples]
        for index, row in enumerate(windows.features):
            n = len(row["input_ids"])
            spans[row["example"]].append((logits[index, 0, :n], logits[index, 1, :n], row["offsets"]))
        allow_empty = any(not ex.label for ex in examples)
        return [best_answer(ex.texts[1], w, allow_empty) for ex, w in zip(examples, spans)]

    def dev_answers(self, model) -> list[str]:
        """The predicted answer text of every dev question, split after split."""
        return [answer for name, examples in self.examples.items()
                for answer in self.answers(model, examples, self.splits[name])]

    def __call__(self, model) -> dict[str, float]:
        metrics: dict[str, float] = {}
        prefix = len(self.splits) > 1
        for name, windows in self.splits.items():
            scores = squad_scores(self.answers(model, self.examples[name], windows), self.examples[name])
            metrics.update({(f"{name}/{k}" if prefix else k): v for k, v in scores.items()})
        if metrics:
            metrics["score"] = float(np.mean([v for v in metrics.values()]))
        if self.held_out is not None:
            answers = self.answers(model, *self.held_out)
            held = squad_scores(answers, self.held_out[0])
            metrics.update({f"held-out/{k}": v for k, v in held.items()})
            metrics["selection_score"], metrics["selection_se"] = score_and_error(answers, self.held_out[0])
        if self.decide is not None:
            metrics["decide_score"], metrics["decide_se"] = score_and_error(self.answers(model, *self.decide),
                                                                            self.decide[0])
        return metrics
