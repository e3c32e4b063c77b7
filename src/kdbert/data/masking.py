"""Dynamic masked-LM masking of packed sequences, shared by the methods with an MLM term
(DistilBERT's and MobileBERT's general distillation).

Per batch, ``ceil(mask_prob * n)`` of the ``n`` maskable tokens (not special, not padding) are
drawn without replacement, uniformly or with probability proportional to a per-token weight
(:func:`token_weights`: ``count^-s``, rare tokens more often). Of the chosen tokens 80 % become
``[MASK]``, 10 % a random non-special token, 10 % stay (``MASK_SPLIT``). Draws use the global
torch RNG unless a generator is given, so a resumed run (whose RNG the trainer checkpoints)
masks as the uninterrupted one.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kdbert.errors import KdbertError

MASK_TOKEN = "[MASK]"  # the word augmenters write for a masked word; the teacher reads its own mask token there
MASK_PROB = 0.15
MASK_SPLIT = (0.8, 0.1, 0.1)  # [MASK], random token, unchanged


def token_weights(sequences: list[list[int]], vocab_size: int, smoothing: float) -> torch.Tensor:
    """``max(count, 1) ** -smoothing`` per vocabulary id, counts over ``sequences`` (reference:
    ``token_counts.py`` + ``mlm_smoothing``)."""
    counts = np.bincount(np.fromiter((t for s in sequences for t in s), dtype=np.int64), minlength=vocab_size)
    return torch.from_numpy(np.maximum(counts[:vocab_size], 1).astype(np.float64) ** -smoothing).float()


class DynamicMasker:
    """BERT-style dynamic masking of a padded batch (see the module docstring).

    ``__call__(input_ids, attention_mask, generator=None) -> (masked_ids, labels)`` with labels
    -100 except at the chosen positions. Special tokens and padding are never chosen.
    """

    def __init__(self, tokenizer, mask_prob: float = MASK_PROB, weights: torch.Tensor | None = None,
                 split: tuple[float, float, float] = MASK_SPLIT):
        if tokenizer.mask_token_id is None:
            raise KdbertError("the teacher's tokenizer has no [MASK] token; masked-LM distillation needs one")
        special = sorted(set(tokenizer.all_special_ids))
        self.special_ids = torch.tensor(special, dtype=torch.long)
        self.mask_id = tokenizer.mask_token_id
        self.random_ids = torch.tensor([i for i in range(len(tokenizer)) if i not in set(special)], dtype=torch.long)
        self.mask_prob = mask_prob
        self.weights = weights
        self.split = split

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generator=None):
        eligible = attention_mask.bool() & ~torch.isin(input_ids, self.special_ids)
        labels = torch.full_like(input_ids, -100)
        masked = input_ids.clone()
        n = math.ceil(self.mask_prob * int(eligible.sum()))
        if n == 0:
            return masked, labels
        probs = eligible.reshape(-1).float()
        if self.weights is not None:
            probs = probs * self.weights[input_ids.reshape(-1)]
        chosen = torch.multinomial(probs, n, replacement=False, generator=generator)
        flat, flat_labels = masked.view(-1), labels.view(-1)
        flat_labels[chosen] = flat[chosen]
        draw = torch.rand(n, generator=generator)
        to_mask = chosen[draw < self.split[0]]
        to_random = chosen[(draw >= self.split[0]) & (draw < self.split[0] + self.split[1])]
        flat[to_mask] = self.mask_id
        picks = torch.randint(len(self.random_ids), (len(to_random),), generator=generator)
        flat[to_random] = self.random_ids[picks]
        return masked, labels


class MlmCollator:
    """Pad ``{"input_ids"}`` features and mask them: ``input_ids``, ``attention_mask``, ``labels``."""

    def __init__(self, pad_token_id: int, masker: DynamicMasker):
        self.pad_token_id = pad_token_id
        self.masker = masker

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(features), longest), dtype=torch.long)
        for row, feature in enumerate(features):
            ids[row, :len(feature["input_ids"])] = torch.tensor(feature["input_ids"])
            mask[row, :len(feature["input_ids"])] = 1
        masked, labels = self.masker(ids, mask)
        return {"input_ids": masked, "attention_mask": mask, "labels": labels}
