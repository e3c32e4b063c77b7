"""Trace: what one forward pass of an unmodified HF BERT-family model exposes to distillation.

HF's ``output_attentions`` returns *post*-softmax probabilities (and SDPA returns none), while
TinyBERT distils *pre*-softmax scores. We register an attention function, ``kdbert_trace``,
with transformers' attention interface; it computes attention exactly like HF's eager path and
records the scores of every layer. :func:`trace` switches a model to it for one forward pass
and switches back, so saved models never carry it.

Recorded scores follow the TinyBERT reference convention::

    scores = Q K^T / sqrt(d_head) + (1 - key_mask) * -10000        shape (B, H, L, L)

so ``softmax(scores)`` equals HF's eager attention probabilities (exp(-10000) is 0 in fp32),
and a loss can recognise padded keys by value or, better, from ``attention_mask``.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

TRACE_IMPLEMENTATION = "kdbert_trace"
MASKED_SCORE = -10000.0

_recorder = threading.local()


@dataclass
class Trace:
    """Tensors of one forward pass.

    Attributes:
        hidden_states: tuple of (B, L, d), ``hidden_states[0]`` is the embedding output and
            ``hidden_states[m]`` the output of layer m (1-based), so it has num_layers + 1 items.
        attention_scores: tuple of (B, H, L, L) pre-softmax scores, one per layer.
        logits: (B, C) for classifiers, (B, L, V) for masked LMs, ``None`` for bare encoders.
        attention_mask: (B, L), 1 for real tokens.
    """

    hidden_states: tuple[torch.Tensor, ...]
    attention_scores: tuple[torch.Tensor, ...]
    logits: torch.Tensor | None
    attention_mask: torch.Tensor

    @property
    def embeddings(self) -> torch.Tensor:
        return self.hidden_states[0]


def _traced_attention(module: nn.Module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """HF eager attention, recording pre-softmax scores into the active recorder.

    query/key/value: (B, H, L, d_head). Returns (output (B, L, H, d_head), probabilities).
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    raw = torch.matmul(query, key.transpose(2, 3)) * scaling
    scores = raw if attention_mask is None else raw + attention_mask
    probabilities = nn.functional.dropout(nn.functional.softmax(scores, dim=-1), p=dropout, training=module.training)
    output = torch.matmul(probabilities, value).transpose(1, 2).contiguous()
    records = getattr(_recorder, "records", None)
    if records is not None:
        key_mask = _recorder.key_mask.to(raw.dtype)[:, None, None, :]
        records.append(raw + (1.0 - key_mask) * MASKED_SCORE)
    return output, probabilities


AttentionInterface.register(TRACE_IMPLEMENTATION, _traced_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(TRACE_IMPLEMENTATION, eager_mask)


@contextlib.contextmanager
def _recording(model: nn.Module, attention_mask: torch.Tensor):
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = TRACE_IMPLEMENTATION
    _recorder.records, _recorder.key_mask = [], attention_mask
    try:
        yield _recorder.records
    finally:
        config._attn_implementation = previous
        _recorder.records, _recorder.key_mask = None, None


def model_inputs(model: nn.Module, batch: dict) -> dict:
    """The subset of ``batch`` the model's forward accepts (DistilBERT takes no token_type_ids)."""
    accepted = inspect.signature(model.forward).parameters
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids") and k in accepted}


def trace(model: nn.Module, batch: dict, with_attention: bool = True) -> Trace:
    """Run ``model`` on ``batch`` once and return its :class:`Trace`.

    Gradients flow as in a normal forward pass; wrap in ``torch.no_grad()`` for a teacher.
    ``with_attention=False`` skips recording scores (runs the model's own attention kernel).
    """
    inputs = model_inputs(model, batch)
    attention_mask = inputs.get("attention_mask")
    if attention_mask is None:
        attention_mask = torch.ones_like(inputs["input_ids"])
        inputs["attention_mask"] = attention_mask
    context = _recording(model, attention_mask) if with_attention else contextlib.nullcontext([])
    with context as records:
        outputs = model(**inputs, output_hidden_states=True, return_dict=True)
        scores = tuple(records)
    return Trace(
        hidden_states=tuple(outputs.hidden_states),
        attention_scores=scores,
        logits=getattr(outputs, "logits", None),
        attention_mask=attention_mask,
    )
