"""MobileBERT knowledge-transfer strategies as data: matches, parameter groups and stages.

MobileBERT (Sun et al., 2020, section 3.6) transfers a teacher layer by layer, then distils its
masked-LM predictions. Its three strategies differ only in how the same terms are staged:

- **auxiliary** (AKT): one stage; every layer's transfer terms are added to pre-training
  distillation.
- **joint** (JKT): every layer's transfer terms together, then pre-training distillation.
- **progressive** (PKT): one stage per layer l = 1..L, in which only layer l's terms count,
  layer l trains at 3x the learning rate and earlier layers at 0.3x (the official code,
  ``distill_util.layer_wise_learning_rate``) or frozen (the paper's text, ``frozen``); later
  layers do not train. Then pre-training distillation.

Each function here returns a list of :class:`Stage` descriptions and trains nothing; a trainer
turns a stage into loss terms (its :class:`Match` list over a student and a teacher trace) and
optimiser parameter groups (its :class:`ParamGroup` list over ``named_parameters()``).

Layer-wise terms per matched pair (student layer l, teacher layer g(l)), with the official
factors divided by the number of transferred layers L (:class:`TransferWeights`)::

    100/L  * feature_map_mse(h_s[l], h_t[g(l)])       5000/L * mean_transfer_loss(...)
    5/L    * variance_transfer_loss(...)              1/L    * attention_kl(A_s[l], A_t[g(l)])

The pre-training distillation term is ``mlm_distillation_loss`` (weight 1). Hidden-state
indices follow HF's ``hidden_states`` (0 is the embedding output, never transferred: the
official code transfers layers 1..L); attention indices are 1-based layers too.

What a stage here does not carry, and the official runs used: LAMB at lr 1.5e-3, constant during
layer-wise transfer with a warm-up at the start of each layer's phase, then 10k warm-up steps and
linear decay for pre-training distillation; weight decay 0.01; gradient clipping 1.0; batch 2048
of 512 tokens; no dropout in the student.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kdbert import mapping
from kdbert.errors import KdbertError
from kdbert.models.mobilebert import FeatureWidths

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

# Parameter-name patterns of HF MobileBERT models (ForMaskedLM and ForSequenceClassification).
EMBEDDINGS = r"mobilebert\.embeddings\."
ALL_PARAMETERS = r".*"


def layer_pattern(layers: list[int]) -> str:
    """Regex matching the parameters of 1-based student layers ``layers``."""
    indices = "|".join(str(layer - 1) for layer in layers)
    return rf"mobilebert\.encoder\.layer\.({indices})\."


@dataclass(frozen=True)
class TransferWeights:
    """Factors of the layer-wise terms; each layer's term is weighted factor / L."""

    feature_map: float = FEATURE_MAP_FACTOR
    mean: float = MEAN_FACTOR
    variance: float = VARIANCE_FACTOR
    attention: float = ATTENTION_FACTOR


@dataclass(frozen=True)
class Match:
    """One distillation term: ``weight * loss(student feature, teacher feature, **options)``.

    ``feature`` is ``"hidden"`` (``hidden_states[layer]``), ``"attention_scores"`` (pre-softmax
    scores of 1-based ``layer``, ``attention_scores[layer - 1]`` of a trace) or ``"mlm_logits"``
    (layers None). ``loss`` names a function of :mod:`kdbert.losses`, called as
    ``loss(student feature, teacher feature, attention_mask, **options)`` for layer features and
    ``loss(student logits, teacher logits, mlm_labels, **options)`` for MLM logits.
    ``projection`` asks for a learned student -> teacher width map (passed as ``projection=``).
    """

    feature: str
    student_layer: int | None
    teacher_layer: int | None
    loss: str
    weight: float
    projection: bool = False
    options: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class ParamGroup:
    """Parameters whose name matches ``pattern`` (``re.match``) train at lr x ``lr_multiplier``.

    ``label`` names the group in stage tables.
    """

    pattern: str
    lr_multiplier: float
    label: str = ""


def layers_group(layers: list[int], lr_multiplier: float) -> ParamGroup:
    """The parameters of 1-based student layers ``layers``, labelled for stage tables."""
    label = ("layer " if len(layers) == 1 else "layers ") + ",".join(map(str, layers))
    return ParamGroup(layer_pattern(layers), lr_multiplier, label)


def embeddings_group(lr_multiplier: float) -> ParamGroup:
    return ParamGroup(EMBEDDINGS, lr_multiplier, "embeddings")


@dataclass(frozen=True)
class Stage:
    """A stage: its terms, what trains (first matching group wins; the rest is frozen), its length."""

    name: str
    matches: tuple[Match, ...]
    param_groups: tuple[ParamGroup, ...]
    steps: int


@dataclass(frozen=True)
class TransferConfig:
    """Options of MobileBERT general distillation.

    Attributes:
        strategy: ``progressive``, ``joint`` or ``auxiliary``.
        layer_steps: steps per transferred layer (official: 10,000 per layer, 240,000 in all).
            Progressive spends them per stage, joint in one stage of L x layer_steps, auxiliary
            adds L x layer_steps to its single stage, so all three take the same total.
        pretrain_steps: steps of pre-training distillation.
        teacher_layers: 1-based teacher layer for each student layer; None for the uniform map
            g(l) = l * N / M (identity for equal depths).
        previous_layers: progressive only: ``official`` trains earlier layers at
            ``previous_lr_multiplier`` (0.3), ``frozen`` freezes them (the paper's text).
        current_lr_multiplier: progressive only: lr multiplier of the layer in training (3).
        previous_lr_multiplier: progressive only: lr multiplier of earlier layers (0.3).
        embeddings_from_teacher: the student's embeddings were all copied from the teacher;
            they stay frozen during layer-wise transfer (official). Otherwise they train as a
            layer 0, before layer 1.
        head_average: average groups of teacher heads to the student's head count.
        projection: allow a learned projection where the student's inter-block width differs
            from the teacher's hidden size (a deviation from the paper, which uses an IB-BERT
            teacher of the student's width instead).
        weights: factors of the layer-wise terms.
        ground_truth_ratio: weight of the one-hot target in pre-training distillation.
        attention_reduction: ``reference`` or ``masked-mean`` (see ``attention_kl``).
    """

    strategy: str = "progressive"
    layer_steps: int = 10_000
    pretrain_steps: int = 500_000
    teacher_layers: tuple[int, ...] | None = None
    previous_layers: str = "official"
    current_lr_multiplier: float = CURRENT_LAYER_LR
    previous_lr_multiplier: float = PREVIOUS_LAYERS_LR
    embeddings_from_teacher: bool = False
    head_average: bool = False
    projection: bool = False
    weights: TransferWeights = field(default_factory=TransferWeights)
    ground_truth_ratio: float = GROUND_TRUTH_RATIO
    attention_reduction: str = "reference"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise KdbertError(f"--strategy {self.strategy!r} is unknown; use one of {', '.join(STRATEGIES)}")
        if self.previous_layers not in PREVIOUS_LAYERS:
            raise KdbertError(
                f"--previous-layers {self.previous_layers!r} is unknown; use 'official' (train "
                f"earlier layers at {PREVIOUS_LAYERS_LR}x) or 'frozen'"
            )
        if self.layer_steps < 1 or self.pretrain_steps < 0:
            raise KdbertError(
                f"layer_steps={self.layer_steps}, pretrain_steps={self.pretrain_steps}: use "
                "layer_steps >= 1 and pretrain_steps >= 0"
            )
        if not 0.0 <= self.ground_truth_ratio <= 1.0:
            raise KdbertError(f"--ground-truth-ratio {self.ground_truth_ratio} must lie in [0, 1]")


# ----------------------------------------------------------------------------- validation
def layer_pairs(student: FeatureWidths, teacher: FeatureWidths, config: TransferConfig) -> list[tuple[int, int]]:
    """Check that ``student`` can learn from ``teacher`` under ``config``; return the layer pairs.

    Raises a one-line KdbertError, before any training, when the student is deeper than the
    teacher, the layer map does not fit, the widths differ without ``projection``, or the head
    counts make attention transfer impossible without ``head_average``.
    """
    m, n = student.num_layers, teacher.num_layers
    if m > n:
        raise KdbertError(
            f"the student has {m} layers but the teacher has {n}: layer-to-layer transfer needs "
            f"one teacher layer per student layer; use a student with at most {n} layers "
            f"(e.g. --student mobilebert-matched, or num_hidden_layers={n})"
        )
    if config.teacher_layers is None:
        if n % m:
            raise KdbertError(
                f"the teacher's {n} layers do not spread evenly over the student's {m}; pass "
                f"--teacher-layers with {m} 1-based teacher layers"
            )
        layer_map = mapping.uniform(m, n)
    else:
        if len(config.teacher_layers) != m:
            raise KdbertError(
                f"--teacher-layers lists {len(config.teacher_layers)} layers but the student has {m}; "
                "give one 1-based teacher layer per student layer"
            )
        layer_map = mapping.explicit(list(config.teacher_layers), n)
    pairs = [(s, t) for s, t in layer_map.pairs if s > 0]
    for s, t in pairs:
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
    return pairs


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
def layer_matches(pairs: list[tuple[int, int]], config: TransferConfig, total_layers: int) -> tuple[Match, ...]:
    """The four layer-wise terms of each pair, weighted factor / ``total_layers``."""
    w = config.weights
    hidden_terms = (
        ("feature_map_mse", w.feature_map, config.projection),
        ("mean_transfer_loss", w.mean, False),
        ("variance_transfer_loss", w.variance, False),
    )
    attention_options = (("head_average", config.head_average), ("reduction", config.attention_reduction))
    matches: list[Match] = []
    for s, t in pairs:
        for loss, factor, projection in hidden_terms:
            matches.append(Match("hidden", s, t, loss, factor / total_layers, projection=projection))
        matches.append(Match("attention_scores", s, t, "attention_kl", w.attention / total_layers,
                             options=attention_options))
    return tuple(matches)


def pretrain_match(config: TransferConfig) -> Match:
    return Match("mlm_logits", None, None, "mlm_distillation_loss", 1.0,
                 options=(("ground_truth_ratio", config.ground_truth_ratio),))


def _all_layers_groups(num_layers: int, config: TransferConfig) -> tuple[ParamGroup, ...]:
    groups = [layers_group(list(range(1, num_layers + 1)), 1.0)]
    if not config.embeddings_from_teacher:
        groups.insert(0, embeddings_group(1.0))
    return tuple(groups)


def _pretrain_stage(config: TransferConfig) -> Stage:
    return Stage("pretrain-distill", (pretrain_match(config),), (ParamGroup(ALL_PARAMETERS, 1.0, "all"),),
                 config.pretrain_steps)


def progressive_stages(pairs: list[tuple[int, int]], config: TransferConfig) -> list[Stage]:
    """One stage per student layer, then pre-training distillation (if pretrain_steps > 0).

    Stage l matches layer l only (weights factor / L, as the TF1 gate), trains layer l at
    ``current_lr_multiplier``, and layers 1..l-1 at ``previous_lr_multiplier`` (``official``) or
    not at all (``frozen``). Embeddings not copied from the teacher count as layer 0: they
    train at the current multiplier in stage 1, as an earlier layer afterwards. (The TF2 code
    weights stage l's terms by factor / l instead of factor / L; only the scale differs.)
    """
    total, current, previous = len(pairs), config.current_lr_multiplier, config.previous_lr_multiplier
    train_embeddings = not config.embeddings_from_teacher
    stages = []
    for index, pair in enumerate(pairs, start=1):
        groups = [layers_group([index], current)]
        if train_embeddings and index == 1:
            groups.append(embeddings_group(current))
        if config.previous_layers == "official" and index > 1:
            groups += [embeddings_group(previous)] if train_embeddings else []
            groups.append(layers_group(list(range(1, index)), previous))
        stages.append(Stage(f"layer-{index}", layer_matches([pair], config, total), tuple(groups),
                            config.layer_steps))
    return stages + ([_pretrain_stage(config)] if config.pretrain_steps else [])


def joint_stages(pairs: list[tuple[int, int]], config: TransferConfig) -> list[Stage]:
    """All layers' terms in one stage of L x layer_steps, then pre-training distillation."""
    total = len(pairs)
    joint = Stage("joint", layer_matches(pairs, config, total), _all_layers_groups(total, config),
                  config.layer_steps * total)
    return [joint] + ([_pretrain_stage(config)] if config.pretrain_steps else [])


def auxiliary_stages(pairs: list[tuple[int, int]], config: TransferConfig) -> list[Stage]:
    """One stage: pre-training distillation plus every layer's terms, for the same total steps."""
    total = len(pairs)
    matches = (pretrain_match(config), *layer_matches(pairs, config, total))
    return [Stage("auxiliary", matches, (ParamGroup(ALL_PARAMETERS, 1.0, "all"),),
                  config.layer_steps * total + config.pretrain_steps)]


_GENERATORS = {"progressive": progressive_stages, "joint": joint_stages, "auxiliary": auxiliary_stages}


def plan(student: FeatureWidths, teacher: FeatureWidths, config: TransferConfig) -> list[Stage]:
    """Validate the pair under ``config`` (:func:`layer_pairs`) and generate its stages."""
    return _GENERATORS[config.strategy](layer_pairs(student, teacher, config), config)


# ----------------------------------------------------------------------------- applying and printing
def lr_multipliers(parameter_names: list[str], stage: Stage) -> dict[str, float]:
    """The lr multiplier of each parameter in ``stage`` (first matching group; 0.0 = frozen)."""
    compiled = [(re.compile(g.pattern), g.lr_multiplier) for g in stage.param_groups]
    result = {}
    for name in parameter_names:
        result[name] = next((m for pattern, m in compiled if pattern.match(name)), 0.0)
    return result


def _describe_groups(groups: tuple[ParamGroup, ...]) -> str:
    return "; ".join(f"{g.label or g.pattern} x{g.lr_multiplier:g}" for g in groups)


def _describe_matches(matches: tuple[Match, ...]) -> str:
    layers = sorted({(m.student_layer, m.teacher_layer) for m in matches if m.student_layer is not None})
    parts = []
    if layers:
        parts.append("layers " + ",".join(f"{s}<-{t}" for s, t in layers))
    if any(m.feature == "mlm_logits" for m in matches):
        parts.append("MLM")
    return " + ".join(parts)


def stage_table(stages: list[Stage]) -> str:
    """A plain-text table of ``stages``: name, steps, terms (student<-teacher layers), what trains.

    Parameters not listed under "trains (lr x)" are frozen in that stage.
    """
    rows = [("stage", "steps", "terms", "trains (lr x); rest frozen")]
    rows += [(s.name, str(s.steps), _describe_matches(s.matches), _describe_groups(s.param_groups)) for s in stages]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
