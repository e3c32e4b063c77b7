"""MiniLM (MiniLMv2, Wang et al., 2021): self-attention relation distillation, task and general.

Task distillation is two stages run by the shared trainer:

1. ``relation``: the query-query, key-key and value-value relations of one teacher layer against
   those of the student's last layer (:mod:`kdbert.core.relation_losses`)::

       L = KL(A_QQ^t || A_QQ^s) + KL(A_KK^t || A_KK^s) + KL(A_VV^t || A_VV^s)

   with the queries, keys and values (heads concatenated, width d) split into R relation heads of
   width d / R, so any student width and head count works without projections. Q, K and V are
   read by forward hooks on the layer's query, key and value projections, so the models keep their
   own attention kernel. No evaluation (the classifier is not trained in this stage).
2. ``prediction``: classic KD on the logits (kd's options: alpha, temperature, kd_loss), evaluated.

General distillation is stage 1 alone on raw text from a pre-trained teacher (packed
single-segment sequences, as tinybert's; the same defaults: 3 epochs, batch 256, lr 1e-4,
sequences of 128, student tinybert4); its bare ``BertModel`` folder is a starting ``--student``.

Teacher layer (``relation_layer``): ``paper`` (default) is the last layer for base-size and
smaller teachers (up to 12 layers) and an upper-middle one for deeper ones, 7/8 of the depth
(the paper's 21st layer of BERT-large's 24); ``last``; or a layer number (1-based).
Relation heads (``relation_heads``): default 12, the paper's count for base-size teachers (it
uses more for large ones), or when 12 does not divide both Q/K/V widths the largest count
below 12 that does (a 384-wide teacher and a 128-wide student: 8).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from kdbert.core.loading import load_encoder
from kdbert.core.method import DistillContext, Method, Plan, Student
from kdbert.core.relation_losses import RELATION_TYPES, minilm_relation_loss
from kdbert.core.stages import task_stage
from kdbert.core.trace import model_batch, model_inputs
from kdbert.core.stages import Stage, StageConfig
from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.families.bert import STUDENT_INITS
from kdbert.methods.base import (LogitKDConfig, StudentLayerOptions, check_kd_loss, kd_matches, kd_report,
                                 resolve_student, student_description)
from kdbert.methods.tinybert import general_bert_student
from kdbert.options import EPOCHS, LEARNING_RATE, POSITIVE_INT, TrainOptions, in_range, option, override

DEFAULT_RELATION_HEADS = 12
BASE_SIZE_DEPTH = 12
# the module names of a layer's query, key and value projections (BERT-style, DistilBERT)
PROJECTION_NAMES = {"query": ("query", "q_lin"), "key": ("key", "k_lin"), "value": ("value", "v_lin")}


@dataclass
class RelationOptions:
    """Which relations MiniLM distils: the teacher layer and the relation heads."""

    relation_heads: int | None = option(None, "minilm: relation heads R (default 12, the paper's, or the largest "
                                              "count below it dividing both Q/K/V widths)",
                                        in_range(1, 4096, int), int, "losses")
    relation_layer: str = option("paper", "minilm: teacher layer whose relations the student's last layer learns: "
                                          "paper (the last for teachers of up to 12 layers, else 7/8 of the depth), "
                                          "last, or a layer number (1-based)", group="losses")


@dataclass
class MiniLMConfig(RelationOptions, StudentLayerOptions, LogitKDConfig):
    """MiniLM task distillation (see the module docstring)."""

    method = "minilm"
    skip_relation: bool = option(False, "minilm: run the prediction stage only", type=bool, group="stages")
    relation_epochs: float | None = option(None, "minilm: epochs of the relation stage (default: --epochs)", EPOCHS,
                                           float, "stages")
    relation_lr: float | None = option(None, "minilm: learning rate of the relation stage (default: "
                                             "--learning-rate)", LEARNING_RATE, float, "stages")
    relation_max_steps: int | None = option(None, "minilm: optimiser steps of the relation stage", POSITIVE_INT,
                                            int, "stages")


@dataclass
class MiniLMGeneralConfig(RelationOptions, TrainOptions):
    """MiniLM general distillation: the relation stage on raw text (module docstring)."""

    method = "minilm"
    teacher: str | None = option("default", "pre-trained (not fine-tuned) teacher", group="models")
    student: str | None = option("tinybert4", "minilm: preset or config folder (default tinybert4)", group="models")
    corpus: list | None = option(None, "text files or folders", type=list, group="models")
    max_sequences: int | None = option(None, "use at most N packed sequences", in_range(1, 10**12, int), int, "models")
    student_init: str | None = option(None, "preset student's weights: random (default, as the papers) or selected "
                                            "from the teacher's (weight selection)", group="student",
                                      choices=STUDENT_INITS)
    epochs: float | None = override(TrainOptions, "epochs", 3)
    learning_rate: float | None = override(TrainOptions, "learning_rate", 1e-4)
    batch_size: int | None = override(TrainOptions, "batch_size", 256)
    max_seq_len: int | None = override(TrainOptions, "max_seq_len", 128)
    save_every: int | None = option(None, "checkpoint every N optimiser steps (default: at the end of each epoch)",
                                    POSITIVE_INT, int, "models")


# ----------------------------------------------------------------------------- Q/K/V
def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The transformer layers of a BERT-family model (``encoder.layer`` or DistilBERT's ``transformer.layer``)."""
    base = getattr(model, "base_model", model)
    for path in ("encoder.layer", "transformer.layer"):
        try:
            return base.get_submodule(path)
        except AttributeError:
            continue
    raise KdbertError(f"{type(model).__name__} has no encoder.layer list: minilm needs a BERT-family model")


def qkv_projections(model: nn.Module, layer: int) -> dict[str, nn.Module]:
    """The query, key and value projections of ``layer`` (1-based; -1 for the last)."""
    layers = encoder_layers(model)
    block = layers[layer - 1 if layer > 0 else layer]
    found = {}
    for name, module in block.named_modules():
        for relation, names in PROJECTION_NAMES.items():
            if name.rsplit(".", 1)[-1] in names:
                found.setdefault(relation, module)
    missing = [r for r in RELATION_TYPES if r not in found]
    if missing:
        raise KdbertError(f"{type(model).__name__} layer {layer}: no {'/'.join(missing)} projection found")
    return found


def qkv_width(model: nn.Module) -> int:
    """The width of the last layer's queries (all heads concatenated)."""
    return int(qkv_projections(model, -1)["query"].out_features)


def captured_qkv(model: nn.Module, layer: int, batch: dict, role: str) -> dict[str, torch.Tensor]:
    """Run ``model`` on ``role``'s inputs; the query, key and value (B, L, d) of ``layer``."""
    captured: dict[str, torch.Tensor] = {}
    handles = [module.register_forward_hook(lambda _m, _i, output, name=name: captured.__setitem__(name, output))
               for name, module in qkv_projections(model, layer).items()]
    try:
        model(**model_inputs(model, batch, role))
    finally:
        for handle in handles:
            handle.remove()
    return captured


class RelationLoss:
    """The relation stage's loss: ``{"relation": KL_QQ + KL_KK + KL_VV}`` of teacher layer
    ``teacher_layer`` against the student's last layer, ``heads`` relation heads."""

    uses_teacher = True

    def __init__(self, teacher_layer: int, heads: int):
        self.teacher_layer, self.heads = teacher_layer, heads

    def __call__(self, parts, frozen, batch) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            teacher = captured_qkv(frozen["teacher"], self.teacher_layer, batch, "teacher")
        student = captured_qkv(parts["student"], -1, batch, "student")
        mask = model_batch(batch, "student")["attention_mask"]
        return {"relation": minilm_relation_loss(student, teacher, mask, self.heads)}


# ----------------------------------------------------------------------------- choices
def resolve_relation_layer(choice: str, depth: int) -> int:
    """The teacher layer (1-based) of ``paper``, ``last`` or a layer number, for a teacher of ``depth`` layers."""
    text = str(choice).strip()
    if text == "last":
        return depth
    if text == "paper":
        return depth if depth <= BASE_SIZE_DEPTH else round(depth * 7 / 8)
    if text.isdigit() and 1 <= int(text) <= depth:
        return int(text)
    raise KdbertError(f"--relation-layer {choice}: use paper, last or a layer number 1..{depth}")


def resolve_relation_heads(heads: int | None, student_width: int, teacher_width: int) -> int:
    """``heads`` checked to divide both widths; by default 12 or the largest count below it that does."""
    if heads is not None:
        if student_width % heads or teacher_width % heads:
            raise KdbertError(f"--relation-heads {heads} must divide the student's Q/K/V width {student_width} "
                              f"and the teacher's {teacher_width}")
        return heads
    common = math.gcd(student_width, teacher_width)
    return max(r for r in range(1, DEFAULT_RELATION_HEADS + 1) if common % r == 0)


def relation_stage(name: str, config, ctx: DistillContext, **overrides) -> tuple[Stage, dict]:
    """A stage of :class:`RelationLoss` (teacher layer and heads from ``config``'s :class:`RelationOptions`,
    settings from its optimisation options, ``overrides`` winning), announced, and its report."""
    student = ctx.student.model
    layer = resolve_relation_layer(config.relation_layer, int(ctx.teacher.config.num_hidden_layers))
    student_width, teacher_width = qkv_width(student), qkv_width(ctx.teacher)
    heads = resolve_relation_heads(config.relation_heads, student_width, teacher_width)
    print(f"minilm: relations of teacher layer {layer} -> the student's last layer, {heads} relation heads "
          f"(widths {teacher_width} -> {student_width})")
    stage = Stage(StageConfig.from_options(name, config, **overrides), RelationLoss(layer, heads), ctx.train_set)
    return stage, {"teacher_layer": layer, "student_layer": int(student.config.num_hidden_layers), "heads": heads,
                   "teacher_width": teacher_width, "student_width": student_width, "types": list(RELATION_TYPES)}


class MiniLM(Method):
    name, help = "minilm", "MiniLMv2 self-attention relations, then KD"
    config, general_config = MiniLMConfig, MiniLMGeneralConfig

    def initial_student(self, teacher, spec: TaskSpec, config: MiniLMConfig) -> Student:
        """:func:`kdbert.methods.base.resolve_student`'s student (default: the teacher's first half of layers)."""
        check_kd_loss(config.kd_loss, spec)
        return resolve_student(teacher, spec, config)

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """Stages ``relation`` (unless ``skip_relation``) and ``prediction`` (module docstring)."""
        config, spec = ctx.config, ctx.spec
        report = {"loss": kd_report(config, spec), **student_description(ctx.student), "relation": None}
        stages = []
        if not config.skip_relation:
            stage, report["relation"] = relation_stage(
                "relation", config, ctx, epochs=config.relation_epochs or config.epochs,
                max_steps=config.relation_max_steps, learning_rate=config.relation_lr or config.learning_rate,
                evaluate=False)
            stages.append(stage)
        stages.append(task_stage("prediction", config, kd_matches(config, spec), ctx))
        report["phases"] = {s.config.name: asdict(s.config) for s in stages}
        return Plan({"student": ctx.student.model}, {"teacher": ctx.teacher}, stages, report)

    def general_teacher(self, config: MiniLMGeneralConfig):
        """The pre-trained teacher, as a bare encoder, and its path."""
        return load_encoder(config.teacher)

    def general_student(self, teacher, tokenizer, config: MiniLMGeneralConfig) -> Student:
        """A bare ``BertModel`` from a preset (random or weight-selected) or a config folder."""
        return general_bert_student(teacher, config.student, config.seed, config.student_init)

    def general_data(self, sequences: list[list[int]], tokenizer, teacher, config: MiniLMGeneralConfig):
        """``(dataset, collator, report)``: packed sequences as single-segment BERT inputs."""
        rows = [{"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}
                for ids in sequences]
        return EncodedDataset(rows), PaddingCollator(tokenizer.pad_token_id), {}

    def build_general_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``general``: the relation loss on raw text (linear schedule, no evaluation)."""
        stage, relation = relation_stage("general", ctx.config, ctx, evaluate=False)
        student = ctx.student.model
        report = {"student": {"source": ctx.config.student, "init": ctx.student.origin,
                              "num_hidden_layers": student.config.num_hidden_layers,
                              "hidden_size": student.config.hidden_size,
                              "parameters": sum(p.numel() for p in student.parameters())},
                  "relation": relation}
        return Plan({"student": student}, {"teacher": ctx.teacher}, [stage], report)


METHOD = MiniLM()
