"""Which of the teacher's layers, heads, FFN units and hidden units a smaller student keeps, ranked by
importance on the task's training rows instead of evenly spaced (:func:`select_teacher_weights`
reads an :class:`Importance`).

- **Heads, FFN units, hidden units**: the first-order Taylor estimate of how much the teacher's loss
  changes when a group ``S`` of its weights is removed (Molchanov et al. 2019, "Importance
  Estimation for Neural Network Pruning"), summed over batches ``b`` of training rows::

      I_S = sum_b ( sum_{w in S} w * dL_b/dw )^2,     L_b: the teacher's task loss on batch b

  (cross-entropy against the gold labels; MSE for regression). A head's group is its rows of the
  query, key and value projections (weights and biases) and its columns of the attention output;
  an FFN unit's, its row of the FFN input and column of the FFN output; a hidden unit's, everything
  that reads or writes that dimension of the residual stream, in every layer (columns of the
  query, key, value and FFN input; rows of the attention and FFN outputs; the LayerNorms; the
  embedding tables' columns). Heads and FFN units are ranked per layer, hidden units once.
- **Layers**: greedy backward elimination (the layer-dropping of Sajjad et al. 2022, "On the
  effect of dropping layers of pre-trained transformer models", guided by the task): from all N
  layers, repeatedly drop the one whose removal (its output replaced by its input) moves the
  teacher's predictions least, ``KL(p_teacher || p_without)`` over the rows (MSE for regression),
  until one is left; a student of M layers copies the last M left, in order. For students that
  encode a pair's sentences apart and read their cosine (pair pooling), the one dropped at each
  step is the one whose removal leaves the layers whose cosine correlates best with the labels
  (:func:`pair_layer_elimination`).

The ranking costs a forward and backward pass over :data:`ROWS` rows and about N^2 / 3 forward
passes over :data:`LAYER_ROWS` of them, once per teacher and task (``kdbert compress`` keeps it in its
output folder). Within a time limit (``seconds``, what compress allows of its search), fewer batches
are summed, and the layers are ranked each dropped alone (N passes), or not at all (the uniform
map ceil(mN/M)): on a 2-core CPU a 12-layer teacher's greedy elimination costs minutes.
"""

from __future__ import annotations

import inspect
import json
import math
import random
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from kdbert.errors import KdbertError
from kdbert.families.selection import evenly_spaced, find_module

FILE = "importance.safetensors"
ROWS = 256  # training rows the Taylor importance sums over, at most
LAYER_ROWS = 64  # of them, those the layer elimination compares predictions on
BATCH = 32


@dataclass
class Importance:
    """The teacher's units ranked on a task: ``heads`` (N, h), ``ffn`` (N, i), ``hidden`` (d,), and
    ``dropped`` the layers (0-based) in the order elimination removed them (N - 1 of them)."""

    heads: torch.Tensor
    ffn: torch.Tensor
    hidden: torch.Tensor
    dropped: list[int]
    layer_rule: str = "greedy elimination"  # or "drop one" (each layer alone), "uniform" (no layer ranked)

    def layers(self, depth: int) -> list[int]:
        """The ``depth`` teacher layers (0-based, in order) a student of that depth copies (the uniform
        map ceil(mN/M) where the layers were not ranked)."""
        total = len(self.heads)
        if not 1 <= depth <= total:
            raise KdbertError(f"a student of {depth} layers cannot copy layers of a teacher of {total}")
        if len(self.dropped) < total - depth:
            return [math.ceil(m * total / depth) - 1 for m in range(1, depth + 1)]
        return sorted(set(range(total)) - set(self.dropped[: total - depth]))

    def save(self, folder: Path) -> None:
        path = folder / FILE
        tmp = path.with_name(path.name + ".tmp")
        save_file({"heads": self.heads.contiguous(), "ffn": self.ffn.contiguous(), "hidden": self.hidden.contiguous()},
                  str(tmp), metadata={"dropped": json.dumps(self.dropped), "layer_rule": self.layer_rule})
        tmp.replace(path)

    @classmethod
    def load(cls, folder: Path) -> Importance | None:
        path = folder / FILE
        if not path.is_file():
            return None
        from safetensors import safe_open

        with safe_open(str(path), "pt") as handle:
            metadata = handle.metadata()
        tensors = load_file(str(path))
        return cls(tensors["heads"], tensors["ffn"], tensors["hidden"], json.loads(metadata["dropped"]),
                   metadata.get("layer_rule", "greedy elimination"))


def _batches(model: nn.Module, tokenizer, rows: list, max_seq_len: int):
    """Padded batches of ``rows`` (:class:`~kdbert.data.glue.Example`) with their labels."""
    accepted = inspect.signature(model.forward).parameters
    regression = model.config.num_labels == 1
    for begin in range(0, len(rows), BATCH):
        chunk = rows[begin:begin + BATCH]
        texts = list(zip(*(row.texts for row in chunk)))
        inputs = tokenizer(*texts, padding=True, truncation=True, max_length=max_seq_len, return_tensors="pt")
        labels = torch.tensor([row.label for row in chunk], dtype=torch.float if regression else torch.long)
        yield {k: v for k, v in inputs.items() if k in accepted}, labels


def _task_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if logits.shape[-1] == 1:
        return F.mse_loss(logits.squeeze(-1), labels)
    return F.cross_entropy(logits, labels)


def _wg(module: nn.Module, part: str = "weight") -> torch.Tensor:
    """``w * dL/dw`` of one of ``module``'s parameters (zeros where it got no gradient)."""
    param = getattr(module, part)
    return torch.zeros_like(param) if param.grad is None else (param * param.grad).detach()


def unit_importance(model: nn.Module, layout, rows: list, tokenizer, max_seq_len: int,
                    more: Callable[[float], bool] = lambda seconds: True) -> tuple:
    """``(heads (N, h), ffn (N, i), hidden (d,))``: :math:`I_S` (module doc) of each group, summed
    over the batches of ``rows``; after each batch, ``more(its seconds)`` says whether to go on."""
    base = model.base_model
    layers = base.get_submodule(layout.layers)
    heads_n = model.config.num_attention_heads
    heads = torch.zeros(len(layers), heads_n)
    ffn = torch.zeros(len(layers), layers[0].get_submodule(layout.ffn_in).out_features)
    hidden = torch.zeros(model.config.hidden_size)
    model.eval()  # no dropout: the importance of the function the student copies
    trainable = {name: p.requires_grad for name, p in model.named_parameters()}
    model.requires_grad_(True)
    for inputs, labels in _batches(model, tokenizer, rows, max_seq_len):
        started = time.perf_counter()
        model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            _task_loss(model(**inputs).logits.float(), labels).backward()
        units = torch.zeros_like(hidden)
        for index, layer in enumerate(layers):
            def wg(path, part="weight"):
                return _wg(layer.get_submodule(path), part)

            per_head = torch.zeros(heads_n)
            for path in (layout.query, layout.key, layout.value):
                rows_sum = wg(path).sum(1) + wg(path, "bias")
                per_head += rows_sum.view(heads_n, -1).sum(1)
                units += wg(path).sum(0)
            out = wg(layout.attention_out)
            per_head += out.sum(0).view(heads_n, -1).sum(1)
            units += out.sum(1) + wg(layout.attention_out, "bias")
            heads[index] += per_head ** 2
            ffn_in, ffn_out = wg(layout.ffn_in), wg(layout.ffn_out)
            ffn[index] += (ffn_in.sum(1) + wg(layout.ffn_in, "bias") + ffn_out.sum(0)) ** 2
            units += ffn_in.sum(0) + ffn_out.sum(1) + wg(layout.ffn_out, "bias")
            for norm in (layout.attention_norm, layout.ffn_norm):
                units += wg(norm) + wg(norm, "bias")
        projection = find_module(model, layout.projection) if layout.projection else None
        if projection is not None:  # projected embeddings (ELECTRA): the projection writes the stream
            units += _wg(projection).sum(1) + _wg(projection, "bias")
        else:  # the embeddings are the stream's first units
            units += _wg(base.get_submodule(layout.embedding_norm)) + _wg(base.get_submodule(layout.embedding_norm),
                                                                             "bias")
            for path in layout.tables:
                units += _wg(base.get_submodule(path)).sum(0)
        for path in layout.poolers:  # dense layers on the first token read and write hidden units
            pooler = find_module(model, path)
            if pooler is not None and pooler.weight.grad is not None:
                units += _wg(pooler).sum(0) + _wg(pooler).sum(1) + _wg(pooler, "bias")
        hidden += units ** 2
        if not more(time.perf_counter() - started):
            break
    model.zero_grad(set_to_none=True)
    for name, param in model.named_parameters():
        param.requires_grad_(trainable[name])
    return heads, ffn, hidden


@contextmanager
def only_layers(model: nn.Module, layout, keep: list[int]):
    """The model with only the layers ``keep`` (0-based, in order) in its stack, for the block."""
    parent_path, _, name = layout.layers.rpartition(".")
    parent = model.base_model.get_submodule(parent_path) if parent_path else model.base_model
    every = getattr(parent, name)
    setattr(parent, name, nn.ModuleList([every[i] for i in keep]))
    try:
        yield model
    finally:
        setattr(parent, name, every)


def _predictions_moved(model: nn.Module, layout, batches: list, full: list, keep: list[int]) -> float:
    """How far the model with only the layers ``keep`` moves from its predictions ``full`` on
    ``batches``: summed KL(p_full || p_keep), or squared error for regression."""
    with only_layers(model, layout, keep):
        total = 0.0
        for (inputs, _), reference in zip(batches, full):
            logits = model(**inputs).logits.float()
            if logits.shape[-1] == 1:
                total += float(F.mse_loss(logits, reference, reduction="sum"))
            else:
                total += float(F.kl_div(F.log_softmax(logits, -1), F.log_softmax(reference, -1), log_target=True,
                                        reduction="sum"))
    return total


def _pair_batches(model: nn.Module, tokenizer, rows: list, max_seq_len: int) -> list[tuple[dict, dict]]:
    """``rows`` in batches, each the inputs of its pairs' first sentences and of their second ones, encoded apart."""
    accepted = inspect.signature(model.base_model.forward).parameters
    batches = []
    for begin in range(0, len(rows), BATCH):
        chunk = rows[begin:begin + BATCH]
        sides = [tokenizer([row.texts[side] for row in chunk], padding=True, truncation=True, max_length=max_seq_len,
                           return_tensors="pt") for side in (0, 1)]
        batches.append(tuple({k: v for k, v in inputs.items() if k in accepted} for inputs in sides))
    return batches


def _pair_cosines(model: nn.Module, batches: list[tuple[dict, dict]]) -> torch.Tensor:
    """(rows,): cos(u, v) of each pair of :func:`_pair_batches`, u and v the masked means of
    ``model``'s encoder's last hidden states over each sentence: what a pair-pooled student's head reads."""
    cosines = []
    for sides in batches:
        means = []
        for inputs in sides:
            hidden = model.base_model(**inputs).last_hidden_state.float()
            mask = inputs["attention_mask"].unsqueeze(-1).float()
            means.append((hidden * mask).sum(1) / mask.sum(1))
        cosines.append(F.cosine_similarity(*means, dim=-1))
    return torch.cat(cosines)


@torch.no_grad()
def pair_layer_elimination(model: nn.Module, layout, rows: list, tokenizer, max_seq_len: int) -> list[int]:
    """The layers (0-based) in the order they are dropped, N - 1 of them, for a student that encodes a
    pair's sentences apart and reads their cosine (pair pooling): greedy backward elimination keeping,
    at each step, the layers whose cosine correlates best (Pearson's r) with the gold labels of ``rows``
    (a regression's score or a binary label). The teacher's joint reading is no guide there: fine-tuned
    on pairs read as one sequence, it ranks layers for that reading (STS-B's teacher: its fourth for a
    1-layer cut, which kept 3.5 points less of it than its last, BENCHMARKS.md's recipe table)."""
    from scipy.stats import pearsonr  # here: scipy.stats takes seconds to import, which most commands never need

    model.eval()
    batches = _pair_batches(model, tokenizer, rows, max_seq_len)
    labels = [float(row.label) for row in rows]
    kept, dropped = list(range(len(model.base_model.get_submodule(layout.layers)))), []
    while len(kept) > 1:
        left = {}
        for layer in kept:
            with only_layers(model, layout, [k for k in kept if k != layer]):
                left[layer] = float(np.nan_to_num(pearsonr(_pair_cosines(model, batches).numpy(), labels)[0]))
        best = max(kept, key=lambda layer: (left[layer], layer))  # its removal leaves the best; ties: the higher
        kept.remove(best)
        dropped.append(best)
    return dropped


GREEDY_PASSES = {n: sum(m * (m - 1) for m in range(2, n + 1)) / n for n in range(1, 65)}
"""Full-depth forward passes greedy elimination costs for a teacher of n layers (m subsets of m - 1
layers at each size m)."""


@torch.no_grad()
def layer_elimination(model: nn.Module, layout, rows: list, tokenizer, max_seq_len: int,
                      greedy: bool = True) -> list[int]:
    """The layers (0-based) in the order they are dropped (module doc), N - 1 of them: by greedy
    elimination, or with ``greedy`` False ranked once, each layer dropped alone (N passes)."""
    batches = list(_batches(model, tokenizer, rows, max_seq_len))
    model.eval()
    full = [model(**inputs).logits.float() for inputs, _ in batches]
    kept, dropped = list(range(len(model.base_model.get_submodule(layout.layers)))), []
    if not greedy:
        scores = {layer: _predictions_moved(model, layout, batches, full, [k for k in kept if k != layer])
                  for layer in kept}
        return sorted(kept, key=lambda layer: (scores[layer], -layer))[:-1]
    while len(kept) > 1:
        scores = {layer: _predictions_moved(model, layout, batches, full, [k for k in kept if k != layer])
                  for layer in kept}
        least = min(kept, key=lambda layer: (scores[layer], -layer))  # ties: drop the higher layer
        kept.remove(least)
        dropped.append(least)
    return dropped


def task_importance(model: nn.Module, layout, rows: list, tokenizer, max_seq_len: int,
                    seconds: float | None = None, pairs_apart: bool = False) -> Importance:
    """The :class:`Importance` of ``model``'s units on :data:`ROWS` of ``rows`` drawn at random (seed 0;
    the layers on :data:`LAYER_ROWS` of those), within about ``seconds`` (None: no limit): the
    Taylor sums stop after the batches half of it affords (one at least), and the layers are ranked
    by greedy elimination where the rest affords it (:data:`GREEDY_PASSES` forward passes, a
    forward timed as a third of a forward and backward), else each alone (N passes), else not at
    all (the uniform map). ``pairs_apart``: the students encode a pair's sentences apart and read
    their cosine, so the layers are ranked by :func:`pair_layer_elimination` on all the sampled rows
    (a regression or two classes; greedy where the time affords it, else the uniform map)."""
    if not rows:
        raise KdbertError("ranking the teacher's units by importance needs training rows; there are none")
    sample = random.Random(0).sample(rows, min(ROWS, len(rows)))  # not the file's order (sorted files exist)
    started, batch_seconds = time.perf_counter(), []

    def more(seconds_taken: float) -> bool:
        batch_seconds.append(seconds_taken)
        return seconds is None or sum(batch_seconds) + seconds_taken <= seconds / 2

    heads, ffn, hidden = unit_importance(model, layout, sample, tokenizer, max_seq_len, more)
    depth = len(heads)
    forward = statistics.median(batch_seconds) / 3 * math.ceil(min(LAYER_ROWS, len(sample)) / BATCH)
    left = None if seconds is None else seconds - (time.perf_counter() - started)
    if pairs_apart and model.config.num_labels <= 2:
        forward *= len(sample) / min(LAYER_ROWS, len(sample))
        if left is None or GREEDY_PASSES[min(depth, 64)] * forward <= left:
            return Importance(heads, ffn, hidden, pair_layer_elimination(model, layout, sample, tokenizer, max_seq_len),
                              "pair cosine elimination")
        return Importance(heads, ffn, hidden, [], "uniform")
    layer_rows = sample[:LAYER_ROWS]
    if left is None or GREEDY_PASSES[min(depth, 64)] * forward <= left:
        return Importance(heads, ffn, hidden, layer_elimination(model, layout, layer_rows, tokenizer, max_seq_len))
    if (depth + 1) * forward <= left:
        return Importance(heads, ffn, hidden, layer_elimination(model, layout, layer_rows, tokenizer, max_seq_len,
                                                                greedy=False), "drop one")
    return Importance(heads, ffn, hidden, [], "uniform")


@torch.no_grad()
def ffn_activation_importance(model: nn.Module, layout, tokenizer, texts: list[str], max_seq_len: int = 128,
                              rows: int = ROWS) -> torch.Tensor:
    """(N, i): how much each FFN unit ``j`` of layer ``l`` writes into the residual stream, for a
    pre-trained model whose task head is not trained yet (so no task loss to take gradients of)::

        A_lj = mean_t |a_lj(t)| * ||W_out^l[:, j]||_2

    ``a_lj(t)``: the unit's activation (after the FFN's nonlinearity) at token ``t``, averaged over
    the real tokens of ``rows`` of ``texts`` spread evenly over them (each encoded alone);
    ``W_out^l``: the layer's FFN output weight (hidden, i). A cut keeping the largest keeps the
    units whose output moves the layer most on the task's text (the activation-based criterion of
    structured FFN pruning, as in FastFormers)."""
    if not texts:
        raise KdbertError("ranking FFN units by activation needs training texts; there are none")
    layers = model.base_model.get_submodule(layout.layers)
    outputs = [layer.get_submodule(layout.ffn_out) for layer in layers]
    sums = torch.zeros(len(layers), outputs[0].in_features)
    mask = {}

    def summing(index):
        def hook(_module, inputs):
            sums[index] += (inputs[0].float().abs() * mask["real"]).sum((0, 1))
        return hook

    handles = [output.register_forward_pre_hook(summing(index)) for index, output in enumerate(outputs)]
    accepted = inspect.signature(model.base_model.forward).parameters
    sample = [texts[i] for i in evenly_spaced(min(rows, len(texts)), len(texts)).tolist()]
    tokens, training = 0, model.training
    model.eval()
    try:
        for begin in range(0, len(sample), BATCH):
            batch = tokenizer(sample[begin:begin + BATCH], padding=True, truncation=True, max_length=max_seq_len,
                              return_tensors="pt")
            mask["real"] = batch["attention_mask"].unsqueeze(-1).float()
            tokens += int(batch["attention_mask"].sum())
            model.base_model(**{k: v for k, v in batch.items() if k in accepted})
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)
    norms = torch.stack([output.weight.float().norm(dim=0) for output in outputs])
    return sums / tokens * norms
