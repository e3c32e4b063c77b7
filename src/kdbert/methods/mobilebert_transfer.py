"""MobileBERT knowledge-transfer strategies as data: the core's matches, parameter groups and stages.

MobileBERT (Sun et al., 2020, section 3.6) transfers a teacher layer by layer, then distils its
masked-LM predictions. Its three strategies differ only in how the same terms are staged:

- **auxiliary** (AKT): one stage; every layer's transfer terms are added to pre-training
  distillation.
- **joint** (JKT): every layer's transfer terms together, then pre-training distillation.
- **progressive** (PKT): one stage per layer l = 1..L, in which only layer l's terms count,
  layer l trains at 3x the learning rate and earlier layers at 0.3x (the official code,
  ``distill_util.layer_wise_learning_rate``) or frozen (the paper's text, ``frozen``); later
  layers do not train. Then pre-training distillation.

The generators here build :class:`kdbert.core.matching.Match` lists and
:class:`kdbert.core.stages.ParamGroup` tuples and hand them, with a stage name, a length and a
schedule, to a ``make_stage`` callable that returns the trainer's
:class:`~kdbert.core.stages.Stage` (:mod:`kdbert.methods.mobilebert` supplies it); they train
nothing and read no data. Parameter patterns are globs over the trainer's module names
(``student.mobilebert.encoder.layer.2.*``).

Layer-wise terms per matched pair (student layer l, teacher layer g(l)), with the official
factors divided by the number of transferred layers L (options ``--feature-map-weight`` ...)::

    100/L  * feature_map_mse(h_s[l], h_t[g(l)])       5000/L * mean_transfer(...)
    5/L    * variance_transfer(...)                   1/L    * attention_kl(A_s[l], A_t[g(l)])

The pre-training distillation term is ``mlm_distillation`` (weight 1): masked-LM cross-entropy
against ``r * one-hot + (1 - r) * teacher distribution``. Hidden-state indices follow HF's
``hidden_states`` (0 is the embedding output, never transferred: the official code transfers
layers 1..L); attention indices are 1-based layers too.

Layer-wise stages use a constant learning rate after a warm-up at the start of each phase, and
pre-training distillation warm-up then linear decay, as the official runs; those runs used LAMB
at lr 1.5e-3, batch 2048 of 512 tokens, weight decay 0.01, gradient clipping 1.0 and no dropout
in the student (kdbert uses AdamW).

The ``config`` these functions read is a :class:`kdbert.methods.mobilebert.MobileBertGeneralConfig`
(any object with its attributes works).
"""

from __future__ import annotations

import re
from typing import Callable

from kdbert.errors import KdbertError
from kdbert.core.layer_maps import LayerMapRules, ResolvedLayerMap, resolve_layer_map
from kdbert.core.matching import Match
from kdbert.families.mobilebert import FeatureWidths
from kdbert.core.stages import ParamGroup, Stage

STRATEGIES = ("progressive", "joint", "auxiliary")
PREVIOUS_LAYERS = ("official", "frozen")

# Official factors (README flags hidden/beta/gamma/attention_distill_factor; TF2 LayerWiseDistillConfig).
FEATURE_MAP_FACTOR = 100.0
MEAN_FACTOR = 5000.0
VARIANCE_FACTOR = 5.0
ATTENTION_FACTOR = 1.0
# distill_util.layer_wise_learning_rate: 3 x [0 before, 1 during, 0.1 after] a layer's phase.
CURRENT_LAYER_LR = 3.0
PREVIOUS_LAYERS_LR = 0.3
# Official distill_ground_truth_ratio.
GROUND_TRUTH_RATIO = 0.5

# Parameter-name globs over the trainer's modules (MobileBertForMaskedLM / ...ForSequenceClassification).
EMBEDDINGS = "student.mobilebert.embeddings.*"
STUDENT = "student.*"
_LAYER = re.compile(r"^student\.mobilebert\.encoder\.layer\.(\d+)\.\*$")
_PROJECTION = re.compile(r"^projections\.layer_(\d+)\.\*$")

# make_stage(name, matches, train, steps, schedule) -> the trainer's Stage
StageFactory = Callable[[str, list, tuple, int, str], Stage]


def layer_pattern(layer: int) -> str:
    """Glob of the parameters of 1-based student layer ``layer``."""
    return f"student.mobilebert.encoder.layer.{layer - 1}.*"


def layer_groups(layers, lr_scale: float) -> list[ParamGroup]:
    """One :class:`ParamGroup` per 1-based layer (globs cannot spell 0..23 as one range)."""
    return [ParamGroup(layer_pattern(layer), lr_scale) for layer in layers]


# ----------------------------------------------------------------------------- validation
LAYER_MAP_RULES = LayerMapRules("MobileBERT", ("uniform", "explicit"), "uniform", embeddings=False)


def resolve_transfer(student: FeatureWidths, teacher: FeatureWidths, config) -> ResolvedLayerMap:
    """Student layer l -> teacher layer g(l), l = 1..L (uniform, or ``--teacher-layers``:
    :func:`kdbert.core.layer_maps.resolve_layer_map`), checked for transfer under ``config``.

    Raises a one-line KdbertError, before any training, when the layer map does not fit, the
    widths differ without ``projection``, or the head counts make attention transfer impossible
    without ``head_average``.
    """
    resolved = resolve_layer_map(LAYER_MAP_RULES, student.num_layers, teacher.num_layers,
                                 teacher_layers=config.teacher_layers)
    for s, t in resolved.layer_pairs:
        d_s, d_t = student.hidden[s], teacher.hidden[t]
        if d_s != d_t and not config.projection:
            raise KdbertError(
                f"student layer {s} is {d_s} wide but teacher layer {t} is {d_t}: feature-map "
                f"transfer compares them directly; use a student of inter-block width {d_t} "
                f"(--student mobilebert-matched), an IB-BERT teacher of width {d_s} "
                f"(ib-bert-matched), or --projection (a learned map, a deviation from the paper)"
            )
        h_s, h_t = student.heads[s - 1], teacher.heads[t - 1]
        if h_s == h_t:
            continue
        if not config.head_average:
            raise KdbertError(
                f"the student has {h_s} attention heads per layer, the teacher {h_t}: attention "
                f"transfer compares heads one to one; use a student with {h_t} heads or pass "
                "--head-average (averages groups of teacher heads)"
            )
        if h_s > h_t or h_t % h_s:
            raise KdbertError(
                f"--head-average averages groups of teacher heads, but {h_t} teacher heads do not "
                f"split into {h_s} equal groups; use a student head count that divides {h_t}"
            )
    return resolved


def width_bridge(student: FeatureWidths, teacher: FeatureWidths, pairs: list[tuple[int, int]]) -> str:
    """One line saying how student and teacher widths meet, for a run to print before training.

    Either directly (the teacher, an IB-BERT or a BERT of the student's inter-block width, plays
    IB-BERT's role) or through learned projections (a deviation from the paper).
    """
    widths = sorted({(student.hidden[s], teacher.hidden[t]) for s, t in pairs})
    kind = "an IB-BERT" if teacher.model_type == "mobilebert" else f"a {teacher.model_type}"
    if all(d_s == d_t for d_s, d_t in widths):
        return (f"direct transfer: student inter-block width {widths[0][0]} = the teacher's; the teacher "
                f"({kind}) plays IB-BERT's role")
    maps = ", ".join(f"{d_s}->{d_t}" for d_s, d_t in widths)
    return (f"learned projection {maps} on the feature maps (a deviation from the paper, which distils from an "
            "IB-BERT teacher of the student's width)")


def require_mlm_head(teacher, teacher_name: str) -> None:
    """Refuse a teacher (model or config) without a masked-LM head.

    Pre-training distillation needs the teacher's MLM predictions. A model passes when it has
    output embeddings, a config when its ``architectures`` name a ``*ForMaskedLM`` or
    ``*ForPreTraining`` class.
    """
    get_output_embeddings = getattr(teacher, "get_output_embeddings", None)
    if get_output_embeddings is not None and get_output_embeddings() is not None:
        return
    teacher_config = getattr(teacher, "config", teacher)
    architectures = getattr(teacher_config, "architectures", None) or []
    if not any(a.endswith(("ForMaskedLM", "ForPreTraining")) for a in architectures):
        raise KdbertError(
            f"teacher {teacher_name} has no masked-LM head (architectures: {architectures}); "
            f"pre-training distillation needs one: run `kdbert mlm-head --encoder {teacher_name} "
            "--corpus TEXT --output-dir DIR` and pass DIR as the teacher"
        )


# ----------------------------------------------------------------------------- stage generators
def uses_mlm(config) -> bool:
    """Whether the plan has a pre-training distillation term (which needs MLM heads)."""
    return config.strategy == "auxiliary" or config.pretrain_steps > 0


def layer_matches(pairs: list[tuple[int, int]], config, total_layers: int) -> list[Match]:
    """The four layer-wise terms of each pair, weighted factor / ``total_layers``; logged as
    ``feature_map``, ``mean``, ``variance`` and ``attention`` (summed over the stage's layers)."""
    hidden_terms = (
        ("feature_map", "feature_map_mse", config.feature_map_weight, "linear" if config.projection else None),
        ("mean", "mean_transfer", config.mean_weight, None),
        ("variance", "variance_transfer", config.variance_weight, None),
    )
    matches: list[Match] = []
    for s, t in pairs:
        for term, loss, factor, projection in hidden_terms:
            if factor > 0:
                matches.append(Match(term, "hidden", loss, factor / total_layers, s, t, projection=projection))
        if config.attention_weight > 0:
            options = {"reduction": config.attention_reduction, "head_average": config.head_average}
            matches.append(Match("attention", "attention_scores", "attention_kl",
                                 config.attention_weight / total_layers, s, t, options=options))
    return matches


def pretrain_match(config) -> Match:
    return Match("mlm", "mlm_logits", "mlm_distillation", 1.0,
                 options={"ground_truth_ratio": config.ground_truth_ratio})


def _projections(config, layers) -> list[ParamGroup]:
    return [ParamGroup(f"projections.layer_{layer}.*") for layer in layers] if config.projection else []


def _pretrain_stage(config, make_stage: StageFactory) -> list[Stage]:
    if not config.pretrain_steps:
        return []
    return [make_stage("pretrain-distill", [pretrain_match(config)], (ParamGroup(STUDENT),), config.pretrain_steps,
                       "linear")]


def progressive_stages(pairs: list[tuple[int, int]], config, make_stage: StageFactory,
                       embeddings_from_teacher: bool = False) -> list[Stage]:
    """One stage per student layer, then pre-training distillation (if pretrain_steps > 0).

    Stage l matches layer l only (weights factor / L, as the TF1 gate), trains layer l at
    ``current_lr_multiplier``, and layers 1..l-1 at ``previous_lr_multiplier`` (``official``) or
    not at all (``frozen``). Embeddings not copied from the teacher count as layer 0: they
    train at the current multiplier in stage 1, as an earlier layer afterwards. (The TF2 code
    weights stage l's terms by factor / l instead of factor / L; only the scale differs.)
    """
    total, current, previous = len(pairs), config.current_lr_multiplier, config.previous_lr_multiplier
    stages = []
    for index, pair in enumerate(pairs, start=1):
        groups = layer_groups([index], current) + _projections(config, [index])
        if not embeddings_from_teacher and index == 1:
            groups.append(ParamGroup(EMBEDDINGS, current))
        if config.previous_layers == "official" and index > 1:
            groups += [] if embeddings_from_teacher else [ParamGroup(EMBEDDINGS, previous)]
            groups += layer_groups(range(1, index), previous)
        stages.append(make_stage(f"layer-{index}", layer_matches([pair], config, total), tuple(groups),
                                 config.layer_steps, "constant_warmup"))
    return stages + _pretrain_stage(config, make_stage)


def joint_stages(pairs: list[tuple[int, int]], config, make_stage: StageFactory,
                 embeddings_from_teacher: bool = False) -> list[Stage]:
    """All layers' terms in one stage of L x layer_steps, then pre-training distillation."""
    total = len(pairs)
    groups = ([] if embeddings_from_teacher else [ParamGroup(EMBEDDINGS)]) + layer_groups(range(1, total + 1), 1.0)
    groups += _projections(config, range(1, total + 1))
    joint = make_stage("joint", layer_matches(pairs, config, total), tuple(groups), config.layer_steps * total,
                       "constant_warmup")
    return [joint] + _pretrain_stage(config, make_stage)


def auxiliary_stages(pairs: list[tuple[int, int]], config, make_stage: StageFactory,
                     embeddings_from_teacher: bool = False) -> list[Stage]:
    """One stage: pre-training distillation plus every layer's terms, for the same total steps.

    (``embeddings_from_teacher`` is accepted for a uniform signature: everything trains here.)
    """
    total = len(pairs)
    matches = [pretrain_match(config), *layer_matches(pairs, config, total)]
    train = (ParamGroup(STUDENT), *_projections(config, range(1, total + 1)))
    return [make_stage("auxiliary", matches, train, config.layer_steps * total + config.pretrain_steps, "linear")]


GENERATORS = {"progressive": progressive_stages, "joint": joint_stages, "auxiliary": auxiliary_stages}


def plan(student: FeatureWidths, teacher: FeatureWidths, config, make_stage: StageFactory,
         embeddings_from_teacher: bool = False) -> list[Stage]:
    """Validate the pair under ``config`` (:func:`resolve_transfer`) and generate its stages."""
    pairs = resolve_transfer(student, teacher, config).layer_pairs
    return GENERATORS[config.strategy](pairs, config, make_stage, embeddings_from_teacher)


# ----------------------------------------------------------------------------- printing
def group_label(pattern: str) -> str:
    """A readable name of a parameter glob: ``layer 3``, ``embeddings``, ``projection 2``..."""
    if pattern == EMBEDDINGS:
        return "embeddings"
    if pattern == STUDENT:
        return "all"
    for regex, name in ((_LAYER, "layer"), (_PROJECTION, "projection")):
        found = regex.match(pattern)
        if found:
            return f"{name} {int(found.group(1)) + (name == 'layer')}"
    return pattern


def describe_groups(groups) -> str:
    """Groups as ``layer 3 x3; embeddings x0.3; layers 1-2 x0.3`` (runs of layers at one rate joined)."""
    parts: list[list] = []  # [label, scale, first layer, last layer]
    for group in groups:
        label = group_label(group.pattern)
        layer = int(label.split()[1]) if label.startswith("layer ") else None
        last = parts[-1] if parts else None
        if layer is not None and last and last[2] is not None and last[1] == group.lr_scale and last[3] == layer - 1:
            last[3] = layer
        else:
            parts.append([label, group.lr_scale, layer, layer])
    return "; ".join((f"layers {first}-{last}" if first is not None and last != first else label) + f" x{scale:g}"
                     for label, scale, first, last in parts)


def _describe_matches(matches) -> str:
    layers = sorted({(m.student_layer, m.teacher_layer) for m in matches if m.student_layer is not None})
    parts = []
    if layers:
        parts.append("layers " + ",".join(f"{s}<-{t}" for s, t in layers))
    if any(m.feature == "mlm_logits" for m in matches):
        parts.append("MLM")
    return " + ".join(parts)


def stage_table(stages: list[Stage]) -> str:
    """A plain-text table of ``stages``: name, steps, terms (student<-teacher layers), what trains
    and the schedule. Parameters not listed under "trains (lr x)" are frozen in that stage."""
    rows = [("stage", "steps", "terms", "trains (lr x); rest frozen", "schedule")]
    rows += [(s.config.name, str(s.config.max_steps), _describe_matches(s.loss_fn.matches),
              describe_groups(s.config.train), s.config.schedule) for s in stages]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
