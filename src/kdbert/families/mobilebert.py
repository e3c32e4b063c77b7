"""MobileBERT students and IB-BERT teachers as plain Hugging Face MobileBERT models.

Every model here is a ``MobileBertForSequenceClassification``, ``MobileBertForQuestionAnswering``
or ``MobileBertForMaskedLM`` built from a ``MobileBertConfig``: ``save_pretrained`` output loads with the transformers Auto
classes, no kdbert needed.

Shapes (Sun et al., 2020, Table 1; official TF configs). In HF's config, ``hidden_size`` is the
*inter-block* width (the residual stream between blocks, what ``hidden_states`` returns) and
``intra_bottleneck_size`` the width inside a block::

    preset              layers inter intra heads FFN (size x stacked) embed   norm        act
    mobilebert              24   512   128     4   512 x 4             128 tri no_norm     relu
    mobilebert-tiny         24   512   128     4   512 x 2             128 tri no_norm     relu
    mobilebert-matched   N_t   d_t  d_t/4  h_t   d_t x 4             128 tri no_norm     relu
    ib-bert-large           24   512  1024     4  4096 x 1             128 tri layer_norm  gelu
    ib-bert-matched      N_t   512   d_t   h_t   I_t x 1             d_t (1) layer_norm  act_t

(1) capped at the inter-block width: HF's MobileBERT MLM head needs embedding <= inter-block.

``*-matched`` presets are derived from the teacher's config (N_t layers, hidden d_t, h_t heads,
intermediate I_t); for the packaged all-MiniLM-L6-v2 teacher, ``mobilebert-matched`` is 6
layers, inter-block 384, intra-block 96, 12 heads of 8 dims, FFN 384 x 4. Its inter-block width
equals the teacher's hidden size and its head count the teacher's, so feature-map and attention
transfer compare layer for layer without projections: the teacher plays IB-BERT's role.

Attention inputs. ``mobilebert`` shares one bottleneck for queries and keys and reads values
from the inter-block stream (``key_query_shared_bottleneck``); ``mobilebert-tiny`` reads
queries, keys and values from the intra-block bottleneck (``use_bottleneck_attention``), as in
the official ``*_tiny`` config. IB-BERT in the TF code projects queries, keys and values from
the inter-block stream (512 wide) to the 1024-wide heads. HF's ``MobileBertSelfAttention``
sizes its query and key projections from ``intra_bottleneck_size``, so that configuration
fails with a shape error in transformers 5.23; our IB-BERT presets use
``use_bottleneck_attention=True`` instead (queries, keys and values read the input
bottleneck). This is a deviation: ``ib-bert-large`` has 3 x (1024 - 512) x 1024 more
attention weights per layer than the paper's (see :data:`PAPER_PARAMETERS`).

IB-BERT from a BERT teacher. With ``use_bottleneck_attention`` an IB-BERT block's intra-block
path (attention, FFN and their LayerNorms at width d_t) has exactly a BERT layer's tensors, so
:func:`ib_bert_from_teacher` copies every teacher layer into it; only the input and output
bottlenecks (and embeddings whose width differs) start fresh, and the model then needs training
against the teacher before it can teach. The paper pre-trains IB-BERT from scratch; its weights
were never released.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial

import torch
from transformers import (
    MobileBertConfig,
    MobileBertForMaskedLM,
    MobileBertForQuestionAnswering,
    MobileBertForSequenceClassification,
    PretrainedConfig,
    PreTrainedModel,
)

from kdbert.core.pooling import apply_pooling, inherit_pooling
from kdbert.errors import KdbertError
from kdbert.families.mobilebert_embeddings import can_fit_embeddings, fit_embeddings_to_teacher, strip_prefix
from kdbert.families.registry import Candidate, ShapeContext

# Shape keys a preset may set; anything else passed as an override is refused.
SHAPE_KEYS = (
    "num_hidden_layers", "hidden_size", "intra_bottleneck_size", "num_attention_heads",
    "intermediate_size", "num_feedforward_networks", "embedding_size", "trigram_input",
    "use_bottleneck", "use_bottleneck_attention", "key_query_shared_bottleneck",
    "normalization_type", "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "classifier_activation", "layer_norm_eps", "vocab_size", "max_position_embeddings",
    "type_vocab_size", "pad_token_id",
)

_MOBILEBERT = dict(
    num_hidden_layers=24, hidden_size=512, intra_bottleneck_size=128, num_attention_heads=4,
    intermediate_size=512, num_feedforward_networks=4, embedding_size=128, trigram_input=True,
    use_bottleneck=True, use_bottleneck_attention=False, key_query_shared_bottleneck=True,
    normalization_type="no_norm", hidden_act="relu", hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.1, classifier_activation=False,
)

# Fixed presets (official TF configs uncased_L-24_H-128_B-512_A-4_F-4_OPT, ..._F-2_tiny_OPT and
# uncased_L-24_H-1024_B-512_A-4 / TF2 en_uncased_teacher.yaml).
PRESETS: dict[str, dict] = {
    "mobilebert": dict(_MOBILEBERT),
    "mobilebert-tiny": dict(
        _MOBILEBERT, num_feedforward_networks=2, use_bottleneck_attention=True,
        key_query_shared_bottleneck=False,
    ),
    "ib-bert-large": dict(
        num_hidden_layers=24, hidden_size=512, intra_bottleneck_size=1024, num_attention_heads=4,
        intermediate_size=4096, num_feedforward_networks=1, embedding_size=128, trigram_input=True,
        use_bottleneck=True, use_bottleneck_attention=True, key_query_shared_bottleneck=False,
        normalization_type="layer_norm", hidden_act="gelu", hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1, classifier_activation=False,
    ),
}
MATCHED_PRESETS = ("mobilebert-matched", "ib-bert-matched")
PRESET_NAMES = (*PRESETS, *MATCHED_PRESETS)

# Parameter counts the paper reports (Table 1), for comparison with ours (benchmarks/mobilebert_ops.py).
PAPER_PARAMETERS = {"mobilebert": 25.3e6, "mobilebert-tiny": 15.1e6, "ib-bert-large": 293e6}

# The inter-block width ib-bert-matched uses unless told otherwise: MobileBERT's.
IB_BERT_INTER_BLOCK_SIZE = 512

HEADS = ("sequence-classification", "question-answering", "masked-lm")


def _teacher_shape(teacher_config: PretrainedConfig, preset: str) -> dict:
    """Shape of a ``*-matched`` preset from a BERT-style teacher config."""
    try:
        layers = teacher_config.num_hidden_layers
        width = teacher_config.hidden_size
        heads = teacher_config.num_attention_heads
        intermediate = teacher_config.intermediate_size
    except AttributeError:
        raise KdbertError(
            f"preset {preset!r} derives its shape from a BERT-style teacher config "
            f"(num_hidden_layers, hidden_size, num_attention_heads, intermediate_size); "
            f"{type(teacher_config).__name__} lacks them: pass the shape as keyword options"
        ) from None
    if preset == "mobilebert-matched":
        intra = width // 4
        return dict(
            _MOBILEBERT, num_hidden_layers=layers, hidden_size=width, intra_bottleneck_size=intra,
            num_attention_heads=heads, intermediate_size=intra * 4, classifier_activation=True,
            embedding_size=min(_MOBILEBERT["embedding_size"], width),
        )
    return dict(
        num_hidden_layers=layers, hidden_size=IB_BERT_INTER_BLOCK_SIZE, intra_bottleneck_size=width,
        num_attention_heads=heads, intermediate_size=intermediate, num_feedforward_networks=1,
        embedding_size=width, trigram_input=False, use_bottleneck=True,
        use_bottleneck_attention=True, key_query_shared_bottleneck=False,
        normalization_type="layer_norm", hidden_act=getattr(teacher_config, "hidden_act", "gelu"),
        hidden_dropout_prob=getattr(teacher_config, "hidden_dropout_prob", 0.1),
        attention_probs_dropout_prob=getattr(teacher_config, "attention_probs_dropout_prob", 0.1),
        layer_norm_eps=getattr(teacher_config, "layer_norm_eps", 1e-12), classifier_activation=True,
    )


def mobilebert_config(
    preset: str = "mobilebert",
    teacher_config: PretrainedConfig | None = None,
    num_labels: int = 2,
    **overrides,
) -> MobileBertConfig:
    """A ``MobileBertConfig`` for ``preset`` (see the module table), with any shape override.

    With ``teacher_config`` the vocabulary size, max positions, token-type vocabulary, pad id and
    pooling come from the teacher (the student shares its tokenizer); ``*-matched`` presets need it.
    ``overrides`` are ``MobileBertConfig`` fields from :data:`SHAPE_KEYS`, e.g.
    ``num_hidden_layers=6`` or ``normalization_type="layer_norm", hidden_act="gelu"``; they win
    over the preset. ``num_labels=1`` means regression.
    """
    if preset in PRESETS:
        shape = dict(PRESETS[preset])
    elif preset in MATCHED_PRESETS:
        if teacher_config is None:
            raise KdbertError(f"preset {preset!r} is derived from the teacher; pass teacher_config")
        shape = _teacher_shape(teacher_config, preset)
    else:
        raise KdbertError(
            f"unknown MobileBERT preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}"
        )
    unknown = sorted(set(overrides) - set(SHAPE_KEYS))
    if unknown:
        raise KdbertError(
            f"unknown MobileBERT option(s) {', '.join(unknown)}; use {', '.join(SHAPE_KEYS)}"
        )
    if teacher_config is not None:
        for key in ("vocab_size", "max_position_embeddings", "type_vocab_size", "pad_token_id"):
            if getattr(teacher_config, key, None) is not None:
                shape[key] = getattr(teacher_config, key)
    shape.update(overrides)
    if preset == "ib-bert-matched" and "embedding_size" not in overrides:
        # Word embeddings of the teacher's width (copied by ib_bert_from_teacher) when they fit
        # the inter-block width, since an MLM head needs embedding_size <= hidden_size.
        shape["embedding_size"] = min(shape["embedding_size"], shape["hidden_size"])
    intra = shape["intra_bottleneck_size"] if shape.get("use_bottleneck", True) else shape["hidden_size"]
    if intra % shape["num_attention_heads"]:
        raise KdbertError(
            f"MobileBERT attention runs at the intra-block width {intra}, which is not divisible "
            f"by num_attention_heads {shape['num_attention_heads']}; change one of them"
        )
    if shape["normalization_type"] not in ("no_norm", "layer_norm"):
        raise KdbertError(
            f"normalization_type {shape['normalization_type']!r} is unknown; use 'no_norm' or 'layer_norm'"
        )
    config = MobileBertConfig(num_labels=num_labels, **shape)
    config.problem_type = "regression" if num_labels == 1 else "single_label_classification"
    return inherit_pooling(config, teacher_config)


def build_mobilebert(
    config: MobileBertConfig, head: str = "sequence-classification", seed: int = 0
) -> MobileBertForSequenceClassification | MobileBertForQuestionAnswering | MobileBertForMaskedLM:
    """A randomly initialised (seeded) MobileBERT with a classification (pooling as ``config``
    records), question-answering (start and end logits per token) or masked-LM head."""
    if head not in HEADS:
        raise KdbertError(f"unknown head {head!r}; use one of {', '.join(HEADS)}")
    if head == "masked-lm" and config.embedding_size > config.hidden_size:
        raise KdbertError(
            f"a MobileBERT masked-LM head needs embedding_size ({config.embedding_size}) <= "
            f"hidden_size ({config.hidden_size}); lower embedding_size"
        )
    cls = {"sequence-classification": MobileBertForSequenceClassification,
           "question-answering": MobileBertForQuestionAnswering, "masked-lm": MobileBertForMaskedLM}[head]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return apply_pooling(cls(config))


# ----------------------------------------------------------------------------- feature widths
@dataclass(frozen=True)
class FeatureWidths:
    """What a match list can compare, per layer, read from a model's config alone.

    Attributes:
        model_type: the config's ``model_type`` (``bert``, ``mobilebert``, ``distilbert``).
        hidden: width of ``hidden_states[i]`` for i = 0..num_layers (0: embedding output).
        heads: attention heads of layer m at index m - 1.
        head_size: width of one attention head.
        intra: width inside a block (MobileBERT's intra-bottleneck; ``hidden`` elsewhere).
        vocab_size: size of the output vocabulary of an MLM head.
    """

    model_type: str
    hidden: tuple[int, ...]
    heads: tuple[int, ...]
    head_size: int
    intra: int
    vocab_size: int

    @property
    def num_layers(self) -> int:
        return len(self.heads)


def feature_widths(model_or_config: PreTrainedModel | PretrainedConfig) -> FeatureWidths:
    """:class:`FeatureWidths` of a BERT, DistilBERT or MobileBERT model or config."""
    config = getattr(model_or_config, "config", model_or_config)
    kind = getattr(config, "model_type", type(config).__name__)
    if kind == "distilbert":
        layers, width, heads, intra = config.n_layers, config.dim, config.n_heads, config.dim
    elif kind in ("bert", "mobilebert"):
        layers, width, heads = config.num_hidden_layers, config.hidden_size, config.num_attention_heads
        intra = getattr(config, "true_hidden_size", width)
    else:
        raise KdbertError(
            f"cannot read feature widths of a {kind!r} model; MobileBERT transfer supports "
            "bert, distilbert and mobilebert models"
        )
    return FeatureWidths(
        model_type=kind, hidden=(width,) * (layers + 1), heads=(heads,) * layers,
        head_size=intra // heads, intra=intra, vocab_size=config.vocab_size,
    )


# ----------------------------------------------------------------------------- init from a teacher
# Parts of a model that init_from_teacher may copy, as patterns on prefix-free names.
INIT_PARTS = {
    "embeddings": r"embeddings\.",
    "pooler": r"pooler\.",
    "classifier": r"classifier\.",
    "mlm-head": r"cls\.predictions\.(transform\.|bias$)",
    "encoder": r"encoder\.",
}
STUDENT_INIT_PARTS = ("embeddings", "pooler", "classifier", "mlm-head")


@torch.no_grad()
def init_from_teacher(
    student: PreTrainedModel, teacher: PreTrainedModel, parts: tuple[str, ...] = STUDENT_INIT_PARTS
) -> dict[str, list[str]]:
    """Copy teacher tensors into ``student`` in place wherever name and shape agree.

    Names are compared without the base-model prefix (``bert.``, ``mobilebert.``), so a BERT
    teacher's ``bert.embeddings.position_embeddings.weight`` seeds a MobileBERT student's
    ``mobilebert.embeddings.position_embeddings.weight`` when both are 512 x d. ``parts``
    limits the copy to the named parts of :data:`INIT_PARTS`; the default takes embeddings,
    pooler, classifier and MLM-head transform, as the official code copies the embedding
    layer into the student (TF2 ``if_copy_embeddings``). Two rules keep copies meaningful:

    - the classifier is copied only when the student has the teacher's kind of pooler (a BERT
      classifier reads ``tanh(W h_CLS)``; a MobileBERT with ``classifier_activation=False``
      feeds ``h_CLS`` itself);
    - a MobileBERT student whose embedding output has the teacher's width gets its embedding
      layer from :func:`fit_embeddings_to_teacher` (a factorised word table and NoNorm fitted to
      the teacher's embedding function, not a copy of same-named tensors that would leave
      its 128-d word table random beside copied position embeddings).

    Returns ``{"copied": [...], "skipped": ["name: reason", ...]}`` with student names (and
    ``"embeddings"``: :func:`fit_embeddings_to_teacher`'s report when it ran), so a recipe can
    print it and decide, e.g., whether the embeddings may stay frozen.
    """
    unknown = sorted(set(parts) - set(INIT_PARTS))
    if unknown:
        raise KdbertError(f"unknown init part(s) {', '.join(unknown)}; use {', '.join(INIT_PARTS)}")
    pattern = re.compile("|".join(f"(?:{INIT_PARTS[p]})" for p in parts))
    teacher_params = {strip_prefix(n): p for n, p in teacher.state_dict().items()}
    teacher_pooled = any(n.startswith("pooler.dense") for n in teacher_params)
    student_pooled = any(strip_prefix(n).startswith("pooler.dense") for n, _ in student.named_parameters())
    copied: list[str] = []
    skipped: list[str] = []
    report: dict = {}
    fitted = "embeddings" in parts and can_fit_embeddings(student, teacher)
    if fitted:
        report["embeddings"] = fit_embeddings_to_teacher(student, teacher)
    for name, param in student.named_parameters():
        key = strip_prefix(name)
        if not pattern.match(key):
            continue
        if fitted and key.startswith("embeddings."):
            copied.append(name)
            continue
        source = teacher_params.get(key)
        if source is None:
            skipped.append(f"{name}: the teacher has no {key}")
        elif source.shape != param.shape:
            skipped.append(f"{name}: shape {tuple(param.shape)} != teacher {tuple(source.shape)}")
        elif key.startswith("classifier.") and student_pooled != teacher_pooled:
            skipped.append(f"{name}: the student's pooler differs from the teacher's")
        else:
            param.copy_(source)
            copied.append(name)
    return {"copied": copied, "skipped": skipped, **report}


def ib_bert_from_teacher(
    teacher: PreTrainedModel,
    inter_block_size: int = IB_BERT_INTER_BLOCK_SIZE,
    head: str = "masked-lm",
    seed: int = 0,
    **overrides,
) -> tuple[MobileBertForSequenceClassification | MobileBertForMaskedLM, dict[str, list[str]]]:
    """An ``ib-bert-matched`` model of width ``inter_block_size``, seeded from a BERT teacher.

    Every teacher layer's attention, FFN and LayerNorm tensors land in the IB-BERT block of
    the same index (same names, same shapes at the teacher's width); embeddings, pooler,
    classifier and MLM-head transform are copied where shapes allow; the bottlenecks are
    fresh (seeded). Returns the model and :func:`init_from_teacher`'s report.
    """
    config = mobilebert_config(
        "ib-bert-matched", teacher.config, num_labels=getattr(teacher.config, "num_labels", 2),
        hidden_size=inter_block_size, **overrides,
    )
    model = build_mobilebert(config, head=head, seed=seed)
    report = init_from_teacher(model, teacher, parts=tuple(INIT_PARTS))
    return model, report


def describe(config: MobileBertConfig) -> str:
    """One line naming a MobileBERT config's shape, for logs and stage tables."""
    intra = config.true_hidden_size
    inverted = " (inverted bottleneck)" if intra > config.hidden_size else ""
    return (
        f"{config.num_hidden_layers} layers, inter-block {config.hidden_size}, intra-block "
        f"{intra}{inverted}, {config.num_attention_heads} heads, FFN {config.intermediate_size} x "
        f"{config.num_feedforward_networks}, embedding {config.embedding_size}"
        f"{' trigram' if config.trigram_input else ''}, {config.normalization_type}, {config.hidden_act}"
    )


SPEED_DEPTHS = (2, 4)
"""Depths of the teacher-matched MobileBERT (bottlenecks a quarter of the teacher's width) whose
deployed speed ``kdbert compress`` measures."""


def _random_student(layers: int, context: ShapeContext):
    config = mobilebert_config("mobilebert-matched", context.teacher_config, context.num_labels,
                               num_hidden_layers=layers)
    head = "question-answering" if context.question_answering else "sequence-classification"
    return build_mobilebert(config, head), context.tokenizer


def _student_from_teacher(layers: int, teacher: PreTrainedModel, context: ShapeContext):
    """The shape's student with the teacher's embedding layer fitted and its head copied
    (:func:`init_from_teacher`); the encoder still needs distillation."""
    student, _ = _random_student(layers, context)
    init_from_teacher(student, teacher)
    return student


def speed_candidates(context: ShapeContext) -> list[Candidate]:
    """``mobilebert-matched`` at :data:`SPEED_DEPTHS` (no deeper than the teacher)."""
    teacher = context.teacher_config
    return [Candidate(f"mobilebert-{layers}x{teacher.hidden_size}", "hf", (("num_hidden_layers", layers),),
                      partial(_random_student, layers), partial(_student_from_teacher, layers))
            for layers in SPEED_DEPTHS if layers <= teacher.num_hidden_layers]
