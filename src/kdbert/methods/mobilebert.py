"""MobileBERT (Sun et al., 2020): bottleneck students, layer-wise knowledge transfer, pre-training
distillation, then fine-tuning on a task.

General distillation (``kdbert distill general --method mobilebert``, :func:`build_general_plan`)
trains a ``MobileBertForMaskedLM`` student from a pre-trained teacher with an MLM head on raw
text, with one of three strategies (:mod:`kdbert.methods.mobilebert_transfer`, ``--strategy``):

- ``progressive``: one stage per layer (``layer-1`` .. ``layer-L``), layer l at 3x the learning
  rate and earlier layers at 0.3x (``--previous-layers official``, the official code) or frozen
  (``--previous-layers frozen``, the paper's text); then ``pretrain-distill``;
- ``joint``: every layer's terms in one stage, then ``pretrain-distill``;
- ``auxiliary``: one stage, pre-training distillation plus every layer's terms.

All three take the same total steps, ``L x --layer-steps + --pretrain-steps``. Per matched
layer pair the terms are ``100/L * feature_map_mse + 5000/L * mean_transfer + 5/L *
variance_transfer + 1/L * attention_kl`` (weights ``--feature-map-weight`` ...), and
pre-training distillation is the masked-LM cross-entropy to ``r * one-hot + (1 - r) * teacher
distribution`` (``--ground-truth-ratio`` r, 0.5). Teacher and student read the same dynamically
masked input (15 % of the tokens, 80/10/10, as :class:`kdbert.data.masking.DynamicMasker`).
There is no next-sentence prediction: the corpus stage packs sentences without document pairs.

The student is a preset (``mobilebert-matched``, the default: the teacher's depth, inter-block
width and head count, so the teacher plays IB-BERT's role and no projection is needed;
``mobilebert``, ``mobilebert-tiny``; ``ib-bert-matched`` trains an IB-BERT from a BERT teacher's
layers) or a MobileBERT folder. Pooler and MLM-head transform are copied from the teacher where
shapes allow; the embedding layer is fitted to the teacher's (a truncated SVD of its word table,
its LayerNorm folded into NoNorm: :func:`kdbert.families.mobilebert_embeddings.fit_embeddings_to_teacher`), as
the official student starts from IB-BERT's embedding. Embeddings equal to the teacher's stay
frozen during layer-wise transfer (official), otherwise they train as a layer 0. How distinct
the student's embedding outputs of different words start is printed and reported. A student whose inter-block width differs from
the teacher's hidden size needs ``--projection`` (learned maps on the feature maps: a deviation
from the paper, which trains an IB-BERT teacher of the student's width instead). The width
bridge and the stage table are printed before training.

Optimiser: AdamW at ``--learning-rate`` (default 1e-4 for CPU-sized batches of 32) stands in for
the official LAMB at 1.5e-3 with batches of 2048; layer-wise stages warm up over
``--warmup-ratio`` of their steps then stay constant, pre-training distillation warms up then
decays linearly.

Task stage (``kdbert distill task --method mobilebert``): fine-tune a MobileBERT student (a
folder from general distillation, or a preset built on the teacher's vocabulary) on a GLUE task
or the user's data, with optional logit distillation from the fine-tuned teacher (``--alpha``,
default 0: plain fine-tuning, the paper's GLUE protocol; ``--alpha 0.5 --temperature 2`` adds
KD's soft term). The saved student is a plain ``MobileBertForSequenceClassification`` (for question
answering ``MobileBertForQuestionAnswering``, start and end logits distilled like two rows of classes).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from kdbert.core.loading import check_vocabulary, load_task_model, resolve_model_path
from kdbert.core.method import DistillContext, Method, Plan, Student
from kdbert.options import NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT, TrainOptions, in_range, option, override
from kdbert.core.stages import task_stage
from kdbert.data.batching import EncodedDataset
from kdbert.data.masking import MASK_PROB, MASK_SPLIT, DynamicMasker, MlmCollator
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.families import mobilebert as mb
from kdbert.families.mobilebert_embeddings import embedding_output_cosine, strip_prefix
from kdbert.methods import mobilebert_transfer as kt
from kdbert.methods.base import (
    LogitKDConfig,
    check_kd_loss,
    kd_report,
    label_names,
    logit_matches,
    student_description,
    teacher_if_needed,
)

STUDENT_PRESETS = ("mobilebert-matched", "mobilebert", "mobilebert-tiny", "ib-bert-matched")
DEFAULT_STUDENT = "mobilebert-matched"
OPTIMISER_NOTE = "AdamW (the official runs use LAMB at lr 1.5e-3, batch 2048)"


@dataclass
class MobileBertConfig(LogitKDConfig):
    """MobileBERT task stage: fine-tuning, optionally with KD's soft term (``--alpha``)."""

    method = "mobilebert"
    alpha: float = override(LogitKDConfig, "alpha", 0.0)
    temperature: float = override(LogitKDConfig, "temperature", 1.0)


@dataclass
class MobileBertGeneralConfig(TrainOptions):
    """MobileBERT general distillation (module docstring); official factors and schedule shape."""

    method = "mobilebert"
    teacher: str | None = option("default", "pre-trained teacher with an MLM head (`kdbert mlm-head` gives the "
                                            "packaged teacher one)", group="models")
    student: str | None = option(DEFAULT_STUDENT, f"mobilebert: a preset ({', '.join(STUDENT_PRESETS)}), a "
                                                  "MobileBERT config folder (a shape) or a trained MobileBERT folder",
                                 group="models")
    corpus: list | None = option(None, "text files or folders", type=list, group="models")
    max_sequences: int | None = option(None, "use at most N packed sequences", in_range(1, 10**12, int), int, "models")
    save_every: int | None = option(200, "checkpoint every N optimiser steps", POSITIVE_INT, int, "models")
    strategy: str = option("progressive", "mobilebert: knowledge-transfer strategy", group="stages",
                           choices=kt.STRATEGIES)
    layer_steps: int = option(10_000, "mobilebert: optimiser steps per transferred layer (official 10000)",
                              POSITIVE_INT, int, "stages")
    pretrain_steps: int = option(500_000, "mobilebert: steps of pre-training distillation after layer-wise "
                                          "transfer (official 500000; 0 skips it)", in_range(0, 10**9, int), int,
                                 "stages")
    previous_layers: str = option("official", "mobilebert, progressive: earlier layers train at "
                                              "--previous-lr-multiplier (official code) or are frozen (the paper)",
                                  group="stages", choices=kt.PREVIOUS_LAYERS)
    current_lr_multiplier: float = option(kt.CURRENT_LAYER_LR, "mobilebert, progressive: lr multiplier of the layer "
                                                               "in training", POSITIVE, float, "stages")
    previous_lr_multiplier: float = option(kt.PREVIOUS_LAYERS_LR, "mobilebert, progressive: lr multiplier of "
                                                                  "earlier layers", POSITIVE, float, "stages")
    teacher_layers: str | None = option(None, "teacher layer (1-based) for each student layer, e.g. 2,4,6 "
                                              "(default: uniform)", group="layer mapping")
    head_average: bool = option(False, "average groups of teacher heads to the student's head count", type=bool,
                                group="losses")
    projection: bool = option(False, "mobilebert: learned projections where the student's width differs from "
                                     "the teacher's (a deviation from the paper)", type=bool, group="losses")
    feature_map_weight: float = option(kt.FEATURE_MAP_FACTOR, "mobilebert: feature-map factor (divided by L)",
                                       NON_NEGATIVE, float, "losses")
    mean_weight: float = option(kt.MEAN_FACTOR, "mobilebert: mean-transfer factor (divided by L)", NON_NEGATIVE,
                                float, "losses")
    variance_weight: float = option(kt.VARIANCE_FACTOR, "mobilebert: variance-transfer factor (divided by L)",
                                    NON_NEGATIVE, float, "losses")
    attention_weight: float = option(kt.ATTENTION_FACTOR, "mobilebert: attention-transfer factor (divided by L)",
                                     NON_NEGATIVE, float, "losses")
    attention_reduction: str = option("reference", "mobilebert: attention KL over all query rows (reference) or "
                                                   "non-pad ones", group="losses", choices=("reference", "masked-mean"))
    ground_truth_ratio: float = option(kt.GROUND_TRUTH_RATIO, "mobilebert: weight of the one-hot target in "
                                                              "pre-training distillation", UNIT, float, "losses")
    learning_rate: float | None = override(TrainOptions, "learning_rate", 1e-4)
    batch_size: int | None = override(TrainOptions, "batch_size", 32)

    def check(self) -> None:
        super().check()
        if self.epochs is not None or self.max_steps is not None:
            raise KdbertError("--epochs/--max-steps do not apply to --method mobilebert: its length is "
                              "L x --layer-steps + --pretrain-steps; set those instead")


# ----------------------------------------------------------------------------- students
def _refuse_non_mobilebert(path: str, model_type: str) -> None:
    if model_type != "mobilebert":
        raise KdbertError(f"--student {path} is a {model_type!r} model; --method mobilebert needs a MobileBERT "
                          "folder (from `kdbert distill general --method mobilebert`) or a preset "
                          f"({', '.join(STUDENT_PRESETS[:3])})")


def _student_model(teacher, config: MobileBertGeneralConfig) -> Student:
    name = config.student or DEFAULT_STUDENT
    if name == "ib-bert-matched":
        model, report = mb.ib_bert_from_teacher(teacher, seed=config.seed)
        return Student(model, f"ib-bert-matched from the teacher's layers ({len(report['copied'])} tensors copied)")
    if name in STUDENT_PRESETS:
        model = mb.build_mobilebert(mb.mobilebert_config(name, teacher.config), head="masked-lm", seed=config.seed)
        origin = name
    else:
        from transformers import AutoConfig, MobileBertForMaskedLM

        path = Path(str(name)).expanduser()
        if not (path / "config.json").is_file():
            raise KdbertError(f"--student {name}: not a preset ({', '.join(STUDENT_PRESETS)}) nor a folder with a "
                              "config.json")
        model_config = AutoConfig.from_pretrained(path)
        _refuse_non_mobilebert(str(path), model_config.model_type)
        if any(path.glob("*.safetensors")):  # a trained MobileBERT: continue from its weights
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(config.seed)
                model = MobileBertForMaskedLM.from_pretrained(path)
            return Student(model, f"{path} ({mb.describe(model.config)})")
        model_config.architectures = None
        model = mb.build_mobilebert(model_config, head="masked-lm", seed=config.seed)
        origin = str(path)
    copied = mb.init_from_teacher(model, teacher)["copied"]
    return Student(model, f"{origin} ({mb.describe(model.config)}), {len(copied)} tensors copied from the teacher")


def embeddings_from_teacher(student, teacher) -> bool:
    """Whether every student embedding tensor equals the teacher's of the same name (copied)."""
    teacher_params = {strip_prefix(n): p for n, p in teacher.state_dict().items()}
    for name, param in student.named_parameters():
        key = strip_prefix(name)
        if key.startswith("embeddings."):
            source = teacher_params.get(key)
            if source is None or source.shape != param.shape or not torch.equal(source, param.detach()):
                return False
    return True


DISTINCTNESS_TOKENS = 256


def frequent_token_ids(dataset, special_ids, n: int = DISTINCTNESS_TOKENS) -> list[int]:
    """The ``n`` most frequent token ids of ``dataset``'s rows, special ids left out (ties: lower id)."""
    counts = Counter(i for row in dataset.features for i in row["input_ids"])
    for special in special_ids:
        counts.pop(special, None)
    return [i for i, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]]


def embedding_distinctness(student, teacher, tokenizer, dataset) -> dict:
    """How far apart the student's and teacher's embedding outputs of different frequent corpus
    tokens are (:func:`kdbert.families.mobilebert_embeddings.embedding_output_cosine`; 1.0: collapsed)."""
    ids = frequent_token_ids(dataset, tokenizer.all_special_ids)
    if len(ids) < 2:
        return {}
    return {"tokens": len(ids), "student_mean_cosine": round(embedding_output_cosine(student, ids), 4),
            "teacher_mean_cosine": round(embedding_output_cosine(teacher, ids), 4)}


# ----------------------------------------------------------------------------- method
class MobileBert(Method):
    name = "mobilebert"
    help = ("MobileBERT: fine-tuning (+ optional logit KD) of a MobileBERT student; general: "
            "progressive/joint/auxiliary layer-wise transfer + MLM distillation")
    config, general_config = MobileBertConfig, MobileBertGeneralConfig

    def initial_student(self, teacher, spec: TaskSpec, config: MobileBertConfig) -> Student:
        """``MobileBertForSequenceClassification`` (``...ForQuestionAnswering`` for QA) from a MobileBERT
        folder (a fresh head when it has none for the task) or a preset built on the teacher's vocabulary (random, with the
        embedding layer fitted to the teacher's, pooler and classifier copied where shapes allow)."""
        from transformers import AutoConfig

        check_kd_loss(config.kd_loss, spec)
        name = config.student
        if not name:
            raise KdbertError("--method mobilebert needs --student: a folder from `kdbert distill general --method "
                              f"mobilebert` or a preset ({', '.join(STUDENT_PRESETS[:3])})")
        if name in STUDENT_PRESETS[:3]:
            head = "question-answering" if spec.question_answering else "sequence-classification"
            model = mb.build_mobilebert(mb.mobilebert_config(name, teacher.config, spec.num_labels), head, config.seed)
            copied = mb.init_from_teacher(model, teacher)["copied"]
            student = Student(model, f"{name} preset, {len(copied)} tensors copied from the teacher")
        else:
            path = resolve_model_path(name)
            _refuse_non_mobilebert(path, AutoConfig.from_pretrained(path).model_type)
            check_vocabulary(path, teacher)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(config.seed)
                student = Student(load_task_model(path, spec, new_head_ok=True), path)
        label_names(student.model, spec, teacher)
        return student

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``mobilebert``: fine-tuning on gold labels, plus KD's soft term when alpha > 0."""
        config, spec = ctx.config, ctx.spec
        kd_loss = check_kd_loss(config.kd_loss, spec)
        matches = logit_matches(config.alpha, config.temperature, kd_loss, spec.is_regression)
        stages = [task_stage("mobilebert", config, matches, ctx)]
        report = {"loss": kd_report(config, spec), "plain_finetuning": config.alpha == 0,
                  "student_shape": mb.describe(ctx.student.model.config), **student_description(ctx.student)}
        return Plan({"student": ctx.student.model}, teacher_if_needed(ctx.teacher, stages), stages, report=report)

    def general_teacher(self, config: MobileBertGeneralConfig):
        """The pre-trained teacher: ``AutoModelForMaskedLM`` (BERT or an IB-BERT folder), or a bare
        encoder when no stage distils MLM predictions; refused without an MLM head otherwise."""
        from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

        path = resolve_model_path(config.teacher)
        try:
            model_config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as exc:
            first_line = str(exc).splitlines()[0]
            raise KdbertError(f"could not read a model config from --teacher {path}: {first_line}") from None
        if kt.uses_mlm(config):
            kt.require_mlm_head(model_config, config.teacher)
            return AutoModelForMaskedLM.from_pretrained(path), path
        return AutoModel.from_pretrained(path), path

    def general_student(self, teacher, tokenizer, config: MobileBertGeneralConfig) -> Student:
        """A ``MobileBertForMaskedLM`` student (module docstring), checked against the teacher
        (vocabulary, layer map, widths, heads) before any output is written."""
        student = _student_model(teacher, config)
        if student.model.config.vocab_size != teacher.config.vocab_size:
            raise KdbertError(f"--student {config.student} has a vocabulary of {student.model.config.vocab_size} "
                              f"but the teacher's is {teacher.config.vocab_size}; MobileBERT distillation needs the "
                              "teacher's tokenizer")
        kt.resolve_transfer(mb.feature_widths(student.model), mb.feature_widths(teacher), config)
        return student

    def general_data(self, sequences: list[list[int]], tokenizer, teacher, config: MobileBertGeneralConfig):
        """``(dataset, collator, report)``: packed sequences, masked per batch for teacher and student."""
        collator = MlmCollator(tokenizer.pad_token_id, DynamicMasker(tokenizer, MASK_PROB))
        report = {"masking": {"mask_prob": MASK_PROB, "split_mask_random_keep": list(MASK_SPLIT)},
                  "tokens": sum(len(s) for s in sequences)}
        return EncodedDataset([{"input_ids": s} for s in sequences]), collator, report

    def build_general_plan(self, ctx: DistillContext, log=print) -> Plan:
        """The strategy's stages (:data:`kdbert.methods.mobilebert_transfer.GENERATORS`); prints how
        distinct the student's embeddings start, the layer map, the width bridge and the stage table
        before training."""
        config, student = ctx.config, ctx.student.model
        distinct = embedding_distinctness(student, ctx.teacher, ctx.tokenizer, ctx.train_set)
        if distinct:
            log(f"Embedding outputs of the {distinct['tokens']} most frequent corpus tokens, mean cosine between "
                f"different tokens (1.0 = indistinguishable): student {distinct['student_mean_cosine']:.3f}, "
                f"teacher {distinct['teacher_mean_cosine']:.3f}")
        s_widths, t_widths = mb.feature_widths(student), mb.feature_widths(ctx.teacher)
        resolved = kt.resolve_transfer(s_widths, t_widths, config)
        pairs = resolved.layer_pairs
        frozen_embeddings = embeddings_from_teacher(student, ctx.teacher)

        def make_stage(name, matches, train, steps, schedule):
            return task_stage(name, config, matches, ctx, max_steps=steps, schedule=schedule, train=train,
                              evaluate=False, eval_every=None)

        stages = kt.GENERATORS[config.strategy](pairs, config, make_stage, frozen_embeddings)
        bridge, table = kt.width_bridge(s_widths, t_widths, pairs), kt.stage_table(stages)
        log(f"{resolved.describe()}\nMobileBERT {config.strategy} knowledge transfer, {OPTIMISER_NOTE}\n"
            f"{bridge}\n{table}")
        report = {"strategy": config.strategy, "width_bridge": bridge, "stage_table": table,
                  "layer_pairs": [list(p) for p in pairs], "embeddings_from_teacher": frozen_embeddings,
                  "embedding_distinctness": distinct,
                  "previous_layers": config.previous_layers if config.strategy == "progressive" else None,
                  "total_steps": sum(s.config.max_steps for s in stages), "optimiser": OPTIMISER_NOTE,
                  "student": {"shape": mb.describe(student.config),
                              "parameters": sum(p.numel() for p in student.parameters())}}
        return Plan({"student": student}, {"teacher": ctx.teacher}, stages, report=report)


METHOD = MobileBert()
