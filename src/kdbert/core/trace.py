"""Trace: what one forward pass of a model exposes to distillation, from three adapters.

- :class:`HFAdapter`, for any Hugging Face model whose attention goes through transformers'
  attention interface (BERT, DistilBERT, MobileBERT, ...). HF's ``output_attentions`` returns
  *post*-softmax probabilities (and SDPA returns none), while TinyBERT distils *pre*-softmax
  scores, so the adapter registers an attention function, ``kdbert_trace``, which computes
  attention exactly like HF's eager path and records every layer's scores; it switches the model
  to it (``set_attn_implementation``) for one forward pass and back, so saved models never carry
  it. Hidden states come from ``output_hidden_states``.
- :class:`BiasedScoresAdapter`, for HF models whose attention module computes its scores itself
  (MPNet, with its relative-position bias): the HF adapter's hidden states and logits, the scores
  built from the query and key projections and the bias recorded by hooks.
- :class:`HookAdapter`, for models that are not HF transformers (a BiLSTM student): forward hooks
  record the outputs of named submodules as custom features; the model's output (a tensor, or an
  object with ``.logits``) is the logits.

:func:`trace` picks the adapter registered for the model's class (:func:`register_adapter`), the
HF adapter for ``PreTrainedModel`` subclasses. A feature a match needs that the adapter did not
record raises an error naming the model class (:meth:`Trace.require`).

Recorded scores follow the TinyBERT reference convention::

    scores = Q K^T / sqrt(d_head) + (1 - key_mask) * -10000        shape (B, H, L, L)

so ``softmax(scores)`` equals HF's eager attention probabilities (exp(-10000) is 0 in fp32),
and a loss can recognise padded keys by value or, better, from ``attention_mask``.

Batches: a batch is either one dict of tensors that teacher and student both read (the student
uses the teacher's tokenizer), or ``{"teacher": {...}, "student": {...}, "labels": ...}`` with
each model's own inputs (:func:`model_batch`).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import threading
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import AttentionInterface, MPNetPreTrainedModel, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

from kdbert.errors import KdbertError

TRACE_IMPLEMENTATION = "kdbert_trace"
MASKED_SCORE = -10000.0

_recorder = threading.local()


@dataclass
class Trace:
    """Tensors of one forward pass (``None``: the adapter did not record it).

    Attributes:
        hidden_states: tuple of (B, L, d), ``hidden_states[0]`` is the embedding output and
            ``hidden_states[m]`` the output of layer m (1-based), so it has num_layers + 1 items.
        attention_scores: tuple of (B, H, L, L) pre-softmax scores, one per layer.
        logits: (B, C) for classifiers, (B, L, V) for masked LMs, (B, 2, L) start and end logits
            for question answering (:func:`qa_logits`), ``None`` for bare encoders.
        attention_mask: (B, L), 1 for real tokens.
        features: custom named features (hook adapter).
        model_class: the traced model's class name, for errors.
    """

    hidden_states: tuple[torch.Tensor, ...] | None
    attention_scores: tuple[torch.Tensor, ...] | None
    logits: torch.Tensor | None
    attention_mask: torch.Tensor | None
    features: dict[str, torch.Tensor] = field(default_factory=dict)
    model_class: str = ""

    def recorded(self) -> list[str]:
        names = [n for n in ("hidden_states", "attention_scores", "logits") if getattr(self, n) is not None]
        return names + list(self.features)

    def require(self, name: str, role: str = "model"):
        """``getattr(self, name)``, or a clear error when the adapter did not record it."""
        value = getattr(self, name)
        if value is None:
            why = {"attention_scores": "its attention does not go through transformers' attention interface "
                                       "(or attention was not requested for this stage)",
                   "logits": "it has no classifier or LM head"}.get(name, "its adapter does not record it")
            raise KdbertError(f"the {role} ({self.model_class}) recorded no {name}: {why}; drop the matches "
                              f"that use it, or trace the model with an adapter that records it")
        return value


def qa_logits(outputs) -> torch.Tensor:
    """Start and end logits of a QA model's output stacked as (B, 2, L): per row a distribution over
    positions for the start and one for the end, so logit losses treat them as two rows of L classes."""
    return torch.stack([outputs.start_logits, outputs.end_logits], dim=1)


def output_logits(outputs) -> torch.Tensor | None:
    """The logits of a model's output: a tensor as is, a QA model's start and end logits as (B, 2, L)
    (:func:`qa_logits`), else ``.logits`` (``None`` for a bare encoder)."""
    if torch.is_tensor(outputs):
        return outputs
    if getattr(outputs, "start_logits", None) is not None:
        return qa_logits(outputs)
    return getattr(outputs, "logits", None)


def model_batch(batch: dict, role: str) -> dict:
    """The inputs of ``role`` ("teacher" or "student"): its own sub-dict, or the shared batch."""
    return batch[role] if role in batch else batch


def _accepted(model: nn.Module, inputs: dict) -> dict:
    """The tensors of ``inputs`` that ``model.forward`` takes (labels left out: losses are ours)."""
    parameters = inspect.signature(model.forward).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return {k: v for k, v in inputs.items() if k != "labels" and torch.is_tensor(v) and (k in parameters or takes_any)}


def model_inputs(model: nn.Module, batch: dict, role: str = "student") -> dict:
    """The subset of ``role``'s batch the model's forward accepts (DistilBERT takes no token_type_ids)."""
    return _accepted(model, model_batch(batch, role))


# ----------------------------------------------------------------------------- HF adapter
def eager_attention(module: nn.Module, query, key, value, attention_mask, scaling=None, dropout=0.0):
    """HF's eager attention, also returning the raw scores.

    query/key/value: (B, H, L, d_head); ``attention_mask`` additive (B, 1, L, L) or ``None``.
    raw = Q K^T * scaling (B, H, L, L), probabilities = dropout(softmax(raw + mask)).
    Returns (output (B, L, H, d_head), probabilities, raw).
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    raw = torch.matmul(query, key.transpose(2, 3)) * scaling
    scores = raw if attention_mask is None else raw + attention_mask
    probabilities = nn.functional.dropout(nn.functional.softmax(scores, dim=-1), p=dropout, training=module.training)
    output = torch.matmul(probabilities, value).transpose(1, 2).contiguous()
    return output, probabilities, raw


def _traced_attention(module: nn.Module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """HF eager attention (:func:`eager_attention`), recording pre-softmax scores into the active
    recorder. Returns (output (B, L, H, d_head), probabilities)."""
    output, probabilities, raw = eager_attention(module, query, key, value, attention_mask, scaling, dropout)
    records = getattr(_recorder, "records", None)
    if records is not None:
        key_mask = _recorder.key_mask.to(raw.dtype)[:, None, None, :]
        records.append(raw + (1.0 - key_mask) * MASKED_SCORE)
    return output, probabilities


AttentionInterface.register(TRACE_IMPLEMENTATION, _traced_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(TRACE_IMPLEMENTATION, eager_mask)


@contextlib.contextmanager
def _recording(model: PreTrainedModel, attention_mask: torch.Tensor):
    previous = model.config._attn_implementation
    model.set_attn_implementation(TRACE_IMPLEMENTATION)
    _recorder.records, _recorder.key_mask = [], attention_mask
    try:
        yield _recorder.records
    finally:
        model.set_attn_implementation(previous)
        _recorder.records, _recorder.key_mask = None, None


class HFAdapter:
    """Trace an HF model: hidden states, pre-softmax attention scores (when asked), logits."""

    def __call__(self, model: nn.Module, inputs: dict, with_attention: bool) -> Trace:
        inputs = _accepted(model, inputs)
        attention_mask = inputs.get("attention_mask")
        if attention_mask is None:
            attention_mask = torch.ones_like(inputs["input_ids"])
            inputs["attention_mask"] = attention_mask
        context = _recording(model, attention_mask) if with_attention else contextlib.nullcontext([])
        with context as records:
            outputs = model(**inputs, output_hidden_states=True, return_dict=True)
            scores = tuple(records) or None
        hidden = getattr(outputs, "hidden_states", None)
        return Trace(hidden_states=tuple(hidden) if hidden is not None else None, attention_scores=scores,
                     logits=output_logits(outputs), attention_mask=attention_mask,
                     model_class=type(model).__name__)


class BiasedScoresAdapter(HFAdapter):
    """Trace an HF model whose attention computes ``softmax(Q K^T / sqrt(d) + bias + mask)`` itself,
    outside transformers' attention interface (MPNet, ``bias`` its relative-position bias): as the
    HF adapter, with each layer's scores built from what hooks record, the query and key projections
    (B, L, H*d) of every layer below ``layers`` (paths below the base model) and the bias table's
    lookup (L, L, H), masked as :func:`_traced_attention` masks them."""

    def __init__(self, layers: str, query: str, key: str, bias: str):
        self.layers, self.query, self.key, self.bias = layers, query, key, bias

    def __call__(self, model: nn.Module, inputs: dict, with_attention: bool) -> Trace:
        if not with_attention:
            return super().__call__(model, inputs, False)
        base = model.base_model
        recorded: dict = {}
        layers = base.get_submodule(self.layers)
        modules = {"bias": base.get_submodule(self.bias)}
        for i, layer in enumerate(layers):
            modules[("query", i)], modules[("key", i)] = layer.get_submodule(self.query), layer.get_submodule(self.key)
        handles = [module.register_forward_hook(lambda _m, _a, out, name=name: recorded.__setitem__(name, out))
                   for name, module in modules.items()]
        try:
            traced = super().__call__(model, inputs, False)
        finally:
            for handle in handles:
                handle.remove()
        bias = recorded["bias"].permute(2, 0, 1).unsqueeze(0)  # (1, H, L, L)
        key_mask = traced.attention_mask.to(bias.dtype)[:, None, None, :]
        scores = []
        for i in range(len(layers)):
            query, key = (recorded[(name, i)] for name in ("query", "key"))
            shape = (*query.shape[:2], bias.shape[1], -1)
            query, key = query.view(shape).transpose(1, 2), key.view(shape).transpose(1, 2)
            raw = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(query.shape[-1]) + bias
            scores.append(raw + (1.0 - key_mask) * MASKED_SCORE)
        traced.attention_scores = tuple(scores)
        return traced


class HookAdapter:
    """Trace any ``nn.Module``: ``features`` maps a feature name to a submodule's dotted path
    (``{"encoded": "encoder"}``); each submodule's output (first item of a tuple) is recorded in
    ``trace.features``. The model is called with the batch tensors its forward accepts."""

    def __init__(self, features: dict[str, str]):
        self.features = dict(features)

    def __call__(self, model: nn.Module, inputs: dict, with_attention: bool) -> Trace:
        recorded: dict[str, torch.Tensor] = {}
        handles = []
        for name, path in self.features.items():
            try:
                module = model.get_submodule(path)
            except AttributeError:
                raise KdbertError(f"{type(model).__name__} has no submodule '{path}' (feature '{name}')") from None

            def hook(_module, _args, output, name=name):
                recorded[name] = output[0] if isinstance(output, tuple) else output

            handles.append(module.register_forward_hook(hook))
        try:
            output = model(**_accepted(model, inputs))
        finally:
            for handle in handles:
                handle.remove()
        logits = output if torch.is_tensor(output) else getattr(output, "logits", None)
        return Trace(hidden_states=None, attention_scores=None, logits=logits,
                     attention_mask=inputs.get("attention_mask"), features=recorded, model_class=type(model).__name__)


_ADAPTERS: dict[type, object] = {}


def register_adapter(model_class: type, adapter) -> None:
    """Trace instances of ``model_class`` (and subclasses) with ``adapter(model, inputs, with_attention)``."""
    _ADAPTERS[model_class] = adapter


register_adapter(MPNetPreTrainedModel, BiasedScoresAdapter("encoder.layer", "attention.attn.q", "attention.attn.k",
                                                            "encoder.relative_attention_bias"))


def adapter_for(model: nn.Module):
    for cls in type(model).__mro__:
        if cls in _ADAPTERS:
            return _ADAPTERS[cls]
    if isinstance(model, PreTrainedModel):
        return HFAdapter()
    raise KdbertError(f"no trace adapter for {type(model).__name__}; register one with "
                      "kdbert.core.trace.register_adapter (e.g. a HookAdapter of its submodules)")


def trace(model: nn.Module, batch: dict, with_attention: bool = True, role: str = "student") -> Trace:
    """Run ``model`` on ``role``'s inputs of ``batch`` once and return its :class:`Trace`.

    Gradients flow as in a normal forward pass; wrap in ``torch.no_grad()`` for a teacher.
    ``with_attention=False`` skips recording scores (runs the model's own attention kernel).
    """
    return adapter_for(model)(model, model_batch(batch, role), with_attention)
