"""The pieces methods share (no method imports another): logit distillation's options and matches,
the student sources of BERT students, and plan helpers.

A method (:class:`kdbert.core.method.Method`) turns the loaded pieces (teacher, student, task data,
typed config) into a :class:`~kdbert.core.method.Plan`; it never contains a training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from kdbert.core.layer_maps import parse_layers
from kdbert.core.loading import check_vocabulary, load_task_model, resolve_model_path
from kdbert.core.matching import Match
from kdbert.core.method import Student
from kdbert.core.pooling import POOLING_KEY
from kdbert.options import UNIT, MethodConfig, TeacherCacheOptions, in_range, option
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.families import bert as students
from kdbert.families.bert import STUDENT_INITS
from kdbert.methods.finetune import FALLBACK_DEFAULTS, TASK_DEFAULTS


def teacher_if_needed(teacher: nn.Module, stages: list) -> dict:
    """``{"teacher": teacher}`` when some stage's loss reads the teacher, else ``{}``."""
    needed = any(getattr(s.loss_fn, "uses_teacher", True) for s in stages)
    return {"teacher": teacher} if needed else {}


def task_training_defaults(task: str) -> dict:
    """Epochs, learning rate and batch size of :data:`kdbert.methods.finetune.TASK_DEFAULTS` for ``task``."""
    epochs, lr, batch = TASK_DEFAULTS.get(task, FALLBACK_DEFAULTS)
    return {"epochs": epochs, "learning_rate": lr, "batch_size": batch}


# ----------------------------------------------------------------------------- logit distillation
TEMPERATURE = in_range(0, 1e4, low_open=True, what="a positive temperature (at most 10000)")


@dataclass
class LogitKDConfig(TeacherCacheOptions, MethodConfig):
    """Options of every method whose task loss is classic KD (KD, PKD, DistilBERT (D), MobileBERT)."""

    alpha: float = option(0.7, "weight of the soft-target term; the hard-label term gets 1 - alpha", UNIT,
                          float, "losses")
    temperature: float = option(20.0, "softmax temperature (default: the method's)", TEMPERATURE, float, "losses")
    kd_loss: str | None = option(None, "KL on softened probabilities (kl, default) or MSE on logits (mse); "
                                       "regression tasks use MSE", type=str, group="losses", choices=("kl", "mse"))
    kd_reduction: str = option("batchmean", "KL reduction: batchmean (per example; kd's default) or mean (per example "
                                            "and class, the BERT-PKD reference's KLDivLoss default and pkd's)", type=str,
                               group="losses", choices=("batchmean", "mean"))

    def task_defaults(self, task: str) -> dict:
        return task_training_defaults(task)


@dataclass
class StoredLogitsOptions:
    """Where the teacher's logits stored per row are kept (:mod:`kdbert.core.teacher_logits`), for a
    student that reads them instead of the teacher's tokens."""

    logits_cache: str | None = option(None, "folder for the teacher's stored logits (default: beside the "
                                            "training file; ~/.cache/kdbert/teacher-logits when that folder is "
                                            "read-only)", group="models")
    teacher_onnx: str | None = option(None, "label the stored logits with this ONNX export of the teacher (e.g. "
                                            "model.int8.onnx of `kdbert export`: several times faster on a CPU; its "
                                            "labels are stored apart from the PyTorch teacher's)", group="models")
    teacher_dtype: str = option("float32", "precision of the PyTorch teacher when it labels the training rows: "
                                           "float32, or bfloat16 (autocast; faster on CPUs with AVX-512 BF16/AMX; "
                                           "outputs stored in float32, apart from the float32 ones)", type=str,
                                group="models", choices=("float32", "bfloat16"))


@dataclass
class StudentLayerOptions:
    """A BERT student made of teacher layers, or a preset's weights selected from the teacher's."""

    student_layers: str | None = option(None, "build the student from these teacher layers (0-based, e.g. 0,1,2) "
                                              "or the first K layers (an integer), as BERT-PKD does", group="student")
    student_init: str | None = option(None, "preset student's weights: random (default, as the papers) or "
                                            "selected from the teacher's (weight selection)", group="student",
                                      choices=STUDENT_INITS)


def logit_matches(alpha: float, temperature: float, kd_loss: str, regression: bool,
                  kd_reduction: str = "batchmean") -> list[Match]:
    """Classic KD's two terms (Hinton et al.), each already weighted; zero-weight terms left out::

        soft = alpha * (T^2 KL(p_t^T || p_s^T) | MSE(z_s, z_t) for kd_loss mse or regression)
        hard = (1 - alpha) * (CE(z_s, y) | MSE(s, gold) for regression)

    ``kd_reduction`` is the KL's: ``batchmean`` (per example) or ``mean`` (per example and
    class, the BERT-PKD reference's; :func:`kdbert.core.losses.kl_div_loss`).
    """
    matches = []
    if alpha > 0:
        loss = "logit_mse" if regression or kd_loss == "mse" else "kl_div"
        options = {} if loss == "logit_mse" else {"temperature": temperature, "reduction": kd_reduction}
        matches.append(Match("soft", "logits", loss, alpha, options=options))
    if alpha < 1:
        matches.append(Match("hard", "logits", "hard_label", 1.0 - alpha, target="labels"))
    return matches


def check_kd_loss(kd_loss: str | None, spec: TaskSpec) -> str:
    """The effective ``kd_loss``: ``mse`` on regression tasks, where ``kl`` is refused."""
    if spec.is_regression and kd_loss == "kl":
        raise KdbertError(f"--kd-loss kl needs class probabilities but {spec.name} is a regression task "
                          "(KD uses MSE to the teacher's score there); drop --kd-loss")
    return "mse" if spec.is_regression else (kd_loss or "kl")


def kd_reduction(config: LogitKDConfig, spec: TaskSpec) -> str:
    """The effective ``kd_reduction``: ``batchmean`` for QA, whose "classes" are a window's positions,
    so that ``mean`` (the BERT-PKD reference's, per class) would divide the KL by the window length."""
    return "batchmean" if spec.question_answering else config.kd_reduction


def kd_matches(config: LogitKDConfig, spec: TaskSpec) -> list[Match]:
    """The soft and hard terms of ``config`` on ``spec`` (:func:`logit_matches`)."""
    return logit_matches(config.alpha, config.temperature, check_kd_loss(config.kd_loss, spec), spec.is_regression,
                         kd_reduction(config, spec))


def kd_report(config: LogitKDConfig, spec: TaskSpec) -> dict:
    return {"alpha": config.alpha, "temperature": config.temperature, "kd_loss": check_kd_loss(config.kd_loss, spec),
            "kd_reduction": kd_reduction(config, spec), "regression": spec.is_regression}


# ----------------------------------------------------------------------------- students
def label_names(model: nn.Module, spec: TaskSpec, teacher: nn.Module | None = None) -> None:
    """Name the student's outputs: the teacher's label names when its head fits, else the task's."""
    if teacher is not None and teacher.config.num_labels == model.config.num_labels:
        model.config.id2label, model.config.label2id = dict(teacher.config.id2label), dict(teacher.config.label2id)
    elif spec.labels is not None:
        model.config.id2label = dict(enumerate(spec.labels))
        model.config.label2id = {label: i for i, label in enumerate(spec.labels)}


def teacher_layer_student(teacher, spec: TaskSpec, value, seed: int) -> Student:
    """A BERT student of the teacher's width from ``--student-layers``: ``K`` (the first K
    teacher layers) or ``0,2,4`` (those 0-based layers), checked against the teacher's depth."""
    depth = int(teacher.config.num_hidden_layers)
    text = str(value).strip()
    parts = parse_layers(text, "--student-layers", "an integer K or a comma-separated list of 0-based teacher "
                                                   "layers such as 0,2,4")
    if len(parts) == 1 and "," not in text:
        if not 1 <= parts[0] <= depth:
            raise KdbertError(f"--student-layers {parts[0]}: a student of the first K layers needs 1 <= K <= {depth}, "
                              "the teacher's depth")
        parts = list(range(parts[0]))
    elif len(parts) > depth:
        raise KdbertError(f"--student-layers {text}: {len(parts)} layers but the teacher has only {depth}")
    for i, layer in enumerate(parts):
        if not 0 <= layer < depth:
            raise KdbertError(f"--student-layers {text}: teacher layer {layer} is out of range; the teacher has "
                              f"{depth} layers, 0-based 0..{depth - 1}")
        if i and layer <= parts[i - 1]:
            raise KdbertError(f"--student-layers {text}: layers must be strictly increasing ({layer} comes after "
                              f"{parts[i - 1]})")
    model = students.init_from_teacher_layers(teacher, parts, spec.num_labels, seed=seed)
    return Student(model, f"teacher layers {parts}", copied_layers=tuple(parts))


def preset_student(name: str, teacher, spec: TaskSpec, init: str | None, seed: int) -> Student:
    """A preset (tinybert4, tinybert6) on the teacher's vocabulary, random or weight-selected."""
    config = students.student_config(name, teacher.config, spec.num_labels)
    model = students.build_student(config, students.task_kind(spec), seed)
    return Student(model, f"{name}, {students.apply_student_init(model, teacher, init)}")


def folder_student(name: str, teacher, spec: TaskSpec, seed: int, own_tokenizer: bool = False) -> Student:
    """An HF folder loaded as the task's model (a sequence classifier with a fresh head when the label
    count differs; a QA model for question answering), refused when its vocabulary is not the teacher's
    unless it reads its ``own_tokenizer``; random parts seeded by ``seed``."""
    path = resolve_model_path(name)
    if Path(path).is_dir() and not own_tokenizer:
        check_vocabulary(path, teacher)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = load_task_model(path, spec, new_head_ok=True)
    return Student(model, path)


def resolve_student(teacher, spec: TaskSpec, config, default_preset: str | None = None,
                    own_tokenizer: bool = False) -> Student:
    """The initial student from ``config.student`` (preset or folder) or ``config.student_layers``.

    Without either: ``default_preset`` when given, else the first half of the teacher's layers.
    ``own_tokenizer``: the folder reads a tokenizer of its own (:func:`folder_student`).
    """
    name, layers = config.student, getattr(config, "student_layers", None)
    init = getattr(config, "student_init", None)
    if name and layers not in (None, ""):
        raise KdbertError("give either --student (a folder or preset) or --student-layers (teacher layers), "
                          "not both")
    if init not in (None, "random") and (layers not in (None, "") or (name and name not in students.PRESETS)):
        raise KdbertError("--student-init applies to a preset student (--student tinybert4 / tinybert6); a folder "
                          "or --student-layers already brings its weights, so drop --student-init")
    name = name or default_preset
    if name in students.PRESETS:
        student = preset_student(name, teacher, spec, init, config.seed)
    elif name:
        student = folder_student(name, teacher, spec, config.seed, own_tokenizer)
    else:
        depth = int(teacher.config.num_hidden_layers)
        student = teacher_layer_student(teacher, spec, layers if layers not in (None, "") else str(max(1, depth // 2)),
                                        config.seed)
    label_names(student.model, spec, teacher)
    return student


def student_description(student: Student) -> dict:
    """Facts about the initial student for the report."""
    config = student.model.config
    return {"student_init": student.origin,
            "student_layers": int(getattr(config, "num_hidden_layers", getattr(config, "n_layers", 0))),
            "student_hidden_size": int(getattr(config, "hidden_size", getattr(config, "dim", 0))),
            "student_parameters": sum(p.numel() for p in student.model.parameters()),
            **({"student_pooling": getattr(config, POOLING_KEY)} if getattr(config, POOLING_KEY, None) else {})}
