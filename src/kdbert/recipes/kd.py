"""Classic knowledge distillation (Hinton et al., 2015) on a task: one stage, two loss terms.

Loss per batch (both terms already weighted, logged as ``soft`` and ``hard``)::

    classification, kd_loss "kl":  soft = alpha * T^2 * KL(softmax(z_t/T) || softmax(z_s/T))
                                   hard = (1 - alpha) * CE(z_s, y)
    classification, kd_loss "mse": soft = alpha * MSE(z_s, z_t)          (logits, no T)
                                   hard = (1 - alpha) * CE(z_s, y)
    regression (STS-B):            soft = alpha * MSE(s, t)              (student vs teacher output)
                                   hard = (1 - alpha) * MSE(s, gold)

KL is ``batchmean`` (:func:`kdbert.losses.kl_div_loss`); a term whose weight is 0 is left out,
and with ``alpha = 0`` the teacher is never run (plain fine-tuning).

Defaults: ``alpha = 0.7``, ``T = 20``: the vanilla-KD configuration of the BERT-PKD reference
code (its ``kd`` preset), whose BERT6 results are the KD baseline in the reference table.
Other anchors: torchdistill's GLUE KD uses T = 3 with 0.1 on the soft term (``--recipe
kd/torchdistill``); DistilBERT's task distillation alpha 0.5, T 2; TextBrewer T 4..8. With
``--temperature 10`` KD is exactly BERT-PKD with beta = 0. Epochs, learning rate and batch size
default to :data:`kdbert.finetune.TASK_DEFAULTS` (tuned for ~20M-parameter students).

The student (:func:`resolve_student`, shared with PKD): ``--student`` is an HF folder (any
sequence-classification architecture; a new head is added when its label count differs) or a
preset (tinybert4, tinybert6: random init, the teacher's vocabulary); ``--student-layers`` is
``K`` (the first K teacher layers) or a list ``0,2,4`` of 0-based teacher layers copied into a
BERT student of the teacher's width (embeddings and pooler copied, fresh classifier). Default:
the first half of the teacher's layers, as the PKD paper's vanilla-KD students.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.finetune import FALLBACK_DEFAULTS, TASK_DEFAULTS
from kdbert.losses import kl_div_loss, logit_mse, regression_mse
from kdbert.models import students
from kdbert.models.loading import load_sequence_classifier, resolve_model_path
from kdbert.models.trace import model_inputs
from kdbert.recipes.base import DistillContext, Plan
from kdbert.trainer import Stage, StageConfig

DEFAULT_ALPHA = 0.7
DEFAULT_TEMPERATURE = 20.0
DEFAULT_KD_LOSS = "kl"

# Options of `distill task` that belong to one method only (dest -> methods that read it).
# A recipe refuses those it does not read instead of silently ignoring them.
METHOD_OPTIONS = {
    "alpha": ("kd", "pkd", "distilbert"),
    "temperature": ("tinybert", "kd", "pkd", "distilbert"),
    "kd_loss": ("kd", "pkd", "distilbert"),
    "beta": ("pkd",),
    "patience_reduction": ("pkd",),
    "layer_map": ("tinybert", "pkd"),
    "teacher_layers": ("tinybert", "pkd"),
    "student_layers": ("tinybert", "kd", "pkd"),
    "student_init": ("tinybert", "kd", "pkd"),
    "attention_reduction": ("tinybert",),
    "head_average": ("tinybert",),
    "hidden_projection": ("tinybert",),
    "regression_target": ("tinybert",),
    "no_embedding_loss": ("tinybert",),
    "no_attention_loss": ("tinybert",),
    "no_hidden_loss": ("tinybert",),
    "no_prediction_loss": ("tinybert",),
    "skip_intermediate": ("tinybert",),
    "intermediate_epochs": ("tinybert",),
    "intermediate_lr": ("tinybert",),
    "intermediate_max_steps": ("tinybert",),
}


def flag(dest: str) -> str:
    """The CLI spelling of an option dest: ``kd_loss`` -> ``--kd-loss``."""
    return "--" + dest.replace("_", "-")


def refuse_foreign_options(options: dict, method: str) -> None:
    """Refuse options set for another method (they would be silently ignored)."""
    for dest, methods in METHOD_OPTIONS.items():
        value = options.get(dest)
        if method not in methods and value not in (None, False):
            users = "/".join(methods)
            raise KdbertError(f"{flag(dest)} is a {users} option and --method {method} does not use it; "
                              f"drop it or use --method {methods[0]}")


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class LogitKD:
    """Weights of the logit-distillation loss (see the module docstring)."""

    alpha: float
    temperature: float
    kd_loss: str = DEFAULT_KD_LOSS
    regression: bool = False

    @property
    def uses_teacher(self) -> bool:
        return self.alpha > 0


def number_option(options: dict, dest: str, default: float, low: float | None = 0.0, high: float | None = None,
                  low_open: bool = False) -> float:
    """``options[dest]`` (``None`` -> ``default``) checked against [low, high] (low excluded with ``low_open``)."""
    value = options.get(dest)
    value = default if value is None else value
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise KdbertError(f"{flag(dest)} {value!r} is not a number") from None
    too_low = low is not None and (value <= low if low_open else value < low)
    if too_low or (high is not None and value > high) or value != value:
        bounds = f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'}]"
        raise KdbertError(f"{flag(dest)} {value} is out of range; use a value in {bounds}")
    return value


def logit_kd_settings(options: dict, spec: TaskSpec, alpha: float = DEFAULT_ALPHA,
                      temperature: float = DEFAULT_TEMPERATURE) -> LogitKD:
    """Validated :class:`LogitKD` from ``options`` (``alpha``, ``temperature``, ``kd_loss``),
    the given defaults filling ``None``."""
    kd_loss = options.get("kd_loss") or DEFAULT_KD_LOSS
    if kd_loss not in ("kl", "mse"):
        raise KdbertError(f"--kd-loss {kd_loss!r} is unknown; use kl or mse")
    if spec.is_regression and options.get("kd_loss") == "kl":
        raise KdbertError(f"--kd-loss kl needs class probabilities but {spec.name} is a regression task "
                          "(KD uses MSE to the teacher's score there); drop --kd-loss")
    return LogitKD(
        alpha=number_option(options, "alpha", alpha, 0.0, 1.0),
        temperature=number_option(options, "temperature", temperature, 0.0, None, low_open=True),
        kd_loss="mse" if spec.is_regression else kd_loss,
        regression=spec.is_regression,
    )


def stage_config(name: str, options: dict, epochs: float, learning_rate: float, batch_size: int,
                 **fixed) -> StageConfig:
    """One stage's optimisation settings: the CLI options (``None`` -> the given defaults), checked."""

    def pick(dest, default):
        return default if options.get(dest) is None else options[dest]

    config = StageConfig(
        name, epochs=pick("epochs", epochs), max_steps=options.get("max_steps"),
        learning_rate=pick("learning_rate", learning_rate), warmup_ratio=pick("warmup_ratio", 0.1),
        weight_decay=pick("weight_decay", 0.01), batch_size=pick("batch_size", batch_size),
        grad_accum=pick("grad_accum", 1), eval_every=options.get("eval_every"), **fixed,
    )
    for dest, value, ok in (("epochs", config.epochs, config.epochs > 0),
                            ("learning_rate", config.learning_rate, config.learning_rate > 0),
                            ("batch_size", config.batch_size, config.batch_size >= 1),
                            ("grad_accum", config.grad_accum, config.grad_accum >= 1),
                            ("warmup_ratio", config.warmup_ratio, 0 <= config.warmup_ratio < 1),
                            ("weight_decay", config.weight_decay, config.weight_decay >= 0),
                            ("max_steps", config.max_steps, config.max_steps is None or config.max_steps >= 1)):
        if not ok:
            raise KdbertError(f"{flag(dest)} {value} is out of range; it must be positive "
                              "(warmup ratio in [0, 1), weight decay >= 0)")
    return config


def task_stage_config(name: str, spec: TaskSpec, options: dict) -> StageConfig:
    """:func:`stage_config` with :data:`kdbert.finetune.TASK_DEFAULTS` for the task."""
    epochs, lr, batch = TASK_DEFAULTS.get(spec.name, FALLBACK_DEFAULTS)
    return stage_config(name, options, epochs, lr, batch)


# ----------------------------------------------------------------------------- losses
def logit_kd_terms(student_logits: torch.Tensor, teacher_logits: torch.Tensor | None, labels: torch.Tensor,
                   kd: LogitKD) -> dict[str, torch.Tensor]:
    """``{"soft": ..., "hard": ...}``, each already weighted; zero-weight terms are left out.

    Logits (B, C) (regression: (B, 1)), labels (B,) class ids or gold scores.
    """
    terms = {}
    if kd.alpha > 0:
        if kd.regression or kd.kd_loss == "mse":
            soft = logit_mse(student_logits, teacher_logits)
        else:
            soft = kl_div_loss(student_logits, teacher_logits, kd.temperature)
        terms["soft"] = kd.alpha * soft
    if kd.alpha < 1:
        hard = regression_mse(student_logits, labels) if kd.regression else F.cross_entropy(student_logits, labels)
        terms["hard"] = (1.0 - kd.alpha) * hard
    return terms


def logits_of(model, batch: dict) -> torch.Tensor:
    return model(**model_inputs(model, batch)).logits


def kd_loss_fn(kd: LogitKD):
    """The stage loss ``(modules, frozen, batch) -> {"soft", "hard"}`` of classic KD."""

    def loss(parts, frozen, batch):
        teacher_logits = None
        if kd.uses_teacher:
            with torch.no_grad():
                teacher_logits = logits_of(frozen["teacher"], batch)
        return logit_kd_terms(logits_of(parts["student"], batch), teacher_logits, batch["labels"], kd)

    return loss


# ----------------------------------------------------------------------------- student
def teacher_depth(teacher) -> int:
    return int(teacher.config.num_hidden_layers)


def parse_student_layers(value, depth: int) -> list[int]:
    """``"K"`` -> first K layers; ``"0,2,4"`` -> those 0-based layers; checked against ``depth``."""
    text = str(value).strip()
    try:
        parts = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise KdbertError(f"--student-layers {text!r} is not an integer K or a comma-separated list of "
                          "0-based teacher layers such as 0,2,4") from None
    if not parts:
        raise KdbertError("--student-layers is empty; give K (the first K teacher layers) or a list such as 0,2,4")
    if len(parts) == 1 and "," not in text:
        k = parts[0]
        if not 1 <= k <= depth:
            raise KdbertError(f"--student-layers {k}: a student of the first K layers needs 1 <= K <= {depth}, "
                              f"the teacher's depth")
        return list(range(k))
    if len(parts) > depth:
        raise KdbertError(f"--student-layers {text}: {len(parts)} layers but the teacher has only {depth}")
    for i, layer in enumerate(parts):
        if not 0 <= layer < depth:
            raise KdbertError(f"--student-layers {text}: teacher layer {layer} is out of range; the teacher has "
                              f"{depth} layers, 0-based 0..{depth - 1}")
        if i and layer <= parts[i - 1]:
            raise KdbertError(f"--student-layers {text}: layers must be strictly increasing ({layer} comes after "
                              f"{parts[i - 1]})")
    return parts


def _label_names(student, teacher) -> None:
    """Give the student the teacher's label names (the task's label vocabulary)."""
    if teacher.config.num_labels == student.config.num_labels:
        student.config.id2label = dict(teacher.config.id2label)
        student.config.label2id = dict(teacher.config.label2id)


def resolve_student(teacher, spec: TaskSpec, options: dict, default_layers: list[int] | None = None):
    """The initial student from ``--student`` (folder or preset) or ``--student-layers``.

    Without either, ``default_layers`` (0-based teacher layers) is used, or the first half of the
    teacher's layers when it is None. Returns a sequence classifier with the task's label count.
    """
    student_opt, layers_opt = options.get("student"), options.get("student_layers")
    if student_opt and layers_opt not in (None, ""):
        raise KdbertError("give either --student (a folder or preset) or --student-layers (teacher layers), "
                          "not both")
    students.refuse_student_init_without_preset(options)
    seed = options.get("seed", 42)
    init = None
    if student_opt:
        name = str(student_opt)
        if name in students.PRESETS:
            config = students.student_config(name, teacher.config, spec.num_labels)
            student = students.build_student(config, "regression" if spec.is_regression else "classification",
                                             seed=seed)
            init = f"{name}, {students.apply_student_init(student, teacher, options.get('student_init'))}"
        else:
            path = resolve_model_path(name)
            student = load_sequence_classifier(path, spec.num_labels, new_head_ok=True)
    else:
        depth = teacher_depth(teacher)
        if layers_opt not in (None, ""):
            layers = parse_student_layers(layers_opt, depth)
        else:
            layers = default_layers if default_layers is not None else list(range(max(1, depth // 2)))
        student = students.init_from_teacher_layers(teacher, layers, spec.num_labels, seed=seed)
    _label_names(student, teacher)
    # a plain attribute (not in the config, so never saved) for the report
    student.kdbert_init = f"teacher layers {layers}" if not student_opt else (init or str(student_opt))
    return student


def student_description(student, options: dict) -> dict:
    """Facts about the initial student for the report."""
    return {"student_init": getattr(student, "kdbert_init", str(options.get("student"))),
            "student_layers": int(student.config.num_hidden_layers),
            "student_hidden_size": int(student.config.hidden_size),
            "student_parameters": sum(p.numel() for p in student.parameters())}


# ----------------------------------------------------------------------------- recipe
def initial_student(teacher, spec: TaskSpec, options: dict):
    """KD's initial student (see :func:`resolve_student`); refuses other methods' options first."""
    refuse_foreign_options(options, "kd")
    logit_kd_settings(options, spec)  # refuse bad settings before anything is built
    task_stage_config("kd", spec, options)
    return resolve_student(teacher, spec, options)


def build_task_plan(ctx: DistillContext) -> Plan:
    """One stage ``kd`` with :func:`kd_loss_fn`."""
    refuse_foreign_options(ctx.options, "kd")
    kd = logit_kd_settings(ctx.options, ctx.spec)
    stage = Stage(task_stage_config("kd", ctx.spec, ctx.options), kd_loss_fn(kd), ctx.train_set)
    return Plan({"student": ctx.student}, {"teacher": ctx.teacher} if kd.uses_teacher else {}, [stage],
                report={"loss": asdict(kd), **student_description(ctx.student, ctx.options)})
