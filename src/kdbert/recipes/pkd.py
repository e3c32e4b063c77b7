"""BERT-PKD (Sun et al., 2019): classic KD plus the patient loss on intermediate [CLS] states.

Loss per batch (terms already weighted, logged as ``soft``, ``hard`` and ``patience``)::

    soft     = alpha * T^2 * KL(softmax(z_t/T) || softmax(z_s/T))   (regression: alpha * MSE to the teacher)
    hard     = (1 - alpha) * CE(z_s, y)                               (regression: MSE to gold)
    patience = beta * PT,  PT = patience_loss(normalised [CLS] of student layers 1..M-1,
                                              normalised [CLS] of teacher layers g(1..M-1))

The soft/hard terms are :mod:`kdbert.recipes.kd`'s. The student's last layer is left out of PT:
its output is covered by the logit term.

Layer map (``--layer-map``; indices are 1-based layers as in ``hidden_states``):
  - ``skip`` (default, PKD-Skip): g(m) = m * N / M. 12 -> 6: teacher layers 2, 4, 6, 8, 10
    (the reference's 0-based {1, 3, 5, 7, 9}); 6 -> 3: teacher layers 2, 4.
  - ``last`` (PKD-Last): g(m) = N - M + m. 12 -> 6: teacher layers 7..11; 6 -> 3: 4, 5.
  - ``explicit`` with ``--teacher-layers``: one teacher layer per student layer 1..M-1.

Student: the first k teacher layers (``--student-layers k``; default half the teacher's depth:
3 of a 6-layer teacher, 6 of BERT-base), as the paper; any student of the teacher's hidden size
works (``--student`` folder, or ``--student-layers 0,2,4``). PKD has no projection, so a student
of another width is refused.

Defaults are the reference's ``kd.cls`` (PKD-Skip) preset: alpha 0.7, T 10, beta 500 with
``--patience-reduction mean`` (the reference's ``F.mse_loss``: mean over layers x batch x hidden).
The paper's form, ``--patience-reduction sum``, sums over layers and hidden (mean over the batch),
which is ``mean * d * n_layers``; its default beta is therefore rescaled to
``500 / (d * n_layers)`` (0.13 for BERT-base with 5 layers), so both reductions give the same
loss unless ``--beta`` is set.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.losses import patience_loss
from kdbert.mapping import LayerMap, resolve
from kdbert.models.trace import trace
from kdbert.recipes import kd
from kdbert.recipes.base import DistillContext, Plan
from kdbert.trainer import Stage

DEFAULT_ALPHA = 0.7
DEFAULT_TEMPERATURE = 10.0
DEFAULT_BETA = 500.0  # for the reference's "mean" reduction
DEFAULT_REDUCTION = "mean"
DEFAULT_LAYER_MAP = "skip"


# ----------------------------------------------------------------------------- settings
def layer_map(options: dict, student_depth: int, teacher_depth: int) -> LayerMap:
    """The PKD map for student layers 1..M-1 from ``--layer-map`` / ``--teacher-layers``."""
    listed = options.get("teacher_layers")
    method = options.get("layer_map") or ("explicit" if listed else DEFAULT_LAYER_MAP)
    m, n = student_depth, teacher_depth
    if m < 2:
        raise KdbertError(f"PKD needs a student of at least 2 layers (its last layer is left to the logit loss), "
                          f"got {m}; use --student-layers 2 or more, or --method kd")
    if m > n:
        raise KdbertError(f"the student has {m} layers, more than the teacher's {n}; use --student-layers <= {n}")
    if method in ("skip", "last"):
        if listed:
            raise KdbertError(f"--teacher-layers needs --layer-map explicit, not {method}; drop one of them")
        if method == "skip" and n % m:
            raise KdbertError(
                f"--layer-map skip needs the teacher depth ({n}) to be a multiple of the student depth ({m}); "
                f"use --layer-map last, or --layer-map explicit --teacher-layers with {m - 1} teacher layers "
                f"(1-based) for student layers 1..{m - 1}")
        return resolve(method, m, n)
    if method != "explicit":
        raise KdbertError(f"--layer-map {method} is not a PKD map; use skip, last or explicit")
    if not listed:
        raise KdbertError(f"--layer-map explicit needs --teacher-layers: {m - 1} teacher layers (1-based) for "
                          f"student layers 1..{m - 1}, e.g. {','.join(str(i * (n // m) or 1) for i in range(1, m))}")
    try:
        layers = [int(x) for x in str(listed).split(",") if x.strip()]
    except ValueError:
        raise KdbertError(f"--teacher-layers {listed!r} is not a comma-separated list of integers") from None
    if len(layers) != m - 1:
        raise KdbertError(f"--teacher-layers {listed}: PKD matches student layers 1..{m - 1} (the last is left to "
                          f"the logit loss), so give {m - 1} teacher layers, got {len(layers)}")
    if any(t < 1 for t in layers):
        raise KdbertError(f"--teacher-layers {listed}: teacher layers are 1-based (1..{n}); 0 is the embeddings")
    return LayerMap(tuple((i, t) for i, t in enumerate(layers, start=1))).validate(m, n)


def patience_settings(options: dict, hidden_size: int, n_layers: int) -> tuple[float, str]:
    """``(beta, reduction)``; the default beta is rescaled for the "sum" reduction."""
    reduction = options.get("patience_reduction") or DEFAULT_REDUCTION
    if reduction not in ("mean", "sum"):
        raise KdbertError(f"--patience-reduction {reduction!r} is unknown; use mean or sum")
    default = DEFAULT_BETA if reduction == "mean" else DEFAULT_BETA / (hidden_size * n_layers)
    return kd.number_option(options, "beta", default, 0.0), reduction


def check_width(student, teacher) -> None:
    d_s, d_t = int(student.config.hidden_size), int(teacher.config.hidden_size)
    if d_s != d_t:
        raise KdbertError(
            f"PKD compares [CLS] states without a projection, so the student needs the teacher's hidden size "
            f"{d_t}, but {getattr(student, 'kdbert_init', 'the student')} has {d_s}; build the student from teacher "
            "layers (--student-layers K) or use --method kd / tinybert for a narrower student")


# ----------------------------------------------------------------------------- loss
def cls_states(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """[CLS] vectors of ``hidden_states[i]`` for ``i`` in ``layers``, stacked: (n_layers, B, d)."""
    return torch.stack([hidden_states[i][:, 0] for i in layers])


def pkd_loss_fn(logit_kd: kd.LogitKD, beta: float, reduction: str, pairs: LayerMap):
    """The stage loss ``(modules, frozen, batch) -> {"soft", "hard", "patience"}``."""
    student_layers, teacher_layers = pairs.student_layers, pairs.teacher_layers

    def loss(parts, frozen, batch):
        s = trace(parts["student"], batch, with_attention=False)
        if not (logit_kd.uses_teacher or beta > 0):
            return kd.logit_kd_terms(s.logits, None, batch["labels"], logit_kd)
        with torch.no_grad():
            t = trace(frozen["teacher"], batch, with_attention=False)
        terms = kd.logit_kd_terms(s.logits, t.logits, batch["labels"], logit_kd)
        if beta > 0:
            terms["patience"] = beta * patience_loss(cls_states(s.hidden_states, student_layers),
                                                     cls_states(t.hidden_states, teacher_layers), reduction)
        return terms

    return loss


# ----------------------------------------------------------------------------- recipe
def _settings(teacher, student, spec: TaskSpec, options: dict):
    logit_kd = kd.logit_kd_settings(options, spec, DEFAULT_ALPHA, DEFAULT_TEMPERATURE)
    pairs = layer_map(options, int(student.config.num_hidden_layers), kd.teacher_depth(teacher))
    beta, reduction = patience_settings(options, int(teacher.config.hidden_size), len(pairs.pairs))
    return logit_kd, pairs, beta, reduction


def initial_student(teacher, spec: TaskSpec, options: dict):
    """The first k teacher layers (default k = half the teacher's depth), or ``--student``.

    Refuses, before training: other methods' options, k beyond the teacher's depth, a student of
    another hidden size, a layer map that does not fit, bad weights.
    """
    kd.refuse_foreign_options(options, "pkd")
    kd.logit_kd_settings(options, spec, DEFAULT_ALPHA, DEFAULT_TEMPERATURE)
    kd.task_stage_config("pkd", spec, options)
    student = kd.resolve_student(teacher, spec, options)
    if options.get("beta") != 0:  # without the patient loss (beta 0) PKD is KD and any width works
        check_width(student, teacher)
    _settings(teacher, student, spec, options)
    return student


def build_task_plan(ctx: DistillContext) -> Plan:
    """One stage ``pkd`` with :func:`pkd_loss_fn`; the layer map is printed and reported."""
    kd.refuse_foreign_options(ctx.options, "pkd")
    logit_kd, pairs, beta, reduction = _settings(ctx.teacher, ctx.student, ctx.spec, ctx.options)
    if beta > 0:
        check_width(ctx.student, ctx.teacher)
    uses_teacher = logit_kd.uses_teacher or beta > 0
    d, n_layers = int(ctx.teacher.config.hidden_size), len(pairs.pairs)
    method = ctx.options.get("layer_map") or ("explicit" if ctx.options.get("teacher_layers") else DEFAULT_LAYER_MAP)
    print(f"PKD-{method} patient layers\n{pairs.table()}")
    stage = Stage(kd.task_stage_config("pkd", ctx.spec, ctx.options),
                  pkd_loss_fn(logit_kd, beta, reduction, pairs), ctx.train_set)
    report = {
        "loss": {**asdict(logit_kd), "beta": beta, "patience_reduction": reduction,
                 # the same weight in the other reduction's units (sum = mean * d * n_layers)
                 "beta_mean_form": beta if reduction == "mean" else beta * d * n_layers,
                 "beta_sum_form": beta if reduction == "sum" else beta / (d * n_layers)},
        "layer_map_method": method,
        "layer_map": [list(p) for p in pairs.pairs],
        **kd.student_description(ctx.student, ctx.options),
    }
    return Plan({"student": ctx.student}, {"teacher": ctx.teacher} if uses_teacher else {}, [stage], report=report)
