"""DistilBERT (Sanh et al., 2019): student initialisation, general distillation, and "DistilBERT (D)".

Three entry points:

:func:`init_student` (``kdbert init-student``)
    A ``DistilBertForMaskedLM`` folder (+ tokenizer) built from a BERT teacher's layers with
    :func:`kdbert.families.bert.init_distilbert_student`: every other layer by default, HF's
    ``[0, 2, 4, 7, 9, 11]`` with ``--layer-choice hf-bert-base``, or ``--layers 0,2,4``. The MLM
    head is copied when the teacher has one (``BertForMaskedLM``/``BertForPreTraining``).

:func:`build_general_plan` (``kdbert distill general --method distilbert``)
    Pre-training distillation on raw text, one stage of three matches run by the shared trainer
    (resumable)::

        L = alpha_ce * T^2 * KL(teacher MLM || student MLM)   over every non-pad token (batchmean)
          + alpha_mlm * CE_mlm                                  over the masked tokens
          + alpha_cos * mean(1 - cos(h_s, h_t))                 last hidden layer, non-pad tokens

    logged as ``ce``, ``mlm`` and ``cos`` (already weighted). Teacher and student see the same
    masked input, as in the reference. Defaults: the reference's DistilBERT run, alpha_ce 5,
    alpha_mlm 2, alpha_cos 1, T 2, max_seq_len 128 (or the models' limit). The teacher needs an MLM head (``kdbert
    mlm-head`` adds one); the student is a folder from ``kdbert init-student`` or, without
    ``--student``, every other teacher layer. No evaluation; the student is saved as a
    ``DistilBertForMaskedLM`` folder with ``general_report.json``.

    Optimisation defaults are set for CPU-sized batches: 1 epoch, batch 32, learning rate 1e-4,
    gradient clipping 5.0 (reference). The reference's 5e-4 (warm-up 0.05, no weight decay,
    3 epochs) belongs to batches of ~4K sequences (5 x 50 accumulation x 8 GPUs); at 32
    sequences a step that large moves a teacher-initialised student too far (square-root
    scaling gives ~5e-5), so 1e-4 is used. ``--recipe distilbert/general`` sets the reference's
    warm-up 0.05 and weight decay 0. The reference's AdamW betas (0.9, 0.98) are not exposed.

    Masking (:class:`kdbert.data.masking.DynamicMasker`): per batch, ``ceil(0.15 * n)`` of the ``n`` maskable tokens
    (not special, not padding) are drawn without replacement, uniformly or, with
    ``--mlm-smoothing s`` (reference 0.7), with probability proportional to ``count^-s`` (counts
    over the packed corpus) so rare tokens are masked more often. Of the chosen tokens 80 %
    become ``[MASK]``, 10 % a random non-special token, 10 % stay. The reference takes 15 % of
    all non-pad tokens ([CLS]/[SEP] included in the count but never chosen); here the count is
    the maskable tokens, so exactly ~15 % of them are masked. Random draws use the global torch
    RNG, which the trainer seeds and checkpoints, so a resumed run masks as the uninterrupted one.

Task time, "DistilBERT (D)" (``distill task --method distilbert``)
    Fine-tune a DistilBERT student (``--student``: a folder from ``init-student`` or general
    distillation; a fresh classifier is added) with logit distillation from the fine-tuned
    teacher, :mod:`kdbert.methods.kd`'s loss: alpha * T^2 * KL + (1 - alpha) * CE. Defaults
    alpha 0.5, T 2 (the reference's task-distillation script, ``run_squad_w_distillation.py``);
    ``--alpha 0`` is plain fine-tuning of the student (the paper's DistilBERT GLUE numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from kdbert.core.atomic_io import save_hf_folder
from kdbert.core.layer_maps import parse_layers
from kdbert.core.loading import check_vocabulary, load_tokenizer, resolve_model_path
from kdbert.core.matching import Match
from kdbert.core.method import DistillContext, Method, Plan, Student
from kdbert.core.pooling import pool_like_folder
from kdbert.options import NON_NEGATIVE, POSITIVE_INT, UNIT, TrainOptions, in_range, option, override
from kdbert.core.stages import task_stage
from kdbert.data.batching import EncodedDataset
from kdbert.data.masking import MASK_PROB, MASK_SPLIT, DynamicMasker, MlmCollator, token_weights
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.families import bert as students
from kdbert.methods.base import (
    TEMPERATURE,
    LogitKDConfig,
    check_kd_loss,
    kd_matches,
    kd_report,
    label_names,
    student_description,
    teacher_if_needed,
)

GENERAL_SAVE_EVERY = 200  # optimiser steps between checkpoints (there is no evaluation to tie them to)

INIT_REPORT = "init_student_report.json"
GENERAL_REPORT = "general_report.json"


@dataclass
class DistilBertConfig(LogitKDConfig):
    """DistilBERT (D): task distillation into a DistilBERT student (alpha 0.5, T 2)."""

    method = "distilbert"
    alpha: float = override(LogitKDConfig, "alpha", 0.5)
    temperature: float = override(LogitKDConfig, "temperature", 2.0)


@dataclass
class DistilBertGeneralConfig(TrainOptions):
    """DistilBERT general distillation (module docstring); CPU-sized optimisation defaults."""

    method = "distilbert"
    teacher: str | None = option(None, "pre-trained BERT teacher with an MLM head (see `kdbert mlm-head`)",
                                 group="models")
    student: str | None = option(None, "a folder from `kdbert init-student` (default: every other teacher layer)",
                                 group="models")
    corpus: list | None = option(None, "text files or folders", type=list, group="models")
    max_sequences: int | None = option(None, "use at most N packed sequences", in_range(1, 10**12, int), int, "models")
    temperature: float = option(2.0, "distilbert: temperature (default 2)", TEMPERATURE, float, "losses")
    alpha_ce: float = option(5.0, "distilbert: weight of the KL term (default 5)", NON_NEGATIVE, float, "losses")
    alpha_mlm: float = option(2.0, "distilbert: weight of the MLM term (default 2)", NON_NEGATIVE, float, "losses")
    alpha_cos: float = option(1.0, "distilbert: weight of the cosine term (default 1)", NON_NEGATIVE, float, "losses")
    mlm_smoothing: float | None = option(None, "distilbert: mask rare tokens more often, with probability ~ "
                                               "count^-S (reference 0.7; default: uniform)", UNIT, float, "losses")
    save_every: int | None = option(GENERAL_SAVE_EVERY, "checkpoint every N optimiser steps", POSITIVE_INT, int,
                                    "models")
    epochs: float | None = override(TrainOptions, "epochs", 1.0)
    learning_rate: float | None = override(TrainOptions, "learning_rate", 1e-4)
    batch_size: int | None = override(TrainOptions, "batch_size", 32)

    max_grad_norm = 5.0  # the reference's gradient clipping

    def check(self) -> None:
        super().check()
        if not (self.alpha_ce or self.alpha_mlm or self.alpha_cos):
            raise KdbertError("--alpha-ce, --alpha-mlm and --alpha-cos are all 0; give at least one a positive weight")

    @property
    def uses_teacher(self) -> bool:
        return self.alpha_ce > 0 or self.alpha_cos > 0


# ----------------------------------------------------------------------------- loading
def _config(path: str):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"could not read a model config from {path}: {str(exc).splitlines()[0]}") from None


def has_mlm_head(config) -> bool:
    """Whether a saved model's config says it carries BERT's MLM head."""
    return any(a.endswith(("ForMaskedLM", "ForPreTraining")) for a in (config.architectures or []))


def load_bert_teacher(name_or_path: str | None, need_mlm_head: bool, option: str = "--teacher"):
    """A BERT teacher as ``BertForMaskedLM`` (when it has an MLM head) or ``BertModel``.

    ``need_mlm_head`` refuses a teacher without one (general distillation's KL and MLM terms
    are over the MLM vocabulary).
    """
    from transformers import BertForMaskedLM, BertModel

    path = resolve_model_path(name_or_path)
    config = _config(path)
    if config.model_type != "bert":
        raise KdbertError(f"{option} {path} is a {config.model_type!r} model; DistilBERT students are built from "
                          "and distilled from BERT teachers")
    head = has_mlm_head(config)
    if need_mlm_head and not head:
        raise KdbertError(
            f"{option} {path} has no MLM head (architectures: {config.architectures}); DistilBERT general "
            "distillation needs one: run `kdbert mlm-head` on it and pass that folder as --teacher")
    try:
        return (BertForMaskedLM if head else BertModel).from_pretrained(path), path
    except (OSError, ValueError) as exc:
        raise KdbertError(f"could not load {path} as a BERT model: {str(exc).splitlines()[0]}") from None


def _refuse_non_distilbert(path: str, config, what: str) -> None:
    if config.model_type != "distilbert":
        raise KdbertError(
            f"--student {path} is a {config.model_type!r} model, not DistilBERT; {what} needs a DistilBERT "
            "student: make one with `kdbert init-student --from TEACHER --output-dir DIR` (or `kdbert distill "
            "general --method distilbert`)")


# ----------------------------------------------------------------------------- init-student
def init_student(teacher: str, output_dir: str, layers=None, layer_choice: str | None = None,
                 overwrite: bool = False) -> dict:
    """Build a ``DistilBertForMaskedLM`` from ``teacher``'s layers and save it with the tokenizer.

    ``layers`` (0-based list or "0,2,4") and ``layer_choice`` (a key of
    ``DISTILBERT_LAYER_CHOICES``) are exclusive; neither means every other layer. Returns the
    report also written to ``init_student_report.json``.
    """
    out = Path(output_dir)
    if layers not in (None, "") and layer_choice:
        raise KdbertError("give either --layers or --layer-choice, not both")
    if layer_choice and layer_choice not in students.DISTILBERT_LAYER_CHOICES:
        raise KdbertError(f"--layer-choice {layer_choice!r} is unknown; use one of "
                          f"{', '.join(students.DISTILBERT_LAYER_CHOICES)}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise KdbertError(f"--output-dir {out} is not empty; choose another or pass --overwrite")
    model, path = load_bert_teacher(teacher, need_mlm_head=False, option="--from")
    depth = model.config.num_hidden_layers
    chosen = None if layers in (None, "") else parse_layers(layers, "--layers", "a comma-separated list of "
                                                                                 "0-based teacher layers such as 0,2,4")
    if chosen is None:
        choice = students.DISTILBERT_LAYER_CHOICES[layer_choice or "every-other"]
        chosen = choice(depth) if callable(choice) else list(choice)
        option = f"--layer-choice {layer_choice or 'every-other'}"
    else:
        option = f"--layers {layers}"
    try:
        student = students.init_distilbert_student(model, chosen)
    except KdbertError as exc:
        raise KdbertError(f"{option}: {exc}") from None
    tokenizer = load_tokenizer(path)
    report = {"teacher": path, "teacher_layers": depth, "layers": chosen, "mlm_head_copied": has_mlm_head(model.config),
              "parameters": sum(p.numel() for p in student.parameters())}
    save_hf_folder(student, tokenizer, out, {INIT_REPORT: report})
    return {"output_dir": str(out), **report}


# ----------------------------------------------------------------------------- general distillation
def general_matches(config: DistilBertGeneralConfig) -> list[Match]:
    """DistilBERT's triple loss as matches (zero-weight terms left out): ``ce`` the token-level
    KL over non-pad tokens, ``mlm`` the masked-LM cross-entropy, ``cos`` the last hidden layer."""
    matches = []
    if config.alpha_ce > 0:
        matches.append(Match("ce", "mlm_logits", "token_kl_div", config.alpha_ce,
                             options={"temperature": config.temperature}))
    if config.alpha_mlm > 0:
        matches.append(Match("mlm", "mlm_logits", "masked_lm_cross_entropy", config.alpha_mlm, target="labels"))
    if config.alpha_cos > 0:
        matches.append(Match("cos", "hidden", "cosine", config.alpha_cos, student_layer=-1, teacher_layer=-1))
    return matches


# ----------------------------------------------------------------------------- method
class DistilBert(Method):
    name = "distilbert"
    help = "DistilBERT: logit distillation while fine-tuning a DistilBERT student; general: MLM KL + MLM + cosine"
    config, general_config = DistilBertConfig, DistilBertGeneralConfig

    def initial_student(self, teacher, spec: TaskSpec, config: DistilBertConfig) -> Student:
        """``DistilBertForSequenceClassification`` from the ``--student`` DistilBERT folder (fresh classifier,
        pooling as the folder says; ``DistilBertForQuestionAnswering`` for question answering)."""
        from transformers import DistilBertForQuestionAnswering, DistilBertForSequenceClassification

        check_kd_loss(config.kd_loss, spec)
        name = config.student
        if not name:
            raise KdbertError("--method distilbert needs --student: a DistilBERT folder from `kdbert init-student` "
                              "or `kdbert distill general --method distilbert`")
        if name in students.PRESETS:
            raise KdbertError(f"--student {name} is a BERT preset; --method distilbert needs a DistilBERT folder "
                              "from `kdbert init-student`")
        path = resolve_model_path(name)
        _refuse_non_distilbert(path, _config(path), "--method distilbert")
        check_vocabulary(path, teacher)
        problem_type = "regression" if spec.is_regression else "single_label_classification"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            try:
                if spec.question_answering:
                    model = DistilBertForQuestionAnswering.from_pretrained(path)
                else:
                    model = DistilBertForSequenceClassification.from_pretrained(
                        path, num_labels=spec.num_labels, problem_type=problem_type, ignore_mismatched_sizes=True)
                    pool_like_folder(model, path)
            except (OSError, ValueError) as exc:
                first_line = str(exc).splitlines()[0]
                raise KdbertError(f"could not load --student {path} as DistilBERT: {first_line}") from None
        label_names(model, spec, teacher)
        return Student(model, path)

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``distilbert``: KD's matches (alpha 0.5, T 2 by default)."""
        config, spec = ctx.config, ctx.spec
        matches = kd_matches(config, spec)
        stages = [task_stage("distilbert", config, matches, ctx)]
        report = {"loss": kd_report(config, spec), "plain_finetuning": config.alpha == 0,
                  **student_description(ctx.student)}
        return Plan({"student": ctx.student.model}, teacher_if_needed(ctx.teacher, stages), stages, report=report)

    def general_teacher(self, config: DistilBertGeneralConfig):
        """The pre-trained BERT teacher, which needs an MLM head (the KL and MLM terms are over its vocabulary)."""
        return load_bert_teacher(config.teacher, need_mlm_head=True)

    def general_student(self, teacher, tokenizer, config: DistilBertGeneralConfig) -> Student:
        """The ``--student`` DistilBertForMaskedLM folder, or every other teacher layer."""
        from transformers import DistilBertForMaskedLM

        if config.student is None:
            layers = students.DISTILBERT_LAYER_CHOICES["every-other"](teacher.config.num_hidden_layers)
            return Student(students.init_distilbert_student(teacher, layers), f"every other teacher layer {layers}")
        path = resolve_model_path(config.student)
        model_config = _config(path)
        _refuse_non_distilbert(path, model_config, "DistilBERT general distillation")
        if "DistilBertForMaskedLM" not in (model_config.architectures or []):
            raise KdbertError(f"--student {path} has no DistilBERT MLM head (architectures: "
                              f"{model_config.architectures}); make the student with `kdbert init-student`")
        check_vocabulary(path, teacher, tokenizer)
        return Student(DistilBertForMaskedLM.from_pretrained(path), path)

    def general_data(self, sequences: list[list[int]], tokenizer, teacher, config: DistilBertGeneralConfig):
        """``(dataset, collator, report)``: packed sequences, masked per batch (:class:`MlmCollator`)."""
        smoothing = config.mlm_smoothing
        weights = token_weights(sequences, teacher.config.vocab_size, smoothing) if smoothing is not None else None
        collator = MlmCollator(tokenizer.pad_token_id, DynamicMasker(tokenizer, MASK_PROB, weights))
        report = {"masking": {"mask_prob": MASK_PROB, "split_mask_random_keep": list(MASK_SPLIT),
                              "mlm_smoothing": smoothing}, "tokens": sum(len(s) for s in sequences)}
        return EncodedDataset([{"input_ids": s} for s in sequences]), collator, report

    def build_general_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``general`` (no evaluation; gradient clipping 5.0 as the reference)."""
        config = ctx.config
        if config.alpha_cos > 0 and ctx.student.model.config.dim != ctx.teacher.config.hidden_size:
            raise KdbertError(f"the student's width {ctx.student.model.config.dim} differs from the teacher's "
                              f"{ctx.teacher.config.hidden_size}; the cosine term needs equal widths: set "
                              "--alpha-cos 0 or use a student from `kdbert init-student`")
        stages = [task_stage("general", config, general_matches(config), ctx, evaluate=False,
                             max_grad_norm=config.max_grad_norm, eval_every=None)]
        report = {"loss": {"temperature": config.temperature, "alpha_ce": config.alpha_ce,
                           "alpha_mlm": config.alpha_mlm, "alpha_cos": config.alpha_cos},
                  "student_parameters": sum(p.numel() for p in ctx.student.model.parameters())}
        return Plan({"student": ctx.student.model}, teacher_if_needed(ctx.teacher, stages), stages, report=report)


METHOD = DistilBert()
