"""Tokenise once, then batch with dynamic padding and length-grouped ordering.

Per-model inputs: when the student reads the teacher's tokenizer (every BERT-family student),
a row and a batch are one dict that both models read. A student with its own inputs (a
word-level BiLSTM, another vocabulary) brings a :class:`ModelInputs`; rows and batches are then
``{"teacher": {...}, "student": {...}, "labels": ...}`` (:func:`encode_task`,
:class:`TaskCollator`), each side made and padded by its own encoder, or, where the teacher's
logits are stored per row, ``{"student": {...}, "teacher_logits": ..., "labels": ...}``
(:func:`encode_with_logits`).

Dynamic padding pads each batch only to its longest row; length grouping shuffles rows,
cuts them into mega-batches of ``50 * batch_size``, sorts each by length and batches them, so
rows in a batch have similar lengths. On a CPU this roughly halves GLUE training time against
padding everything to ``max_seq_len``. The order is a pure function of ``(seed, epoch)``, which
is what lets a resumed run continue with exactly the batches it would have seen.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers.trainer_pt_utils import LengthGroupedSampler

from typing import Callable, Protocol

from kdbert.data.glue import Example
from kdbert.data.qa_windows import check_stride, encode_qa
from kdbert.data.tasks import DOC_STRIDE
from kdbert.errors import KdbertError


class EncodedDataset(Dataset):
    """Token ids of a list of examples; ``features[i]`` is a dict of lists plus ``labels``."""

    def __init__(self, features: list[dict]):
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict:
        return self.features[index]

    @property
    def lengths(self) -> list[int]:
        """Row lengths for length grouping: the student's inputs when rows carry per-model inputs."""
        return [_length(f["student"] if "student" in f else f) for f in self.features]


def _length(row: dict) -> int:
    return len(row["input_ids"]) if "input_ids" in row else max(len(v) for v in row.values() if isinstance(v, list))


def kept_positions(special_tokens_mask: list[int], max_seq_len: int, truncation: str) -> list[int]:
    """Positions of one encoded text that a limit of ``max_seq_len`` tokens keeps: every special
    token at either end, and of the B = ``max_seq_len`` - specials content tokens the first B
    (``head``), the last B (``tail``) or the first round(B/4) and the last B - round(B/4)
    (``head+tail``; 128 + 382 at 512 with BERT's two specials)."""
    length = len(special_tokens_mask)
    if length <= max_seq_len:
        return list(range(length))
    lead = next(i for i, special in enumerate(special_tokens_mask) if not special)
    trail = next(i for i, special in enumerate(reversed(special_tokens_mask)) if not special)
    budget = max_seq_len - lead - trail
    if budget < 1:
        raise KdbertError(f"a token limit of {max_seq_len} leaves no room for text beside {lead + trail} special "
                          "tokens; raise --max-seq-len")
    head = {"head": budget, "tail": 0, "head+tail": round(budget / 4)}[truncation]
    content = range(lead, length - trail)
    chosen = list(content[:head]) + list(content[len(content) - (budget - head):])
    return list(range(lead)) + chosen + list(range(length - trail, length))


def encode_examples(tokenizer, examples: list[Example], max_seq_len: int, truncation: str = "head",
                    doc_stride: int = DOC_STRIDE) -> EncodedDataset:
    """Tokenise examples (pairs as ``[CLS] a [SEP] b [SEP]``), cut to ``max_seq_len`` tokens: pairs
    and ``head`` by the tokenizer, single texts by ``tail`` or ``head+tail`` (:func:`kept_positions`)
    or into ``windows`` (:func:`encode_windows`)."""
    columns = list(zip(*(ex.texts for ex in examples))) if examples else [[]]
    if truncation == "head":
        encoded = tokenizer(*[list(c) for c in columns], truncation=True, max_length=max_seq_len)
        rows = [{key: encoded[key][i] for key in encoded.keys()} for i in range(len(examples))]
    elif len(columns) > 1:
        raise KdbertError(f"--truncation {truncation} applies to single-text tasks; pairs are cut from the head "
                          "(leave --truncation at head)")
    elif truncation == "windows":
        return encode_windows(tokenizer, examples, max_seq_len, doc_stride)
    else:
        encoded = tokenizer(list(columns[0]), return_special_tokens_mask=True, verbose=False)
        rows = []
        for i in range(len(examples)):
            kept = kept_positions(encoded["special_tokens_mask"][i], max_seq_len, truncation)
            rows.append({key: [encoded[key][i][p] for p in kept] for key in encoded.keys()
                         if key != "special_tokens_mask"})
    for row, example in zip(rows, examples):
        if example.label is not None:
            row["labels"] = example.label
    return EncodedDataset(rows)


def encode_windows(tokenizer, examples: list[Example], max_seq_len: int, doc_stride: int) -> EncodedDataset:
    """Single texts cut into windows of at most ``max_seq_len`` tokens, consecutive windows sharing
    ``doc_stride`` tokens (a text that fits is one window). Each window is a row with its text's label
    and ``example``, the text's index in ``examples``, by which :func:`pool_windows` scores the text."""
    if not examples:
        return EncodedDataset([])
    if not getattr(tokenizer, "is_fast", True):
        raise KdbertError("--truncation windows needs a fast (Rust) tokenizer; load the model's tokenizer.json")
    check_stride(doc_stride, max_seq_len - tokenizer.num_special_tokens_to_add(pair=False), max_seq_len)
    encoded = tokenizer([ex.texts[0] for ex in examples], truncation=True, max_length=max_seq_len,
                        stride=doc_stride, return_overflowing_tokens=True)
    keys = [key for key in encoded.keys() if key != "overflow_to_sample_mapping"]
    rows = []
    for w, index in enumerate(encoded["overflow_to_sample_mapping"]):
        row = {key: encoded[key][w] for key in keys}
        row["example"] = index
        if examples[index].label is not None:
            row["labels"] = examples[index].label
        rows.append(row)
    return EncodedDataset(rows)


def pool_windows(logits: np.ndarray, dataset: EncodedDataset) -> np.ndarray:
    """One row of logits per text: the mean over its windows, (N_texts, C), when ``dataset``'s rows
    are windows of texts (:func:`encode_windows`: they carry ``example``); else ``logits`` as they are."""
    if not dataset.features or "example" not in dataset.features[0]:
        return logits
    owners = np.array([row["example"] for row in dataset.features])
    sums = np.zeros((owners.max() + 1, *logits.shape[1:]), dtype=np.float64)
    np.add.at(sums, owners, logits)
    return (sums / np.bincount(owners)[:, None]).astype(logits.dtype)


class PaddingCollator:
    """Pad a list of features to the batch's longest row.

    Returns ``input_ids`` (B, L), ``attention_mask`` (B, L), ``token_type_ids`` (B, L) when the
    tokenizer makes them, and ``labels`` (B,) as long (classification) or float (regression).
    """

    def __init__(self, pad_token_id: int, regression: bool = False):
        self.pad_token_id = pad_token_id
        self.regression = regression

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        batch = {}
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            if key not in features[0]:
                continue
            pad = self.pad_token_id if key == "input_ids" else 0
            batch[key] = torch.tensor([f[key] + [pad] * (longest - len(f[key])) for f in features])
        if "attention_mask" not in batch:
            batch["attention_mask"] = (batch["input_ids"] != self.pad_token_id).long()
        if "labels" in features[0]:
            dtype = torch.float32 if self.regression else torch.long
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=dtype)
        return batch


class ModelInputs(Protocol):
    """How one model's inputs are made: ``encode`` examples into rows (lists), ``collate`` rows
    into a batch of tensors the model's forward takes."""

    def encode(self, examples: list[Example]) -> list[dict]: ...

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]: ...


class TokenizerInputs:
    """:class:`ModelInputs` of an HF tokenizer: token ids, token types when the tokenizer makes
    them, attention mask; cut to ``max_seq_len`` by ``truncation``, padded per batch. QA rows, and
    texts cut into ``windows``, are windows sharing ``doc_stride`` tokens."""

    def __init__(self, tokenizer, max_seq_len: int, truncation: str = "head", doc_stride: int = DOC_STRIDE,
                 question_answering: bool = False):
        self.tokenizer, self.max_seq_len, self.truncation = tokenizer, max_seq_len, truncation
        self.doc_stride, self.question_answering = doc_stride, question_answering
        self.padding = PaddingCollator(tokenizer.pad_token_id)

    @classmethod
    def for_task(cls, tokenizer, max_seq_len: int, spec) -> "TokenizerInputs":
        """The inputs of ``spec``: its truncation, windows of ``spec.doc_stride``, QA or not."""
        return cls(tokenizer, max_seq_len, spec.truncation, spec.doc_stride, spec.question_answering)

    def rows(self, examples: list[Example]) -> EncodedDataset:
        """Rows with labels: one per example, or one per window for QA (:func:`~kdbert.data.qa_windows.encode_qa`)
        and for ``windows`` (:func:`encode_windows`)."""
        if self.question_answering:
            return EncodedDataset(encode_qa(self.tokenizer, examples, self.max_seq_len, self.doc_stride))
        return encode_examples(self.tokenizer, examples, self.max_seq_len, self.truncation, self.doc_stride)

    def encode(self, examples: list[Example]) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "labels"} for row in self.rows(examples).features]

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        return self.padding(features)


def encode_task(examples: list[Example], teacher: TokenizerInputs,
                student: ModelInputs | None = None) -> EncodedDataset:
    """Training rows: one shared dict (``student=None``: the student reads the teacher's inputs),
    or ``{"teacher", "student", "labels"}`` with each model's own inputs."""
    if student is None:
        return teacher.rows(examples)
    if teacher.truncation == "windows":
        raise KdbertError("--truncation windows makes several rows of a text for the teacher, which a student with "
                          "its own inputs cannot pair with; use head, tail or head+tail")
    rows = [{"teacher": t, "student": s} for t, s in zip(teacher.encode(examples), student.encode(examples))]
    for row, example in zip(rows, examples):
        if example.label is not None:
            row["labels"] = example.label
    return EncodedDataset(rows)


def encode_with_logits(examples: list[Example], student: ModelInputs, teacher_logits: np.ndarray | None = None,
                       teacher_sentences: np.ndarray | None = None) -> EncodedDataset:
    """Training rows of a student that never reads the teacher's tokens: ``{"student": {...},
    "teacher_logits": (C,) float32, "teacher_sentence": (d,) float32, "labels"}``, the teacher's
    stored logits (N, C) and sentence vectors (N, d) each left out when ``None``."""
    for name, stored in (("logits", teacher_logits), ("sentence vectors", teacher_sentences)):
        if stored is not None and len(stored) != len(examples):
            raise KdbertError(f"{len(stored)} rows of teacher {name} for {len(examples)} examples; "
                              "label the same examples with the teacher")
    rows = [{"student": s} for s in student.encode(examples)]
    for i, (row, example) in enumerate(zip(rows, examples)):
        if teacher_logits is not None:
            row["teacher_logits"] = np.asarray(teacher_logits[i], dtype=np.float32)
        if teacher_sentences is not None:
            row["teacher_sentence"] = np.asarray(teacher_sentences[i], dtype=np.float32)
        if example.label is not None:
            row["labels"] = example.label
    return EncodedDataset(rows)


def longer_than(tokenizer, examples: list[Example], max_seq_len: int) -> list[bool]:
    """Per example, whether its tokens (special tokens included, pairs together) are more than
    ``max_seq_len``: the rows a limit of ``max_seq_len`` cuts."""
    columns = [list(c) for c in zip(*(ex.texts for ex in examples))] if examples else [[]]
    return [len(ids) > max_seq_len for ids in tokenizer(*columns, verbose=False)["input_ids"]]


def with_targets(batch: dict, features: list[dict], regression: bool) -> dict:
    """``batch`` with what the rows hold to learn from: stored teacher logits (B, C) and sentence
    vectors (B, d) stacked, and the labels, (B,), float for a regression, else long."""
    for name in ("teacher_logits", "teacher_sentence"):
        if name in features[0]:
            batch[name] = torch.from_numpy(np.stack([f[name] for f in features]))
    if "labels" in features[0]:
        dtype = torch.float32 if regression else torch.long
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=dtype)
    return batch


class TaskCollator:
    """Batches of :func:`encode_task` / :func:`encode_with_logits` rows: :class:`PaddingCollator`
    for shared rows, else each side collated by its own :class:`ModelInputs` (``teacher`` None:
    rows without the teacher's inputs; stored teacher logits stacked, (B, C)) and the labels as long
    or float."""

    def __init__(self, teacher: TokenizerInputs | None, student: ModelInputs | None = None, regression: bool = False):
        self.shared = None if teacher is None else PaddingCollator(teacher.tokenizer.pad_token_id, regression)
        self.teacher, self.student, self.regression = teacher, student, regression

    def __call__(self, features: list[dict]) -> dict:
        if self.student is None:
            return self.shared(features)
        batch = {"student": self.student.collate([f["student"] for f in features])}
        if "teacher" in features[0]:
            batch["teacher"] = self.teacher.collate([f["teacher"] for f in features])
        return with_targets(batch, features, self.regression)


def epoch_order(lengths: list[int], batch_size: int, seed: int, epoch: int, group_by_length: bool = True) -> list[int]:
    """Row order for one epoch, a pure function of ``(seed, epoch)``."""
    generator = torch.Generator().manual_seed(seed * 1000 + epoch)
    if not group_by_length:
        return torch.randperm(len(lengths), generator=generator).tolist()
    return list(LengthGroupedSampler(batch_size, lengths=lengths, generator=generator))


def labelled_first_order(lengths: list[int], batch_size: int, seed: int, labelled: int,
                         from_epoch: int) -> Callable[[int], list[list[int]]]:
    """A stage's batch order (:attr:`kdbert.core.stages.Stage.order`) over rows whose first ``labelled``
    are the task's own and the rest teacher-labelled ``--unlabelled`` rows: epochs before ``from_epoch``
    read the first ``labelled`` rows alone, later ones every row; each epoch length-grouped
    (:func:`epoch_order`), a pure function of ``(seed, epoch)``."""
    def order(epoch: int) -> list[list[int]]:
        rows = epoch_order(lengths[:labelled] if epoch < from_epoch else lengths, batch_size, seed, epoch)
        return [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
    return order


def sequential_batches(dataset: EncodedDataset, batch_size: int):
    """Index batches in length-sorted order for fast evaluation (order restored by the caller)."""
    lengths = dataset.lengths
    order = sorted(range(len(dataset)), key=lambda i: lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


PAD_LOGIT = -1e4  # fills the positions past a row's end in per-position outputs (QA windows)


def predict_rows(dataset: EncodedDataset, collator, batch_size: int, outputs_of) -> np.ndarray:
    """``outputs_of(batch) -> (B, ...) array`` over ``dataset`` in length-sorted batches, returned in
    the dataset's order: (N, C) for a classifier; per-position outputs (B, K, L) (QA: start and end
    logits, K = 2) are cut to each row's own n tokens and padded with :data:`PAD_LOGIT` to the
    longest row, (N, K, n_max), so a row's values do not depend on the batch it was run in."""
    rows: list = [None] * len(dataset)
    lengths = dataset.lengths
    for indices in sequential_batches(dataset, batch_size):
        values = np.asarray(outputs_of(collator([dataset[i] for i in indices])), dtype=np.float32)
        for row, index in enumerate(indices):
            rows[index] = values[row] if values.ndim < 3 else values[row, :, :lengths[index]]
    if rows and rows[0].ndim == 2:
        longest = max(r.shape[-1] for r in rows)
        rows = [np.pad(r, ((0, 0), (0, longest - r.shape[-1])), constant_values=PAD_LOGIT) for r in rows]
    return np.stack(rows)
