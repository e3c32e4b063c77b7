"""BERT-PKD (Sun et al., 2019): classic KD plus the patient loss on intermediate [CLS] states.

Loss per batch (terms already weighted, logged as ``soft``, ``hard`` and ``patience``)::

    soft     = alpha * T^2 * KL(softmax(z_t/T) || softmax(z_s/T))   (regression: alpha * MSE to the teacher)
    hard     = (1 - alpha) * CE(z_s, y)                               (regression: MSE to gold)
    patience = beta * PT,  PT = patience_loss(normalised [CLS] of student layers 1..M-1,
                                              normalised [CLS] of teacher layers g(1..M-1))

The soft/hard terms are :mod:`kdbert.methods.kd`'s; the patient term is one match of feature
``cls`` whose layers are stacked (n_layers, B, d). The student's last layer is left out of PT:
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

Defaults (:class:`PKDConfig`) are the reference's ``kd.cls`` (PKD-Skip) preset: alpha 0.7, T 10, beta 500 with
``--patience-reduction mean`` (the reference's ``F.mse_loss``: mean over layers x batch x hidden) and
``--kd-reduction mean`` (the reference's ``KLDivLoss(reduction='mean')``: the KL summed over classes is
divided by batch x classes; ``batchmean``, KD's default, divides by the batch only).
The paper's form, ``--patience-reduction sum``, sums over layers and hidden (mean over the batch),
which is ``mean * d * n_layers``; its default beta is therefore rescaled to
``500 / (d * n_layers)`` (0.13 for BERT-base with 5 layers), so both reductions give the same
loss unless ``--beta`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdbert.core.layer_maps import LayerMap, LayerMapRules, ResolvedLayerMap, resolve_layer_map
from kdbert.core.matching import Match
from kdbert.core.method import DistillContext, Method, Plan, Student
from kdbert.options import NON_NEGATIVE, option, override
from kdbert.core.stages import task_stage
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.methods.base import (LogitKDConfig, StudentLayerOptions, check_kd_loss, kd_matches, kd_report,
                                 resolve_student, student_description, teacher_if_needed)

DEFAULT_BETA = 500.0  # for the reference's "mean" reduction


@dataclass
class PKDConfig(StudentLayerOptions, LogitKDConfig):
    """BERT-PKD (see the module docstring)."""

    method = "pkd"
    temperature: float = override(LogitKDConfig, "temperature", 10.0)
    kd_reduction: str = override(LogitKDConfig, "kd_reduction", "mean")
    beta: float | None = option(None, "weight of the patient loss (default 500 for --patience-reduction mean, "
                                      "rescaled to 500 / (d * n_layers) for sum)", NON_NEGATIVE, float, "losses")
    patience_reduction: str = option("mean", "'mean' as the reference code (beta ~500), 'sum' as the paper",
                                     group="losses", choices=("mean", "sum"))
    layer_map: str | None = option(None, "student -> teacher layer map g(m) (default: uniform for tinybert, skip "
                                         "for pkd)", group="layer mapping", choices=("skip", "last", "explicit"))
    teacher_layers: str | None = option(None, "explicit map: teacher layer (1-based) for each student layer, e.g. "
                                              "3,6,9,12", group="layer mapping")


# ----------------------------------------------------------------------------- settings
LAYER_MAP_RULES = LayerMapRules("PKD", ("skip", "last", "explicit"), "skip", embeddings=False, last_layer=False)


def resolve_layers(config: PKDConfig, student_depth: int, teacher_depth: int) -> ResolvedLayerMap:
    """The patient layers, student layers 1..M-1 (:func:`kdbert.core.layer_maps.resolve_layer_map`)."""
    return resolve_layer_map(LAYER_MAP_RULES, student_depth, teacher_depth, config.layer_map, config.teacher_layers)


def beta_of(config: PKDConfig, hidden_size: int, n_layers: int) -> float:
    """``--beta``, or its default for the reduction (rescaled for "sum")."""
    if config.beta is not None:
        return config.beta
    return DEFAULT_BETA if config.patience_reduction == "mean" else DEFAULT_BETA / (hidden_size * n_layers)


def check_width(student: Student, teacher) -> None:
    d_s, d_t = int(student.model.config.hidden_size), int(teacher.config.hidden_size)
    if d_s != d_t:
        raise KdbertError(
            f"PKD compares [CLS] states without a projection, so the student needs the teacher's hidden size "
            f"{d_t}, but {student.origin} has {d_s}; build the student from teacher "
            "layers (--student-layers K) or use --method kd / tinybert for a narrower student")


def patience_matches(pairs: LayerMap, beta: float, reduction: str) -> list[Match]:
    """The patient term: normalised [CLS] states of the mapped layers, stacked (n_layers, B, d)."""
    if beta <= 0:
        return []
    return [Match("patience", "cls", "patience", beta, student_layer=pairs.student_layers,
                  teacher_layer=pairs.teacher_layers, options={"reduction": reduction})]


# ----------------------------------------------------------------------------- method
class PKD(Method):
    name, help, config = "pkd", "BERT-PKD patient loss", PKDConfig

    def initial_student(self, teacher, spec: TaskSpec, config: PKDConfig) -> Student:
        """The first k teacher layers (default k = half the teacher's depth), or ``--student``.

        Refuses, before training: k beyond the teacher's depth, a student of another hidden size, a
        layer map that does not fit, bad weights.
        """
        check_kd_loss(config.kd_loss, spec)
        student = resolve_student(teacher, spec, config)
        if config.beta != 0:  # without the patient loss (beta 0) PKD is KD and any width works
            check_width(student, teacher)
        resolve_layers(config, int(student.model.config.num_hidden_layers), int(teacher.config.num_hidden_layers))
        return student

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``pkd``: KD's matches plus the patient one; the layer map is printed and reported."""
        config, spec = ctx.config, ctx.spec
        resolved = resolve_layers(config, int(ctx.student.model.config.num_hidden_layers),
                                  int(ctx.teacher.config.num_hidden_layers))
        pairs = resolved.layer_map
        d, n_layers = int(ctx.teacher.config.hidden_size), len(pairs.pairs)
        beta = beta_of(config, d, n_layers)
        if beta > 0:
            check_width(ctx.student, ctx.teacher)
        print(resolved.describe())
        matches = kd_matches(config, spec)
        stages = [task_stage("pkd", config, matches + patience_matches(pairs, beta, config.patience_reduction), ctx)]
        reduction = config.patience_reduction
        report = {
            "loss": {**kd_report(config, spec), "beta": beta, "patience_reduction": reduction,
                     # the same weight in the other reduction's units (sum = mean * d * n_layers)
                     "beta_mean_form": beta if reduction == "mean" else beta * d * n_layers,
                     "beta_sum_form": beta if reduction == "sum" else beta / (d * n_layers)},
            "layer_map_method": resolved.name,
            "layer_map": [list(p) for p in pairs.pairs],
            **student_description(ctx.student),
        }
        return Plan({"student": ctx.student.model}, teacher_if_needed(ctx.teacher, stages), stages, report=report)


METHOD = PKD()
