"""What to match, as data: a method's distillation terms are a list of :class:`Match` objects.

A match names a *feature* of the two traces, the student and teacher layers it is taken from, a
loss from :data:`LOSSES`, a weight, and optionally a projection of the student's feature to the
teacher's width. :class:`MatchLoss` turns a list of matches and one batch into named, weighted
terms (matches that share a ``term`` name are summed into it), which the trainer adds up::

    terms[m.term] += m.weight * LOSSES[m.loss](project(feature_s), feature_t, batch, **m.options)

Features (layer numbers as HF's ``hidden_states``: 0 is the embedding output, 1..M the layers):

=================  =========================================  ==========================
feature            tensor                                     layer
=================  =========================================  ==========================
embeddings         embedding output (B, L, d)                 none (= hidden layer 0)
hidden             output of layer l (B, L, d)                l, -1 for the last
attention_scores   pre-softmax scores of layer l (B, H, L, L) l >= 1, -1 for the last
attention_probs    softmax of those scores (B, H, L, L)       l >= 1
cls                [CLS] vector of layer l (B, d)             l; a tuple stacks (n, B, d)
mean               masked mean of layer l over real tokens    l (a teacher of stored
                   (B, d): the sentence vector                vectors: its ``mean`` feature)
logits             classifier output (B, C)                   none
mlm_logits         masked-LM output (B, L, V)                 none
<custom name>      ``trace.features[name]`` (hook adapter)    none
=================  =========================================  ==========================

``target="labels"`` compares the student's feature with the batch's gold labels instead of a
teacher feature (the hard-label term of KD, DistilBERT's MLM term); the teacher is traced only
when some match needs it, and its attention scores only when some match uses them.

Projections (``projection="linear"``: one ``nn.Linear(d_s, d_t)`` per matched pair; any other
string names a projection shared by every match that gives it) are created by
:meth:`MatchLoss.setup` from the widths of the first traced batch, so students whose widths
differ per layer need no special code. They live in ``modules["projections"]`` (saved apart from
the student as ``projections.safetensors``) and are initialised like BERT weights
(normal(0, init_std), zero bias) from a fixed seed, in match order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from kdbert.core import losses, transfer_losses
from kdbert.core.pooling import masked_mean
from kdbert.errors import KdbertError
from kdbert.core.trace import Trace, model_batch, trace

FEATURES = ("embeddings", "hidden", "attention_scores", "attention_probs", "cls", "mean", "logits", "mlm_logits")
LAYERED = ("hidden", "attention_scores", "attention_probs", "cls", "mean")
ATTENTION = ("attention_scores", "attention_probs")


def hard_label_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The task loss on gold labels: cross-entropy on class ids (logits (B, C)), or MSE of the
    single output (B, 1) to the gold score (regression, float labels). Question answering (logits
    (B, 2, L), labels (B, 2) start and end positions): the mean of the start and end cross-entropies
    over positions, BERT's SQuAD loss."""
    if labels.is_floating_point():
        return losses.regression_mse(logits, labels)
    if logits.dim() == 3:
        return F.cross_entropy(logits.transpose(1, 2), labels)
    return F.cross_entropy(logits, labels)


def _regression_to(student: torch.Tensor, target: torch.Tensor, batch: dict) -> torch.Tensor:
    """MSE of a regression output (B, 1) to a score: gold labels (B,) or the teacher's (B, 1)."""
    return losses.regression_mse(student, target.squeeze(-1) if target.dim() == 2 else target)


# name -> fn(student, target, batch, **options); ``batch`` gives the student's attention mask.
LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "hidden_mse": lambda s, t, batch: losses.hidden_mse(s, t),
    "attention_mse": lambda s, t, batch, reduction="tinybert-reference", head_average=False: losses.attention_mse(
        s, t, _mask(batch), reduction, head_average),
    "soft_cross_entropy": lambda s, t, batch, temperature=1.0: losses.soft_cross_entropy(s, t, temperature),
    "kl_div": lambda s, t, batch, temperature=1.0, reduction="batchmean": losses.kl_div_loss(
        s, t, temperature, reduction=reduction),
    "token_kl_div": lambda s, t, batch, temperature=1.0: losses.kl_div_loss(s, t, temperature, mask=_mask(batch)),
    "logit_mse": lambda s, t, batch: losses.logit_mse(s, t),
    "squared_l2": lambda s, t, batch: losses.bilstm_distill_loss(s, t),  # sum over classes, mean over batch
    "regression_mse": lambda s, t, batch: _regression_to(s, t, batch),
    "hard_label": lambda s, t, batch: hard_label_loss(s, t),
    "patience": lambda s, t, batch, reduction="mean": losses.patience_loss(s, t, reduction),
    "cosine": lambda s, t, batch: losses.cosine_hidden_loss(s, t, _mask(batch)),
    "cosine_distance": lambda s, t, batch: losses.cosine_distance(s, t),
    "similarity_relation": lambda s, t, batch: losses.similarity_relation_mse(s, t),
    "masked_lm_cross_entropy": lambda s, t, batch: losses.masked_lm_cross_entropy(s, t),
    # MobileBERT (kdbert.methods.mobilebert_transfer): layer-wise transfer and pre-training distillation
    "feature_map_mse": lambda s, t, batch, reduction="mean": transfer_losses.feature_map_mse(
        s, t, _mask(batch), reduction),
    "mean_transfer": lambda s, t, batch, reduction="mean": transfer_losses.mean_transfer_loss(
        s, t, _mask(batch), reduction),
    "variance_transfer": lambda s, t, batch, reduction="mean": transfer_losses.variance_transfer_loss(
        s, t, _mask(batch), reduction),
    "attention_kl": lambda s, t, batch, reduction="reference", head_average=False: transfer_losses.attention_kl(
        s, t, _mask(batch), reduction, head_average),
    "mlm_distillation": lambda s, t, batch, ground_truth_ratio=0.5: transfer_losses.mlm_distillation_loss(
        s, t, batch["labels"], ground_truth_ratio),
}


def _mask(batch: dict) -> torch.Tensor:
    return model_batch(batch, "student")["attention_mask"]


Layer = int | tuple[int, ...] | None


@dataclass(frozen=True)
class Match:
    """One distillation term's ingredient (see the module docstring).

    Attributes:
        term: name of the logged term; matches with the same term are summed.
        feature: one of :data:`FEATURES` or a custom feature name.
        loss: key of :data:`LOSSES`.
        weight: multiplies the loss (a match of weight 0 should be left out of the list).
        student_layer / teacher_layer: layer of the feature (``None`` for layerless features; a
            tuple stacks several layers along a new first dim).
        target: ``"teacher"`` or ``"labels"`` (the batch's gold labels).
        projection: ``None``, ``"linear"`` (one per matched pair) or the name of a shared one.
        options: keyword arguments of the loss (temperature, reduction, ...).
    """

    term: str
    feature: str
    loss: str
    weight: float = 1.0
    student_layer: Layer = None
    teacher_layer: Layer = None
    target: str = "teacher"
    projection: str | None = None
    options: dict = field(default_factory=dict, hash=False)

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise KdbertError(f"match '{self.term}': unknown loss '{self.loss}'; use one of {', '.join(LOSSES)}")
        if self.target not in ("teacher", "labels"):
            raise KdbertError(f"match '{self.term}': target must be teacher or labels, not '{self.target}'")
        if self.feature in LAYERED and self.student_layer is None:
            raise KdbertError(f"match '{self.term}': feature '{self.feature}' needs a student layer")

    @property
    def projection_name(self) -> str | None:
        """``embeddings`` / ``layer_<l>`` for per-pair projections (the names TinyBERT students
        were saved with), the given name for a shared one."""
        if self.projection != "linear":
            return self.projection
        layer = 0 if self.feature == "embeddings" else self.student_layer
        return "embeddings" if layer == 0 else f"layer_{layer}"

    def describe(self) -> str:
        def side(layer):
            return "" if layer is None else f"[{','.join(map(str, layer)) if isinstance(layer, tuple) else layer}]"

        other = "labels" if self.target == "labels" else f"{self.feature}{side(self.teacher_layer)}"
        projected = f" via {self.projection_name}" if self.projection else ""
        student = f"{self.feature}{side(self.student_layer)}{projected}"
        return f"{self.term}: {self.weight:g} * {self.loss}({student}, {other})"


# ----------------------------------------------------------------------------- features
def feature(tr: Trace, name: str, layer: Layer, role: str) -> torch.Tensor:
    """The tensor a match reads from a trace; a clear error when the trace lacks it."""
    if isinstance(layer, tuple):
        return torch.stack([feature(tr, name, one, role) for one in layer])
    if name in tr.features:  # recorded by a hook adapter under that name (a stored teacher's "mean")
        return tr.features[name]
    if name in ("embeddings", "hidden", "cls", "mean"):
        states = tr.require("hidden_states", role)
        index = 0 if name == "embeddings" else layer
        _check_layer(index, len(states), name, role, tr, first=0)
        if name == "mean":
            return masked_mean(states[index], tr.attention_mask)
        return states[index][:, 0] if name == "cls" else states[index]
    if name in ATTENTION:
        scores = tr.require("attention_scores", role)
        _check_layer(layer, len(scores) + 1, name, role, tr, first=1)
        chosen = scores[layer - 1 if layer > 0 else layer]
        return chosen if name == "attention_scores" else F.softmax(chosen, dim=-1)
    if name in ("logits", "mlm_logits"):
        return tr.require("logits", role)
    raise KdbertError(f"the {role} ({tr.model_class}) recorded no feature '{name}'; recorded: "
                      f"{', '.join(tr.recorded()) or 'nothing'}")


def _check_layer(layer: int, count: int, name: str, role: str, tr: Trace, first: int) -> None:
    if not (first <= layer < count or -(count - first) <= layer < 0):
        raise KdbertError(f"{name} layer {layer} does not exist in the {role} ({tr.model_class}): "
                          f"it has layers {first}..{count - 1}")


# ----------------------------------------------------------------------------- projections
def new_projection(d_in: int, d_out: int, init_std: float) -> nn.Linear:
    linear = nn.Linear(d_in, d_out)
    nn.init.normal_(linear.weight, std=init_std)
    nn.init.zeros_(linear.bias)
    return linear


PROJECTION_INITS = ("random", "fit")


@torch.no_grad()
def fit_projection(linear: nn.Linear, student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor,
                   ridge: float = 1e-3) -> None:
    """Set ``linear`` (d_s -> d_t) to the ridge least-squares map of one batch's student states onto
    the teacher's, over its real tokens (``mask`` (B, L) true; states (B, L, d)):

        W = (X^T X + r I)^-1 X^T Y,  b = mean(y) - W mean(x),  X, Y centred, r = ridge * mean(diag X^T X).

    A student copied from the teacher's layers then starts near zero loss (W ~ I, or the selection
    of its dimensions) instead of at a random W that the first steps pull its layers towards."""
    x, y = student[mask].float(), teacher[mask].float()
    x_mean, y_mean = x.mean(0), y.mean(0)
    x, y = x - x_mean, y - y_mean
    gram = x.T @ x
    gram += ridge * gram.diagonal().mean() * torch.eye(gram.shape[0], device=gram.device)
    weight = torch.linalg.solve(gram, x.T @ y).T  # (d_t, d_s)
    linear.weight.copy_(weight)
    linear.bias.copy_(y_mean - weight @ x_mean)


def load_saved_projections(projections: nn.ModuleDict, folder) -> list[str]:
    """Copy same-named, same-shaped projections saved next to a student (``projections.safetensors``
    of a general-distilled student) into ``projections``; returns the names loaded.

    The reference TinyBERT v1 keeps ``fit_dense`` inside the student, so task distillation starts
    from the general stage's projection; this does the same when the names match.
    """
    path = Path(str(folder)) / "projections.safetensors"
    if not path.is_file():
        return []
    from safetensors.torch import load_file

    saved = {k.removeprefix("projections."): v for k, v in load_file(str(path)).items() if k.startswith("projections.")}
    loaded = []
    with torch.no_grad():
        for name, module in projections.items():
            weight, bias = saved.get(f"{name}.weight"), saved.get(f"{name}.bias")
            if weight is not None and bias is not None and weight.shape == module.weight.shape:
                module.weight.copy_(weight)
                module.bias.copy_(bias)
                loaded.append(name)
    return loaded


# ----------------------------------------------------------------------------- the loss
class MatchLoss:
    """A stage loss from matches: ``loss(parts, frozen, batch) -> {term: weighted tensor}``.

    ``parts["student"]`` is traced with gradients, ``frozen["teacher"]`` without; projections
    come from ``parts["projections"]`` (created by :meth:`setup`). ``seed``/``init_std`` fix the
    projections' random initialisation, ``projection_init="fit"`` fits them to the first batch instead
    (:func:`fit_projection`); ``projections_from`` is a folder whose saved projections of the same
    name and shape are loaded once created.
    """

    def __init__(self, matches: list[Match], seed: int = 0, init_std: float = 0.02, projections_from=None,
                 projection_init: str = "random"):
        if not matches:
            raise KdbertError("a distillation stage needs at least one match")
        if projection_init not in PROJECTION_INITS:
            raise KdbertError(f"projection init {projection_init!r} is unknown; use one of {', '.join(PROJECTION_INITS)}")
        self.matches = list(matches)
        self.seed, self.init_std, self.projections_from = seed, init_std, projections_from
        self.projection_init = projection_init
        self.loaded_projections: list[str] = []
        self.uses_teacher = any(m.target == "teacher" for m in self.matches)
        self.student_attention = any(m.feature in ATTENTION for m in self.matches)
        self.teacher_attention = any(m.feature in ATTENTION and m.target == "teacher" for m in self.matches)
        self.teacher_cache = None  # (cache, stage name, fields): see use_teacher_cache

    def use_teacher_cache(self, cache, stage: str, fields: list[str]) -> None:
        """Trace the teacher through ``cache`` (:class:`kdbert.core.teacher_cache.TeacherCache`), which
        keeps ``fields`` (what this loss's teacher matches read) under ``stage``'s counters."""
        self.teacher_cache = (cache, stage, fields)

    @property
    def projection_names(self) -> list[str]:
        return list(dict.fromkeys(m.projection_name for m in self.matches if m.projection))

    def traces(self, parts, frozen, batch, cached: bool = True) -> tuple[Trace, Trace | None]:
        """Student and teacher traces of ``batch``; the teacher's from the cache when one is set
        and ``cached`` (``setup``, outside the training loop's autocast, does not use it)."""
        teacher_trace = None
        if self.uses_teacher:
            with torch.no_grad():
                if self.teacher_cache is not None and cached:
                    cache, stage, fields = self.teacher_cache
                    teacher_trace = cache.trace(frozen["teacher"], batch, fields, self.teacher_attention, stage)
                else:
                    teacher_trace = trace(frozen["teacher"], batch, with_attention=self.teacher_attention,
                                          role="teacher")
        return trace(parts["student"], batch, with_attention=self.student_attention, role="student"), teacher_trace

    def setup(self, parts: nn.ModuleDict, frozen: dict, batch: dict) -> None:
        """Create the missing projections from the widths seen on ``batch`` (eval mode, no grad)."""
        existing = parts["projections"] if "projections" in parts else {}
        names = [n for n in self.projection_names if n not in existing]
        if not names:
            return
        student = parts["student"]
        was_training = student.training
        student.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            student_trace, teacher_trace = self.traces(parts, frozen, batch, cached=False)
        student.train(was_training)
        if "projections" not in parts:
            parts["projections"] = nn.ModuleDict()
        projections = parts["projections"]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            for match in self.matches:
                name = match.projection_name
                if name not in names or name in projections:
                    continue
                s = feature(student_trace, match.feature, match.student_layer, "student")
                t = feature(teacher_trace, match.feature, match.teacher_layer, "teacher")
                projections[name] = new_projection(s.shape[-1], t.shape[-1], self.init_std).to(s.device)
                if self.projection_init == "fit":
                    fit_projection(projections[name], s, t, batch["attention_mask"].bool())
        if self.projections_from is not None:
            self.loaded_projections = load_saved_projections(projections, self.projections_from)

    def __call__(self, parts, frozen, batch) -> dict[str, torch.Tensor]:
        student_trace, teacher_trace = self.traces(parts, frozen, batch)
        terms: dict[str, torch.Tensor] = {}
        for match in self.matches:
            value = self.term_value(match, student_trace, teacher_trace, parts, batch)
            terms[match.term] = terms[match.term] + value if match.term in terms else value
        return terms

    def term_value(self, match: Match, student_trace: Trace, teacher_trace: Trace | None, parts, batch):
        s = feature(student_trace, match.feature, match.student_layer, "student")
        if match.projection:
            projections: Any = parts["projections"] if "projections" in parts else {}
            if match.projection_name not in projections:
                raise KdbertError(f"match '{match.term}': projection '{match.projection_name}' was not created; "
                                  "the trainer creates projections on the first batch (MatchLoss.setup)")
            s = projections[match.projection_name](s)
        if match.target == "labels":
            t = batch["labels"]
        else:
            t = feature(teacher_trace, match.feature, match.teacher_layer, "teacher")
        return match.weight * LOSSES[match.loss](s, t, batch, **match.options)
