"""Tokenise once, then batch with dynamic padding and length-grouped ordering.

Dynamic padding pads each batch only to its longest row; length grouping shuffles rows,
cuts them into mega-batches of ``50 * batch_size``, sorts each by length and batches them, so
rows in a batch have similar lengths. On a CPU this roughly halves GLUE training time against
padding everything to ``max_seq_len``. The order is a pure function of ``(seed, epoch)``, which
is what lets a resumed run continue with exactly the batches it would have seen.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset
from transformers.trainer_pt_utils import LengthGroupedSampler

from kdbert.data.glue import Example


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
        return [len(f["input_ids"]) for f in self.features]


def encode_examples(tokenizer, examples: list[Example], max_seq_len: int) -> EncodedDataset:
    """Tokenise examples (pairs as ``[CLS] a [SEP] b [SEP]``), truncating to ``max_seq_len``."""
    columns = list(zip(*(ex.texts for ex in examples))) if examples else [[]]
    encoded = tokenizer(*[list(c) for c in columns], truncation=True, max_length=max_seq_len)
    features = []
    for i, example in enumerate(examples):
        row = {key: encoded[key][i] for key in encoded.keys()}
        if example.label is not None:
            row["labels"] = example.label
        features.append(row)
    return EncodedDataset(features)


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


def epoch_order(lengths: list[int], batch_size: int, seed: int, epoch: int, group_by_length: bool = True) -> list[int]:
    """Row order for one epoch, a pure function of ``(seed, epoch)``."""
    generator = torch.Generator().manual_seed(seed * 1000 + epoch)
    if not group_by_length:
        return torch.randperm(len(lengths), generator=generator).tolist()
    return list(LengthGroupedSampler(batch_size, lengths=lengths, generator=generator))


def sequential_batches(dataset: EncodedDataset, batch_size: int):
    """Index batches in length-sorted order for fast evaluation (order restored by the caller)."""
    order = sorted(range(len(dataset)), key=lambda i: len(dataset[i]["input_ids"]))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
