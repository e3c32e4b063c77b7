"""Batches with per-model inputs: word ids for a word-level student beside the teacher's token ids.

A word-level student (the distilled BiLSTM) and its BERT teacher read the same example through
different inputs: the student its vocabulary's word ids (``[MASK]`` has an id of its own, see
:mod:`kdbert.families.bilstm.words`), the teacher its tokenizer's ids (``[MASK]`` as its mask token, see
:func:`kdbert.core.teacher_logits.teacher_view`). :func:`encode_for_distillation` encodes both
once; :class:`DistillationCollator` pads a batch of them into::

    {"student": {"input_ids": (B, L), "attention_mask": (B, L),            # word ids, right-padded
                 "input_ids_b": (B, L_b), "attention_mask_b": (B, L_b)},   # pairs only
     "teacher": {"input_ids", "attention_mask", "token_type_ids"},         # when teacher inputs were encoded
     "teacher_logits": (B, C) float32,                                     # when stored logits were given
     "labels": (B,) long, or float for regression}                         # labelled rows only

``batch["student"]`` is exactly the keyword arguments of :class:`kdbert.families.bilstm.model.BiLSTMStudent`.
With stored teacher logits (computed once, :func:`kdbert.core.teacher_logits.label_with_teacher`)
the teacher's inputs are not needed at all.
"""

from __future__ import annotations

import numpy as np
import torch

from kdbert.data.batching import EncodedDataset, PaddingCollator, encode_examples, with_targets
from kdbert.data.glue import Example
from kdbert.core.teacher_logits import teacher_view
from kdbert.families.bilstm.words import Vocab
from kdbert.errors import KdbertError


class DistillationDataset(EncodedDataset):
    """Encoded examples with per-model inputs; ``lengths`` (for length-grouped batching) counts
    the student's words."""

    @property
    def lengths(self) -> list[int]:
        return [sum(len(ids) for ids in f["student"].values()) for f in self.features]


def encode_words(vocab: Vocab, examples: list[Example], pair: bool, max_words: int | None = None) -> list[dict]:
    """Student inputs per example: ``{"input_ids": [...]}`` (and ``"input_ids_b"`` for pairs),
    each text cut to ``max_words`` words. Refuses examples with the wrong number of texts."""
    wanted = 2 if pair else 1
    out = []
    for index, example in enumerate(examples):
        if len(example.texts) != wanted:
            raise KdbertError(f"row {index} has {len(example.texts)} text(s) but the student reads "
                              f"{'sentence pairs' if pair else 'one sentence'}; set --text-columns to "
                              f"{'two columns (A,B)' if pair else 'one column'}")
        ids = [vocab.encode(text)[:max_words] for text in example.texts]
        out.append(dict(zip(("input_ids", "input_ids_b"), ids)))
    return out


def encode_for_distillation(examples: list[Example], vocab: Vocab, pair: bool, tokenizer=None,
                            max_seq_len: int | None = None, teacher_logits: np.ndarray | None = None,
                            max_words: int | None = None) -> DistillationDataset:
    """Encode ``examples`` for the student (word ids) and, given a ``tokenizer``, for the teacher
    (token ids of :func:`teacher_view` of the texts, cut to ``max_seq_len``). ``teacher_logits``
    (N, C), e.g. from :func:`kdbert.core.teacher_logits.label_with_teacher`, ride along per row."""
    if teacher_logits is not None and len(teacher_logits) != len(examples):
        raise KdbertError(f"{len(teacher_logits)} rows of teacher logits for {len(examples)} examples; "
                          "label the same examples with the teacher")
    students = encode_words(vocab, examples, pair, max_words)
    teachers = None
    if tokenizer is not None:
        if max_seq_len is None:
            raise KdbertError("encoding teacher inputs needs max_seq_len")
        mask_token = getattr(tokenizer, "mask_token", None)
        views = [Example(tuple(teacher_view(t, mask_token) for t in ex.texts), None) for ex in examples]
        teachers = encode_examples(tokenizer, views, max_seq_len).features
    features = []
    for i, (example, student) in enumerate(zip(examples, students)):
        row = {"student": student}
        if teachers is not None:
            row["teacher"] = teachers[i]
        if teacher_logits is not None:
            row["teacher_logits"] = np.asarray(teacher_logits[i], dtype=np.float32)
        if example.label is not None:
            row["labels"] = example.label
        features.append(row)
    return DistillationDataset(features)


def pad_word_ids(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad word-id lists with :attr:`Vocab.pad_id`: ids and mask, both (B, L) int64."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), Vocab.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :len(row)] = 1
    return ids, mask


class DistillationCollator:
    """Pad a list of :func:`encode_for_distillation` features into one batch (see the module doc).
    ``teacher_pad_token_id`` is the teacher tokenizer's pad id (needed only with teacher inputs)."""

    def __init__(self, teacher_pad_token_id: int | None = None, regression: bool = False):
        self.teacher = None if teacher_pad_token_id is None else PaddingCollator(teacher_pad_token_id)
        self.regression = regression

    def __call__(self, features: list[dict]) -> dict:
        student = {}
        for name, mask_name in (("input_ids", "attention_mask"), ("input_ids_b", "attention_mask_b")):
            if name in features[0]["student"]:
                student[name], student[mask_name] = pad_word_ids([f["student"][name] for f in features])
        batch: dict = {"student": student}
        if "teacher" in features[0]:
            if self.teacher is None:
                raise KdbertError("the batch holds teacher inputs; give DistillationCollator the teacher's pad id")
            batch["teacher"] = self.teacher([f["teacher"] for f in features])
        return with_targets(batch, features, self.regression)
