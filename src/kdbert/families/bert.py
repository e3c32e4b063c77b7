"""Student construction: presets, random init, and init from a teacher's layers.

Every function returns a plain Hugging Face model: ``save_pretrained`` output loads with
transformers alone, no kdbert needed (a student that pools by mean, as its teacher does, pools so
where kdbert loads it: :mod:`kdbert.core.pooling`).
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn
from transformers import (
    BertConfig,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertModel,
    DistilBertConfig,
    DistilBertForMaskedLM,
    PretrainedConfig,
    PreTrainedModel,
)

from kdbert.core.pooling import apply_pooling, inherit_pooling
from kdbert.errors import KdbertError
from kdbert.families import selection
from kdbert.families.registry import Candidate, ShapeContext
from kdbert.families.selection import select_teacher_weights

# TinyBERT students (Jiao et al., 2020). With BERT's 30522-word vocabulary tinybert4's
# BertModel (pooler included) has 14,350,248 parameters; the paper rounds to 14.5M.
PRESETS: dict[str, dict[str, int]] = {
    "tinybert4": dict(num_hidden_layers=4, hidden_size=312, intermediate_size=1200, num_attention_heads=12),
    "tinybert6": dict(num_hidden_layers=6, hidden_size=768, intermediate_size=3072, num_attention_heads=12),
}

# Which teacher layers (0-based) seed a DistilBERT student. The paper takes every other
# layer; HF's released distilbert-base-uncased was extracted from [0, 2, 4, 7, 9, 11].
DISTILBERT_LAYER_CHOICES: dict[str, list[int] | Callable[[int], list[int]]] = {
    "every-other": lambda n: list(range(0, n, 2)),
    "hf-bert-base": [0, 2, 4, 7, 9, 11],
}

TASK_KINDS = ("classification", "regression", "question-answering")


def student_config(
    preset_or_none: str | None,
    teacher_config: PretrainedConfig,
    num_labels: int,
    **overrides,
) -> BertConfig:
    """A BertConfig for a student of ``teacher_config``'s vocabulary.

    Vocabulary size, max positions, token-type vocabulary, pad id, activation and pooling
    (:mod:`kdbert.core.pooling`) come from the teacher (the student shares its tokenizer). The
    shape comes from the preset, or from the teacher when ``preset_or_none`` is None;
    ``overrides`` (e.g. ``num_hidden_layers``, ``hidden_size``, ``intermediate_size``,
    ``num_attention_heads``) win over both.
    """
    if preset_or_none is None:
        shape = {key: getattr(teacher_config, key) for key in PRESETS["tinybert4"]}
    elif preset_or_none in PRESETS:
        shape = dict(PRESETS[preset_or_none])
    else:
        raise KdbertError(
            f"unknown student preset {preset_or_none!r}; choose one of {', '.join(PRESETS)} "
            "or give num_hidden_layers/hidden_size/intermediate_size/num_attention_heads"
        )
    kwargs = dict(
        vocab_size=teacher_config.vocab_size,
        max_position_embeddings=teacher_config.max_position_embeddings,
        type_vocab_size=getattr(teacher_config, "type_vocab_size", 2),
        pad_token_id=getattr(teacher_config, "pad_token_id", 0),
        hidden_act=getattr(teacher_config, "hidden_act", "gelu"),
        num_labels=num_labels,
        **shape,
    )
    kwargs.update(overrides)
    if kwargs["hidden_size"] % kwargs["num_attention_heads"] != 0:
        raise KdbertError(
            f"student hidden_size {kwargs['hidden_size']} is not divisible by "
            f"num_attention_heads {kwargs['num_attention_heads']}; change one of them"
        )
    return inherit_pooling(BertConfig(**kwargs), teacher_config)


def build_student(
    config: BertConfig, task_kind: str = "classification", seed: int = 0
) -> BertForSequenceClassification | BertForQuestionAnswering:
    """A randomly initialised ``BertForSequenceClassification`` pooling as ``config`` records; same seed,
    same weights.

    ``task_kind="regression"`` sets num_labels 1 and problem_type "regression" (STS-B);
    ``"question-answering"`` gives a ``BertForQuestionAnswering`` (start and end logits).
    The global torch RNG is left untouched.
    """
    if task_kind not in TASK_KINDS:
        raise KdbertError(f"unknown task kind {task_kind!r}; use one of {', '.join(TASK_KINDS)}")
    config = copy.deepcopy(config)
    if task_kind == "regression":
        config.num_labels = 1
        config.problem_type = "regression"
    if task_kind == "question-answering":
        config.num_labels = 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = BertForQuestionAnswering if task_kind == "question-answering" else BertForSequenceClassification
        return apply_pooling(head(config))


def _bert_of(teacher: PreTrainedModel) -> BertModel:
    bert = getattr(teacher, "bert", teacher)
    if not isinstance(bert, BertModel):
        raise KdbertError(
            f"expected a BERT teacher (BertModel or a Bert* model with .bert), got "
            f"{type(teacher).__name__}; load the teacher with a Bert* class"
        )
    return bert


def _check_layers(layers: list[int], depth: int) -> list[int]:
    """Teacher layer indices (0-based): non-empty, in range, strictly increasing."""
    layers = [int(i) for i in layers]
    if not layers:
        raise KdbertError("no teacher layers given; pass at least one 0-based layer index")
    if len(layers) > depth:
        raise KdbertError(
            f"k = {len(layers)} student layers is larger than the teacher's depth {depth}; "
            f"choose at most {depth} teacher layers"
        )
    for i, layer in enumerate(layers):
        if not 0 <= layer < depth:
            raise KdbertError(
                f"teacher layer index {layer} (position {i}) is out of range; the teacher "
                f"has {depth} layers, 0-based indices 0..{depth - 1}"
            )
        if i > 0 and layer <= layers[i - 1]:
            raise KdbertError(
                f"teacher layer index {layer} (position {i}) does not come after "
                f"{layers[i - 1]}; layer indices must be strictly increasing"
            )
    return layers


@torch.no_grad()
def _copy(dst: nn.Module, src: nn.Module) -> None:
    """Copy weight and bias of a Linear / LayerNorm / Embedding into a same-shaped one."""
    for name in ("weight", "bias"):
        if getattr(src, name, None) is not None:
            getattr(dst, name).copy_(getattr(src, name))


def init_from_teacher_layers(
    teacher: PreTrainedModel, layers: list[int], num_labels: int, seed: int = 0
) -> BertForSequenceClassification:
    """A BERT student of the teacher's width built from chosen teacher layers (BERT-PKD).

    Copies the embeddings, teacher encoder layers ``layers`` (0-based, increasing) into
    student layers 0..k-1, and the pooler; the classifier is fresh (seeded), a QA head (start, end)
    when the teacher answers questions; the student pools as the teacher does. PKD initialises
    from the first k layers: ``layers=list(range(k))``. num_labels 1 means regression.
    """
    bert = _bert_of(teacher)
    layers = _check_layers(layers, bert.config.num_hidden_layers)
    config = copy.deepcopy(bert.config)
    config.num_hidden_layers = len(layers)
    config.num_labels = num_labels
    config.problem_type = "regression" if num_labels == 1 else None
    config.architectures = None
    question_answering = isinstance(teacher, BertForQuestionAnswering)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        student = BertForQuestionAnswering(config) if question_answering else BertForSequenceClassification(config)
    with torch.no_grad():
        student.bert.embeddings.load_state_dict(bert.embeddings.state_dict())
        for i, layer in enumerate(layers):
            student.bert.encoder.layer[i].load_state_dict(bert.encoder.layer[layer].state_dict())
        if bert.pooler is not None and student.bert.pooler is not None:
            student.bert.pooler.load_state_dict(bert.pooler.state_dict())
    return apply_pooling(student)


def init_distilbert_student(
    teacher_bert: PreTrainedModel, layers: list[int] | str | None = None
) -> DistilBertForMaskedLM:
    """A ``DistilBertForMaskedLM`` initialised from a BERT teacher (DistilBERT recipe).

    ``layers``: 0-based teacher layers, a key of ``DISTILBERT_LAYER_CHOICES``, or None for
    every other layer. The student has the teacher's width, heads, FFN size, vocabulary and
    positions. Copied: word embeddings, position embeddings, embedding LayerNorm, and per
    layer q/k/v/o -> q_lin/k_lin/v_lin/out_lin, attention LayerNorm -> sa_layer_norm,
    intermediate/output dense -> ffn.lin1/lin2, output LayerNorm -> output_layer_norm.
    If the teacher has an MLM head (BertForMaskedLM) it is copied too: transform dense ->
    vocab_transform, transform LayerNorm -> vocab_layer_norm, decoder -> vocab_projector.

    DistilBERT has no token-type embeddings: its embedding is LN(word + pos), BERT's is
    LN(word + pos + type). ``token_type_embeddings[0]`` is folded into the copied position
    embeddings, so with token_type_ids all 0 (single-segment input, as in DistilBERT's
    pre-training) the student's embeddings equal the teacher's exactly. The reference
    ``extract_distilbert.py`` drops the type embedding instead. DistilBERT's LayerNorms use
    eps 1e-12, BERT's default; a teacher with another ``layer_norm_eps`` matches only
    approximately.
    """
    bert = _bert_of(teacher_bert)
    depth = bert.config.num_hidden_layers
    if layers is None:
        layers = "every-other"
    if isinstance(layers, str):
        if layers not in DISTILBERT_LAYER_CHOICES:
            raise KdbertError(
                f"unknown DistilBERT layer choice {layers!r}; use one of "
                f"{', '.join(DISTILBERT_LAYER_CHOICES)} or a list of 0-based teacher layers"
            )
        choice = DISTILBERT_LAYER_CHOICES[layers]
        layers = choice(depth) if callable(choice) else choice
    layers = _check_layers(layers, depth)

    bc = bert.config
    head = getattr(getattr(teacher_bert, "cls", None), "predictions", None)
    tied = head is None or torch.equal(head.decoder.weight, bert.embeddings.word_embeddings.weight)
    config = DistilBertConfig(
        vocab_size=bc.vocab_size,
        max_position_embeddings=bc.max_position_embeddings,
        dim=bc.hidden_size,
        hidden_dim=bc.intermediate_size,
        n_heads=bc.num_attention_heads,
        n_layers=len(layers),
        activation=bc.hidden_act,
        dropout=bc.hidden_dropout_prob,
        attention_dropout=bc.attention_probs_dropout_prob,
        initializer_range=bc.initializer_range,
        pad_token_id=bc.pad_token_id,
        sinusoidal_pos_embds=False,
        tie_word_embeddings=tied,
    )
    student = DistilBertForMaskedLM(config)

    with torch.no_grad():
        src, dst = bert.embeddings, student.distilbert.embeddings
        _copy(dst.word_embeddings, src.word_embeddings)
        dst.position_embeddings.weight.copy_(
            src.position_embeddings.weight + src.token_type_embeddings.weight[0]
        )
        _copy(dst.LayerNorm, src.LayerNorm)
        for i, layer in enumerate(layers):
            t, s = bert.encoder.layer[layer], student.distilbert.transformer.layer[i]
            _copy(s.attention.q_lin, t.attention.self.query)
            _copy(s.attention.k_lin, t.attention.self.key)
            _copy(s.attention.v_lin, t.attention.self.value)
            _copy(s.attention.out_lin, t.attention.output.dense)
            _copy(s.sa_layer_norm, t.attention.output.LayerNorm)
            _copy(s.ffn.lin1, t.intermediate.dense)
            _copy(s.ffn.lin2, t.output.dense)
            _copy(s.output_layer_norm, t.output.LayerNorm)
        if head is not None:
            _copy(student.vocab_transform, head.transform.dense)
            _copy(student.vocab_layer_norm, head.transform.LayerNorm)
            student.vocab_projector.weight.copy_(head.decoder.weight)
            student.vocab_projector.bias.copy_(head.bias)
    return student


# ----------------------------------------------------------------------------- weight selection
STUDENT_INITS = ("random", "teacher-weights")


def apply_student_init(student: PreTrainedModel, teacher: PreTrainedModel, init: str | None) -> str:
    """Apply ``--student-init`` to a freshly built preset student; returns a description.

    ``random`` (default, the papers) keeps the random weights; ``teacher-weights`` runs
    :func:`select_teacher_weights`.
    """
    init = init or "random"
    if init not in STUDENT_INITS:
        raise KdbertError(f"--student-init {init!r} is unknown; use one of {', '.join(STUDENT_INITS)}")
    if init == "random":
        return "random"
    picked = select_teacher_weights(student, teacher)
    return f"teacher-weights (layers {','.join(map(str, picked['teacher_layers']))}, {picked['hidden_units']} units)"


# ----------------------------------------------------------------------------- shapes worth timing
def task_kind(spec_or_context) -> str:
    """The :data:`TASK_KINDS` entry of a task spec or shape context."""
    if spec_or_context.question_answering:
        return "question-answering"
    return "regression" if spec_or_context.num_labels == 1 else "classification"


def _random_student(shape: dict, context: ShapeContext) -> tuple[BertForSequenceClassification, object]:
    config = student_config(None, context.teacher_config, context.num_labels, **shape)
    return build_student(config, task_kind(context)), context.tokenizer


def speed_candidates(context: ShapeContext) -> list[Candidate]:
    """A BERT teacher's ``bert-<layers>x<width>`` candidates (:func:`kdbert.families.selection.speed_candidates`),
    built on :func:`student_config` as they always were."""
    return selection.speed_candidates(context, _random_student)
