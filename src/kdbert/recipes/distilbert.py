"""DistilBERT (Sanh et al., 2019): student initialisation, general distillation, and "DistilBERT (D)".

Three entry points:

:func:`init_student` (``kdbert init-student``)
    A ``DistilBertForMaskedLM`` folder (+ tokenizer) built from a BERT teacher's layers with
    :func:`kdbert.models.students.init_distilbert_student`: every other layer by default, HF's
    ``[0, 2, 4, 7, 9, 11]`` with ``--layer-choice hf-bert-base``, or ``--layers 0,2,4``. The MLM
    head is copied when the teacher has one (``BertForMaskedLM``/``BertForPreTraining``).

:func:`run_general` (``kdbert distill general --method distilbert``)
    Pre-training distillation on raw text, one stage run by the shared trainer (resumable)::

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

    Masking (:class:`DynamicMasker`): per batch, ``ceil(0.15 * n)`` of the ``n`` maskable tokens
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
    teacher, :mod:`kdbert.recipes.kd`'s loss: alpha * T^2 * KL + (1 - alpha) * CE. Defaults
    alpha 0.5, T 2 (the reference's task-distillation script, ``run_squad_w_distillation.py``);
    ``--alpha 0`` is plain fine-tuning of the student (the paper's DistilBERT GLUE numbers).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from kdbert.data.batching import EncodedDataset
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.io import save_hf_folder
from kdbert.losses import cosine_hidden_loss, kl_div_loss, masked_lm_cross_entropy
from kdbert.models import students
from kdbert.models.loading import load_tokenizer, resolve_model_path
from kdbert.models.trace import trace
from kdbert.recipes import kd
from kdbert.recipes.base import DistillContext, Plan
from kdbert.trainer import RunConfig, Stage, Trainer, prepare_output_dir

TASK_ALPHA = 0.5
TASK_TEMPERATURE = 2.0

GENERAL_TEMPERATURE = 2.0
GENERAL_ALPHA_CE = 5.0
GENERAL_ALPHA_MLM = 2.0
GENERAL_ALPHA_COS = 1.0
GENERAL_EPOCHS = 1.0
GENERAL_LEARNING_RATE = 1e-4
GENERAL_BATCH_SIZE = 32
GENERAL_MAX_SEQ_LEN = 128
GENERAL_MAX_GRAD_NORM = 5.0
GENERAL_SAVE_EVERY = 200  # optimiser steps between checkpoints (there is no evaluation to tie them to)
MASK_PROB = 0.15
MASK_SPLIT = (0.8, 0.1, 0.1)  # [MASK], random token, unchanged

INIT_REPORT = "init_student_report.json"
GENERAL_REPORT = "general_report.json"


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


def _layers_option(layers) -> list[int] | None:
    if layers in (None, ""):
        return None
    if isinstance(layers, (list, tuple)):
        return [int(x) for x in layers]
    try:
        return [int(x) for x in str(layers).split(",") if x.strip()]
    except ValueError:
        raise KdbertError(f"--layers {layers!r} is not a comma-separated list of 0-based teacher layers "
                          "such as 0,2,4") from None


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
    chosen = _layers_option(layers)
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


# ----------------------------------------------------------------------------- task time: DistilBERT (D)
def initial_student(teacher, spec: TaskSpec, options: dict):
    """``DistilBertForSequenceClassification`` from the ``--student`` DistilBERT folder (fresh classifier)."""
    from transformers import DistilBertForSequenceClassification

    kd.refuse_foreign_options(options, "distilbert")
    kd.logit_kd_settings(options, spec, TASK_ALPHA, TASK_TEMPERATURE)
    kd.task_stage_config("distilbert", spec, options)
    name = options.get("student")
    if not name:
        raise KdbertError("--method distilbert needs --student: a DistilBERT folder from `kdbert init-student` "
                          "or `kdbert distill general --method distilbert`")
    if name in students.PRESETS:
        raise KdbertError(f"--student {name} is a BERT preset; --method distilbert needs a DistilBERT folder "
                          "from `kdbert init-student`")
    path = resolve_model_path(name)
    config = _config(path)
    _refuse_non_distilbert(path, config, "--method distilbert")
    problem_type = "regression" if spec.is_regression else "single_label_classification"
    try:
        student = DistilBertForSequenceClassification.from_pretrained(
            path, num_labels=spec.num_labels, problem_type=problem_type, ignore_mismatched_sizes=True)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"could not load --student {path} as DistilBERT: {str(exc).splitlines()[0]}") from None
    if teacher.config.num_labels == spec.num_labels:
        student.config.id2label = dict(teacher.config.id2label)
        student.config.label2id = dict(teacher.config.label2id)
    student.kdbert_init = path
    return student


def build_task_plan(ctx: DistillContext) -> Plan:
    """One stage ``distilbert`` with :func:`kdbert.recipes.kd.kd_loss_fn` (alpha 0.5, T 2 by default)."""
    kd.refuse_foreign_options(ctx.options, "distilbert")
    logit_kd = kd.logit_kd_settings(ctx.options, ctx.spec, TASK_ALPHA, TASK_TEMPERATURE)
    stage = Stage(kd.task_stage_config("distilbert", ctx.spec, ctx.options), kd.kd_loss_fn(logit_kd), ctx.train_set)
    report = {"loss": asdict(logit_kd), "plain_finetuning": logit_kd.alpha == 0,
              **kd.student_description(ctx.student, ctx.options)}
    return Plan({"student": ctx.student}, {"teacher": ctx.teacher} if logit_kd.uses_teacher else {}, [stage],
                report=report)


# ----------------------------------------------------------------------------- masking
def token_weights(sequences: list[list[int]], vocab_size: int, smoothing: float) -> torch.Tensor:
    """``max(count, 1) ** -smoothing`` per vocabulary id, counts over ``sequences`` (reference:
    ``token_counts.py`` + ``mlm_smoothing``)."""
    counts = np.bincount(np.fromiter((t for s in sequences for t in s), dtype=np.int64), minlength=vocab_size)
    return torch.from_numpy(np.maximum(counts[:vocab_size], 1).astype(np.float64) ** -smoothing).float()


class DynamicMasker:
    """BERT-style dynamic masking of a padded batch (see the module docstring).

    ``__call__(input_ids, attention_mask, generator=None) -> (masked_ids, labels)`` with labels
    -100 except at the chosen positions. Special tokens and padding are never chosen.
    """

    def __init__(self, tokenizer, mask_prob: float = MASK_PROB, weights: torch.Tensor | None = None,
                 split: tuple[float, float, float] = MASK_SPLIT):
        if tokenizer.mask_token_id is None:
            raise KdbertError("the teacher's tokenizer has no [MASK] token; masked-LM distillation needs one")
        special = sorted(set(tokenizer.all_special_ids))
        self.special_ids = torch.tensor(special, dtype=torch.long)
        self.mask_id = tokenizer.mask_token_id
        self.random_ids = torch.tensor([i for i in range(len(tokenizer)) if i not in set(special)], dtype=torch.long)
        self.mask_prob = mask_prob
        self.weights = weights
        self.split = split

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generator=None):
        eligible = attention_mask.bool() & ~torch.isin(input_ids, self.special_ids)
        labels = torch.full_like(input_ids, -100)
        masked = input_ids.clone()
        n = math.ceil(self.mask_prob * int(eligible.sum()))
        if n == 0:
            return masked, labels
        probs = eligible.reshape(-1).float()
        if self.weights is not None:
            probs = probs * self.weights[input_ids.reshape(-1)]
        chosen = torch.multinomial(probs, n, replacement=False, generator=generator)
        flat, flat_labels = masked.view(-1), labels.view(-1)
        flat_labels[chosen] = flat[chosen]
        draw = torch.rand(n, generator=generator)
        to_mask = chosen[draw < self.split[0]]
        to_random = chosen[(draw >= self.split[0]) & (draw < self.split[0] + self.split[1])]
        flat[to_mask] = self.mask_id
        picks = torch.randint(len(self.random_ids), (len(to_random),), generator=generator)
        flat[to_random] = self.random_ids[picks]
        return masked, labels


class MlmCollator:
    """Pad ``{"input_ids"}`` features and mask them: ``input_ids``, ``attention_mask``, ``labels``."""

    def __init__(self, pad_token_id: int, masker: DynamicMasker):
        self.pad_token_id = pad_token_id
        self.masker = masker

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(features), longest), dtype=torch.long)
        for row, feature in enumerate(features):
            ids[row, :len(feature["input_ids"])] = torch.tensor(feature["input_ids"])
            mask[row, :len(feature["input_ids"])] = 1
        masked, labels = self.masker(ids, mask)
        return {"input_ids": masked, "attention_mask": mask, "labels": labels}


# ----------------------------------------------------------------------------- general distillation
@dataclass(frozen=True)
class GeneralLoss:
    """Weights of DistilBERT's triple loss."""

    temperature: float = GENERAL_TEMPERATURE
    alpha_ce: float = GENERAL_ALPHA_CE
    alpha_mlm: float = GENERAL_ALPHA_MLM
    alpha_cos: float = GENERAL_ALPHA_COS

    @property
    def uses_teacher(self) -> bool:
        return self.alpha_ce > 0 or self.alpha_cos > 0


def general_loss_settings(options: dict) -> GeneralLoss:
    settings = GeneralLoss(
        temperature=kd.number_option(options, "temperature", GENERAL_TEMPERATURE, 0.0, None, low_open=True),
        alpha_ce=kd.number_option(options, "alpha_ce", GENERAL_ALPHA_CE),
        alpha_mlm=kd.number_option(options, "alpha_mlm", GENERAL_ALPHA_MLM),
        alpha_cos=kd.number_option(options, "alpha_cos", GENERAL_ALPHA_COS),
    )
    if not (settings.alpha_ce or settings.alpha_mlm or settings.alpha_cos):
        raise KdbertError("--alpha-ce, --alpha-mlm and --alpha-cos are all 0; give at least one a positive weight")
    return settings


def general_loss_terms(student_trace, teacher_trace, batch: dict, loss: GeneralLoss) -> dict[str, torch.Tensor]:
    """``{"ce", "mlm", "cos"}`` already weighted; zero-weight terms are left out."""
    mask = batch["attention_mask"]
    terms = {}
    if loss.alpha_ce > 0:
        terms["ce"] = loss.alpha_ce * kl_div_loss(student_trace.logits, teacher_trace.logits, loss.temperature,
                                                  mask=mask)
    if loss.alpha_mlm > 0:
        terms["mlm"] = loss.alpha_mlm * masked_lm_cross_entropy(student_trace.logits, batch["labels"])
    if loss.alpha_cos > 0:
        terms["cos"] = loss.alpha_cos * cosine_hidden_loss(student_trace.hidden_states[-1],
                                                           teacher_trace.hidden_states[-1], mask)
    return terms


def general_loss_fn(loss: GeneralLoss):
    def fn(parts, frozen, batch):
        s = trace(parts["student"], batch, with_attention=False)
        t = None
        if loss.uses_teacher:
            with torch.no_grad():
                t = trace(frozen["teacher"], batch, with_attention=False)
        return general_loss_terms(s, t, batch, loss)

    return fn


def _general_student(teacher, tokenizer, options: dict):
    """``(student, description)``: the ``--student`` DistilBertForMaskedLM folder or every other teacher layer."""
    from transformers import DistilBertForMaskedLM

    from kdbert.distill import check_same_vocabulary

    name = options.get("student")
    if not name:
        layers = students.DISTILBERT_LAYER_CHOICES["every-other"](teacher.config.num_hidden_layers)
        return students.init_distilbert_student(teacher, layers), f"every other teacher layer {layers}"
    path = resolve_model_path(name)
    config = _config(path)
    _refuse_non_distilbert(path, config, "DistilBERT general distillation")
    if "DistilBertForMaskedLM" not in (config.architectures or []):
        raise KdbertError(f"--student {path} has no DistilBERT MLM head (architectures: {config.architectures}); "
                          "make the student with `kdbert init-student`")
    if config.vocab_size != teacher.config.vocab_size:
        raise KdbertError(f"--student {path} has a vocabulary of {config.vocab_size} but the teacher's has "
                          f"{teacher.config.vocab_size}; make the student from this teacher with `kdbert init-student`")
    if any((Path(path) / f).is_file() for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json")):
        check_same_vocabulary(tokenizer, load_tokenizer(path), path)
    return DistilBertForMaskedLM.from_pretrained(path), path


def run_general(options: dict, output_dir: str, resume: bool = False, overwrite: bool = False) -> dict:
    """DistilBERT general distillation (module docstring); returns the report written to
    ``general_report.json`` (``wall_seconds`` included)."""
    from transformers import set_seed

    from kdbert.data.corpus import corpus_files, pack_sequences
    from kdbert.distill import stage_losses

    started = time.time()
    seed = options.get("seed", 42)
    if options.get("student_init") not in (None, "random"):
        raise KdbertError("--student-init is a tinybert option; DistilBERT students start from teacher layers "
                          "(`kdbert init-student`): drop it or use --method tinybert")
    loss = general_loss_settings(options)
    smoothing = options.get("mlm_smoothing")
    if smoothing is not None:
        smoothing = kd.number_option(options, "mlm_smoothing", 0.7, 0.0, 1.0)
    config = kd.stage_config("general", options, GENERAL_EPOCHS, GENERAL_LEARNING_RATE, GENERAL_BATCH_SIZE,
                             evaluate=False, max_grad_norm=GENERAL_MAX_GRAD_NORM)
    if not options.get("corpus"):
        raise KdbertError("--corpus is required: text files or folders to distil on")
    corpus = corpus_files(options["corpus"])
    teacher, teacher_path = load_bert_teacher(options.get("teacher"), need_mlm_head=True)
    tokenizer = load_tokenizer(teacher_path)
    set_seed(seed)
    student, student_init = _general_student(teacher, tokenizer, options)
    if loss.alpha_cos > 0 and student.config.dim != teacher.config.hidden_size:
        raise KdbertError(f"the student's width {student.config.dim} differs from the teacher's "
                          f"{teacher.config.hidden_size}; the cosine term needs equal widths: set --alpha-cos 0 "
                          "or use a student from `kdbert init-student`")
    limit = min(teacher.config.max_position_embeddings, student.config.max_position_embeddings)
    max_seq_len = options.get("max_seq_len") or min(GENERAL_MAX_SEQ_LEN, limit)
    if not 3 <= max_seq_len <= limit:
        raise KdbertError(f"--max-seq-len {max_seq_len} is out of range; the models take 3..{limit} tokens")

    identity = {"command": "distill general", "method": "distilbert",
                **{k: v for k, v in options.items() if k not in ("resume", "overwrite", "func", "no_progress")}}
    out = prepare_output_dir(output_dir, identity, resume, overwrite)
    sequences = pack_sequences(tokenizer, corpus, max_seq_len, options.get("max_sequences"), seed,
                               cache_path=out / "corpus_cache.safetensors")
    weights = token_weights(sequences, teacher.config.vocab_size, smoothing) if smoothing is not None else None
    masker = DynamicMasker(tokenizer, MASK_PROB, weights)
    dataset = EncodedDataset([{"input_ids": s} for s in sequences])
    run = RunConfig(str(out), seed=seed, mixed_precision=options.get("mixed_precision") or "no",
                    keep_checkpoints=options.get("keep_checkpoints") or 2,
                    save_every=options.get("save_every") or GENERAL_SAVE_EVERY,
                    progress=not options.get("no_progress", False))
    trainer = Trainer({"student": student}, [Stage(config, general_loss_fn(loss), dataset)], run,
                      MlmCollator(tokenizer.pad_token_id, masker),
                      frozen={"teacher": teacher} if loss.uses_teacher else {}, tokenizer=tokenizer)
    train_report = trainer.train(resume=resume)
    report = {
        "method": "distilbert", "teacher": teacher_path, "student_init": student_init, "options": identity,
        "loss": asdict(loss),
        "masking": {"mask_prob": MASK_PROB, "split_mask_random_keep": list(MASK_SPLIT), "mlm_smoothing": smoothing},
        "sequences": len(sequences), "tokens": sum(len(s) for s in sequences), "max_seq_len": max_seq_len,
        "student_parameters": sum(p.numel() for p in student.parameters()),
        "stages": train_report.get("stages"), "stage_losses": stage_losses(out / "log.jsonl"),
        "train_seconds": train_report.get("train_seconds"), "wall_seconds": round(time.time() - started, 1),
    }
    (out / GENERAL_REPORT).write_text(json.dumps(report, indent=2, default=str))
    return report
