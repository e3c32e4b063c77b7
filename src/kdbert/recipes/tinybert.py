"""TinyBERT (Jiao et al., 2020): transformer distillation, general and task-specific.

Task distillation is two stages run by the shared trainer (:func:`build_task_plan`):

1. ``intermediate``: match the teacher's embeddings, pre-softmax attention scores and hidden
   states through the layer map g(m), with learnable projections W_e / W_h (d_s -> d_t)::

       L = MSE(E_s W_e, E_t) + sum_m MSE(A_s^m, A_t^g(m)) + sum_m MSE(H_s^m W_h, H_t^g(m))

   all weights 1, constant learning rate, no warmup, no evaluation (as the reference code).
2. ``prediction``: soft cross-entropy to the teacher's logits (temperature T, default 1), or
   MSE to the *gold* score for regression (STS-B), linear schedule, evaluated on dev.

General distillation (:func:`run_general`) is stage 1 on raw text from a pre-trained teacher;
its result (a bare ``BertModel`` folder) is the starting student of task distillation.

Differences from the reference code (huawei-noah TinyBERT), on purpose:
  - the per-task defaults (intermediate epochs, max_seq_len) ARE applied; the reference
    assigns them to misspelt attributes, so they never take effect;
  - one projection per matched layer by default (the v2 checkpoints), with ``shared`` for the
    v1 code's single ``fit_dense`` (which it also applies to the embeddings: we do the same);
  - the attention loss can use a masked mean instead of the -1e2 threshold trick;
  - the last partial batch is used, and runs resume from checkpoints.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from kdbert import losses
from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.errors import KdbertError
from kdbert.finetune import task_loss
from kdbert.mapping import LayerMap, resolve
from kdbert.models import students
from kdbert.models.trace import model_inputs, trace
from kdbert.recipes.base import DistillContext, Plan
from kdbert.trainer import RunConfig, Stage, StageConfig, Trainer, prepare_output_dir

# ----------------------------------------------------------------------------- defaults
# Settings every GLUE task shares (paper + reference code): intermediate stage lr 5e-5,
# prediction stage 3 epochs at 3e-5, batch 32, temperature 1.
COMMON_TASK_DEFAULTS: dict[str, float | int] = {
    "intermediate_lr": 5e-5,
    "epochs": 3,
    "learning_rate": 3e-5,
    "batch_size": 32,
    "temperature": 1.0,
}
# The reference's ``default_params`` table (intermediate epochs, max_seq_len). WNLI is not in
# it (the paper does not report WNLI): it gets RTE's settings, the closest small pair task.
TASK_DEFAULTS: dict[str, dict[str, int]] = {
    "cola": {"intermediate_epochs": 50, "max_seq_len": 64},
    "sst2": {"intermediate_epochs": 10, "max_seq_len": 64},
    "mrpc": {"intermediate_epochs": 20, "max_seq_len": 128},
    "stsb": {"intermediate_epochs": 20, "max_seq_len": 128},
    "rte": {"intermediate_epochs": 20, "max_seq_len": 128},
    "mnli": {"intermediate_epochs": 5, "max_seq_len": 128},
    "qqp": {"intermediate_epochs": 5, "max_seq_len": 128},
    "qnli": {"intermediate_epochs": 10, "max_seq_len": 128},
    "wnli": {"intermediate_epochs": 20, "max_seq_len": 128},
}
# Users' own data sets: the paper's generic 20 intermediate epochs; length from the task spec.
FALLBACK_TASK_DEFAULTS: dict[str, int] = {"intermediate_epochs": 20}

# General distillation: 3 epochs, sequences of 128, and BERT pre-training's batch 256 and
# lr 1e-4 (the paper: "other hyper-parameters the same as BERT pre-training"; the reference
# script's own argparse default is lr 5e-5, batch 32).
GENERAL_DEFAULTS: dict[str, float | int | str] = {
    "student": "tinybert4",
    "epochs": 3,
    "learning_rate": 1e-4,
    "batch_size": 256,
    "max_seq_len": 128,
}

DEFAULT_STUDENT = "tinybert4"
LAYER_MAPS = ("uniform", "top", "bottom", "explicit")
ATTENTION_REDUCTIONS = ("tinybert-reference", "masked-mean")
PROJECTIONS = ("per-layer", "shared")
INTERMEDIATE_TERMS = ("embedding", "attention", "hidden")


def task_defaults(task_name: str) -> dict:
    """The TinyBERT defaults of a task (GLUE name; anything else gets the fallback)."""
    return {**COMMON_TASK_DEFAULTS, **TASK_DEFAULTS.get(task_name, FALLBACK_TASK_DEFAULTS)}


def _option(options: dict, key: str, default):
    value = options.get(key)
    return default if value is None else value


# ----------------------------------------------------------------------------- students
def _parse_ints(text, option: str) -> list[int]:
    if isinstance(text, (list, tuple)):
        values = list(text)
    else:
        values = [part.strip() for part in str(text).split(",") if part.strip()]
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError):
        raise KdbertError(f"{option} {text!r}: expected comma-separated integers, e.g. 3,6,9,12") from None


def _student_layers(text) -> list[int]:
    """``"0,1,2"`` -> those 0-based teacher layers; a single integer ``"3"`` -> the first 3."""
    values = _parse_ints(text, "--student-layers")
    if not values:
        raise KdbertError("--student-layers is empty; give 0-based teacher layers (0,1,2) or a count (3)")
    is_count = len(values) == 1 and "," not in str(text)
    if is_count and values[0] < 1:
        raise KdbertError(f"--student-layers {text}: a layer count must be at least 1")
    return list(range(values[0])) if is_count else values


def _check_vocab(path, vocab_size: int, teacher_vocab: int) -> None:
    if vocab_size != teacher_vocab:
        raise KdbertError(
            f"--student {path} has a vocabulary of {vocab_size} tokens but the teacher's has {teacher_vocab}; "
            "distil into a student that shares the teacher's tokenizer (a preset, --student-layers, or a "
            "general-distilled student of this teacher)"
        )


def initial_student(teacher, spec, options: dict):
    """The student task distillation starts from (a ``...ForSequenceClassification``).

    ``options["student"]``: a preset (tinybert4, tinybert6; default tinybert4) built on the
    teacher's vocabulary, or an HF folder (e.g. from :func:`run_general`) loaded with a fresh
    classifier for the task. ``options["student_layers"]`` instead copies teacher layers
    (``"0,1,2"``, or ``"3"`` for the first three). Random parts are seeded by ``options["seed"]``.
    """
    seed = _option(options, "seed", 42)
    name = options.get("student")
    num_labels = spec.num_labels
    students.refuse_student_init_without_preset(options)
    if options.get("student_layers") not in (None, ""):
        if name not in (None, ""):
            raise KdbertError("give either --student or --student-layers, not both")
        return students.init_from_teacher_layers(teacher, _student_layers(options["student_layers"]),
                                                 num_labels, seed=seed)
    name = name or DEFAULT_STUDENT
    if name in students.PRESETS:
        config = students.student_config(name, teacher.config, num_labels)
        if spec.labels is not None:
            config.id2label = dict(enumerate(spec.labels))
            config.label2id = {label: i for i, label in enumerate(spec.labels)}
        student = students.build_student(config, "regression" if spec.is_regression else "classification", seed)
        student.kdbert_init = f"{name}, {students.apply_student_init(student, teacher, options.get('student_init'))}"
        return student
    path = Path(str(name)).expanduser()
    if not path.is_dir():
        raise KdbertError(
            f"--student {name}: not a preset ({', '.join(students.PRESETS)}) nor an existing model folder"
        )
    if not (path / "config.json").is_file():
        raise KdbertError(f"--student {path}: the folder has no config.json; pass a folder saved with save_pretrained")
    from transformers import AutoConfig, AutoModelForSequenceClassification

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"--student {path}: could not read its config.json: {str(exc).splitlines()[0]}") from None
    _check_vocab(path, getattr(config, "vocab_size", None), teacher.config.vocab_size)
    extra = {}
    if spec.labels is not None:
        extra = dict(id2label=dict(enumerate(spec.labels)), label2id={label: i for i, label in enumerate(spec.labels)})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=num_labels, ignore_mismatched_sizes=True,
                problem_type="regression" if spec.is_regression else "single_label_classification", **extra)
        except (OSError, ValueError) as exc:
            raise KdbertError(f"--student {path}: could not load it as a classifier: {str(exc).splitlines()[0]}") from None


# ----------------------------------------------------------------------------- layer map
def _rounded_uniform(m: int, n: int) -> list[int]:
    """g(m) = ceil(m * N / M): the uniform map when N is not a multiple of M (6 -> 4: 2,3,5,6)."""
    return [math.ceil(i * n / m) for i in range(1, m + 1)]


def resolve_layer_map(options: dict, m: int, n: int) -> tuple[LayerMap, str]:
    """The layer map from ``layer_map`` / ``teacher_layers`` options and its description.

    No choice means ``uniform``; when the teacher depth is not a multiple of the student's,
    that default becomes the rounded uniform map ceil(m*N/M) (an explicit map, announced).
    """
    method = options.get("layer_map")
    teacher_layers = options.get("teacher_layers")
    explicit = _parse_ints(teacher_layers, "--teacher-layers") if teacher_layers not in (None, "") else None
    if method is None:
        if explicit is not None:
            method = "explicit"
        elif m >= 1 and n % m != 0:
            explicit = _rounded_uniform(m, n)
            return resolve("explicit", m, n, explicit=explicit), "uniform-rounded"
        else:
            method = "uniform"
    if method not in LAYER_MAPS:
        raise KdbertError(f"--layer-map {method}: not a TinyBERT layer map; use one of {', '.join(LAYER_MAPS)}")
    if method == "explicit" and explicit is None:
        raise KdbertError("--layer-map explicit needs --teacher-layers, one teacher layer (1-based) per student layer")
    if method != "explicit" and explicit is not None:
        raise KdbertError(f"--teacher-layers is only used with --layer-map explicit, not {method}")
    if method == "uniform" and (m < 1 or n % m != 0):
        raise KdbertError(
            f"--layer-map uniform needs the teacher depth ({n}) to be a multiple of the student's ({m}); "
            f"pass --teacher-layers {','.join(map(str, _rounded_uniform(m, n)))} or --layer-map top"
        )
    return resolve(method, m, n, explicit=explicit), method


# ----------------------------------------------------------------------------- intermediate loss
@dataclass(frozen=True)
class IntermediateSpec:
    """What stage 1 (and general distillation) matches."""

    layer_map: LayerMap
    embedding: bool = True
    attention: bool = True
    hidden: bool = True
    projection: str = "per-layer"
    attention_reduction: str = "tinybert-reference"
    head_average: bool = False

    @property
    def terms(self) -> list[str]:
        return [t for t in INTERMEDIATE_TERMS if getattr(self, t)]


def projection_name(student_layer: int, mode: str) -> str:
    """Key of the projection applied to ``student.hidden_states[student_layer]``."""
    if mode == "shared":
        return "shared"
    return "embeddings" if student_layer == 0 else f"layer_{student_layer}"


def build_projections(spec: IntermediateSpec, d_student: int, d_teacher: int, init_std: float = 0.02,
                      seed: int = 0) -> nn.ModuleDict:
    """Learnable d_s -> d_t maps: W_e and one W_h per matched layer, or one shared (v1 ``fit_dense``,
    applied to the embeddings too). Initialised as BERT weights (normal(0, init_std), zero bias)."""
    names = []
    if spec.embedding:
        names.append(projection_name(0, spec.projection))
    if spec.hidden:
        names += [projection_name(s, spec.projection) for s, _ in spec.layer_map.pairs if s > 0]
    projections = nn.ModuleDict()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for name in dict.fromkeys(names):
            linear = nn.Linear(d_student, d_teacher)
            nn.init.normal_(linear.weight, std=init_std)
            nn.init.zeros_(linear.bias)
            projections[name] = linear
    return projections


def load_saved_projections(projections: nn.ModuleDict, folder) -> list[str]:
    """Copy same-named, same-shaped projections saved next to a student (``projections.safetensors``
    of a general-distilled student) into ``projections``; returns the names loaded.

    The reference v1 code keeps ``fit_dense`` inside the student, so task distillation starts
    from the general stage's projection; this does the same when the modes match.
    """
    path = Path(str(folder)) / "projections.safetensors"
    if not path.is_file():
        return []
    from safetensors.torch import load_file

    saved = {k.removeprefix("projections."): v for k, v in load_file(str(path)).items() if k.startswith("projections.")}
    loaded = []
    with torch.no_grad():
        for name, module in projections.items():
            weight, bias = saved.get(f"{name}.weight"), saved.get(f"{name}.bias")
            if weight is not None and bias is not None and weight.shape == module.weight.shape:
                module.weight.copy_(weight)
                module.bias.copy_(bias)
                loaded.append(name)
    return loaded


def intermediate_terms(student_trace, teacher_trace, projections: nn.ModuleDict, spec: IntermediateSpec) -> dict:
    """Stage-1 loss terms from two traces (all weights 1, as the paper and reference)."""
    terms = {}
    if spec.embedding:
        terms["embedding"] = losses.hidden_mse(student_trace.hidden_states[0], teacher_trace.hidden_states[0],
                                               projections[projection_name(0, spec.projection)])
    if spec.attention:
        terms["attention"] = sum(
            losses.attention_mse(student_trace.attention_scores[s], teacher_trace.attention_scores[t],
                                 student_trace.attention_mask, spec.attention_reduction, spec.head_average)
            for s, t in spec.layer_map.attention_pairs)
    if spec.hidden:
        terms["hidden"] = sum(
            losses.hidden_mse(student_trace.hidden_states[s], teacher_trace.hidden_states[t],
                              projections[projection_name(s, spec.projection)])
            for s, t in spec.layer_map.pairs if s > 0)
    return terms


def intermediate_loss(spec: IntermediateSpec):
    """``loss_fn(parts, frozen, batch)`` of stage 1: traces the teacher (no grad) and the student."""

    def loss_fn(parts, frozen, batch):
        with torch.no_grad():
            teacher_trace = trace(frozen["teacher"], batch, with_attention=spec.attention)
        student_trace = trace(parts["student"], batch, with_attention=spec.attention)
        projections = parts["projections"] if "projections" in parts else nn.ModuleDict()
        return intermediate_terms(student_trace, teacher_trace, projections, spec)

    return loss_fn


REGRESSION_TARGETS = ("gold", "teacher")


def prediction_loss(regression: bool, temperature: float, gold_only: bool, regression_target: str = "gold"):
    """``loss_fn`` of stage 2: soft CE to the teacher, or the task loss (``gold_only``); for
    regression, MSE to the gold score (the reference) or, with ``regression_target="teacher"``,
    to the teacher's predicted score (what augmented rows need: their gold score is the
    original sentence's)."""

    def loss_fn(parts, frozen, batch):
        student = parts["student"]
        if gold_only:
            return {"task": task_loss(student, batch, regression)}
        logits = student(**model_inputs(student, batch)).logits
        if regression and regression_target == "gold":
            return {"prediction": losses.regression_mse(logits, batch["labels"])}
        teacher = frozen["teacher"]
        with torch.no_grad():
            teacher_logits = teacher(**model_inputs(teacher, batch)).logits
        if regression:
            return {"prediction": losses.regression_mse(logits, teacher_logits.squeeze(-1))}
        return {"prediction": losses.soft_cross_entropy(logits, teacher_logits, temperature)}

    return loss_fn


def _intermediate_spec(options: dict, student, teacher, terms_on: dict, log=print) -> tuple[IntermediateSpec, dict]:
    """Resolve and validate the layer map and the stage-1 options; print the map's table."""
    reduction = _option(options, "attention_reduction", "tinybert-reference")
    if reduction not in ATTENTION_REDUCTIONS:
        raise KdbertError(f"--attention-reduction {reduction}: use one of {', '.join(ATTENTION_REDUCTIONS)}")
    projection = _option(options, "hidden_projection", "per-layer")
    if projection not in PROJECTIONS:
        raise KdbertError(f"--hidden-projection {projection}: use one of {', '.join(PROJECTIONS)}")
    head_average = bool(options.get("head_average"))
    s_cfg, t_cfg = student.config, teacher.config
    m, n = s_cfg.num_hidden_layers, t_cfg.num_hidden_layers
    layer_map, method = resolve_layer_map(options, m, n)
    h_s, h_t = s_cfg.num_attention_heads, t_cfg.num_attention_heads
    if terms_on["attention"] and not head_average and h_s != h_t:
        raise KdbertError(f"the student has {h_s} attention heads and the teacher {h_t}: the attention loss needs "
                          "equal counts; pass --head-average or --no-attention-loss")
    layer_map.validate(m, n, h_s, h_t, needs_attention=terms_on["attention"], head_average=head_average)
    if terms_on["embedding"] and layer_map.pairs[0] != (0, 0):
        raise KdbertError("the TinyBERT layer map must start with embeddings -> embeddings (0 -> 0)")
    log(f"TinyBERT layer map ({method}, student {m} layers, teacher {n}):\n{layer_map.table()}")
    spec = IntermediateSpec(layer_map, projection=projection, attention_reduction=reduction,
                            head_average=head_average, **terms_on)
    report = {"method": method, "pairs": [list(p) for p in layer_map.pairs],
              "attention_pairs": [list(p) for p in layer_map.attention_pairs], "table": layer_map.table()}
    return spec, report


def _projection_report(projections: nn.ModuleDict, mode: str) -> dict:
    return {"mode": mode, "count": len(projections), "names": list(projections.keys()),
            "parameters": sum(p.numel() for p in projections.parameters())}


# ----------------------------------------------------------------------------- task plan
def build_task_plan(ctx: DistillContext) -> Plan:
    """TinyBERT task distillation: [intermediate, prediction] (see the module docstring).

    Options (argparse dest names; None = the task's TinyBERT default): intermediate_epochs,
    intermediate_lr, intermediate_max_steps (stage 1); epochs, learning_rate, max_steps,
    warmup_ratio, eval_every (stage 2); batch_size, grad_accum, weight_decay (both stages);
    temperature; layer_map, teacher_layers, attention_reduction, head_average,
    hidden_projection; regression_target (gold or teacher); ablations no_embedding_loss,
    no_attention_loss, no_hidden_loss, no_prediction_loss, skip_intermediate.
    """
    options, spec = ctx.options, ctx.spec
    defaults = task_defaults(spec.name)
    temperature = float(_option(options, "temperature", defaults["temperature"]))
    if temperature <= 0:
        raise KdbertError(f"--temperature {temperature}: must be positive")
    terms_on = {t: not options.get(f"no_{t}_loss") for t in INTERMEDIATE_TERMS}
    run_intermediate = any(terms_on.values()) and not options.get("skip_intermediate")
    gold_only = bool(options.get("no_prediction_loss"))
    regression_target = _option(options, "regression_target", "gold")
    if regression_target not in REGRESSION_TARGETS:
        raise KdbertError(f"--regression-target {regression_target!r}: choose one of {', '.join(REGRESSION_TARGETS)}")
    shared = dict(batch_size=int(_option(options, "batch_size", defaults["batch_size"])),
                  grad_accum=int(_option(options, "grad_accum", 1)),
                  weight_decay=float(_option(options, "weight_decay", 0.01)))

    modules: dict[str, nn.Module] = {"student": ctx.student}
    stages: list[Stage] = []
    report: dict = {"layer_map": None, "projections": None}
    if run_intermediate:
        ispec, report["layer_map"] = _intermediate_spec(options, ctx.student, ctx.teacher, terms_on)
        projections = build_projections(ispec, ctx.student.config.hidden_size, ctx.teacher.config.hidden_size,
                                         ctx.student.config.initializer_range, seed=ctx.seed)
        student_folder = options.get("student")
        loaded = load_saved_projections(projections, student_folder) if student_folder and Path(
            str(student_folder)).is_dir() else []
        train_modules = ("student",)
        if len(projections):
            modules["projections"] = projections
            train_modules = ("student", "projections")
        report["projections"] = {**_projection_report(projections, ispec.projection),
                                 "loaded_from_student": loaded}
        config = StageConfig(
            "intermediate",
            epochs=float(_option(options, "intermediate_epochs", defaults["intermediate_epochs"])),
            max_steps=options.get("intermediate_max_steps"),
            learning_rate=float(_option(options, "intermediate_lr", defaults["intermediate_lr"])),
            schedule="constant", warmup_ratio=0.0, evaluate=False, train_modules=train_modules, **shared)
        stages.append(Stage(config, intermediate_loss(ispec), ctx.train_set))
        report["attention_reduction"] = ispec.attention_reduction if ispec.attention else None
        report["head_average"] = ispec.head_average
    prediction = StageConfig(
        "prediction",
        epochs=float(_option(options, "epochs", defaults["epochs"])),
        max_steps=options.get("max_steps"),
        learning_rate=float(_option(options, "learning_rate", defaults["learning_rate"])),
        schedule="linear", warmup_ratio=float(_option(options, "warmup_ratio", 0.1)),
        eval_every=options.get("eval_every"), evaluate=True, train_modules=("student",), **shared)
    stages.append(Stage(prediction, prediction_loss(spec.is_regression, temperature, gold_only, regression_target),
                        ctx.train_set))

    if gold_only:
        prediction_terms = ["task"]
        prediction_target = "gold labels (cross-entropy)" if not spec.is_regression else "gold scores (MSE)"
    elif spec.is_regression and regression_target == "teacher":
        prediction_terms, prediction_target = ["prediction"], "teacher scores (MSE)"
    elif spec.is_regression:
        prediction_terms, prediction_target = ["prediction"], "gold scores (MSE), as the reference"
    else:
        prediction_terms, prediction_target = ["prediction"], f"teacher soft cross-entropy, T={temperature:g}"
    report.update({
        "loss_terms": {"intermediate": [t for t, on in terms_on.items() if on] if run_intermediate else [],
                       "prediction": prediction_terms},
        "prediction_target": prediction_target,
        "temperature": temperature,
        "phases": {s.config.name: asdict(s.config) for s in stages},
        "task_defaults": defaults,
    })
    return Plan(modules=modules, frozen={"teacher": ctx.teacher}, stages=stages, report=report)


# ----------------------------------------------------------------------------- general distillation
def _general_student(options: dict, teacher, seed: int):
    """A bare ``BertModel`` student from a preset or a config folder: randomly initialised, or
    selected from the teacher's weights with ``student_init="teacher-weights"``."""
    teacher_config = teacher.config
    name = _option(options, "student", GENERAL_DEFAULTS["student"])
    if name in students.PRESETS:
        config = students.student_config(name, teacher_config, num_labels=2)
    else:
        path = Path(str(name)).expanduser()
        if not (path / "config.json").is_file():
            raise KdbertError(f"--student {name}: not a preset ({', '.join(students.PRESETS)}) nor a folder "
                              "with a config.json")
        from transformers import BertConfig

        config = BertConfig.from_pretrained(path)
        _check_vocab(path, config.vocab_size, teacher_config.vocab_size)
    config.architectures = None
    student = students.build_student(config, seed=seed).bert
    student.kdbert_init = students.apply_student_init(student, teacher, options.get("student_init"))
    return student


def _load_general_teacher(name: str):
    from transformers import AutoModel

    from kdbert.models.loading import resolve_model_path

    path = resolve_model_path(name)
    try:
        teacher = AutoModel.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"--teacher {path}: could not load it as an encoder: {str(exc).splitlines()[0]}") from None
    if getattr(teacher.config, "num_hidden_layers", None) is None:
        raise KdbertError(f"--teacher {path}: not a BERT-family encoder (no num_hidden_layers in its config)")
    return teacher, path


def run_general(options: dict, output_dir: str, resume: bool = False, overwrite: bool = False) -> dict:
    """TinyBERT general distillation on raw text; writes a bare ``BertModel`` student + tokenizer,
    ``projections.safetensors`` and ``general_report.json`` to ``output_dir``.

    Options: teacher ("default" = the packaged model), student (preset or config folder,
    default tinybert4), corpus (paths), max_sequences (or max_train_examples), max_seq_len (128),
    layer_map, teacher_layers, attention_reduction, hidden_projection, head_average, epochs (3),
    max_steps, learning_rate (1e-4), batch_size (256), grad_accum, warmup_ratio, weight_decay,
    seed, mixed_precision, keep_checkpoints, no_progress. Resumable with ``resume``.
    """
    from transformers import set_seed

    from kdbert.data.corpus import pack_sequences
    from kdbert.distill import stage_losses
    from kdbert.models.loading import load_tokenizer

    started = time.time()
    seed = _option(options, "seed", 42)
    corpus = options.get("corpus")
    if not corpus:
        raise KdbertError("--corpus is required: text files or folders to distil on")
    corpus = [corpus] if isinstance(corpus, (str, Path)) else list(corpus)
    max_seq_len = int(_option(options, "max_seq_len", GENERAL_DEFAULTS["max_seq_len"]))
    max_sequences = options.get("max_sequences") or options.get("max_train_examples")
    teacher, teacher_path = _load_general_teacher(_option(options, "teacher", "default"))
    if max_seq_len > teacher.config.max_position_embeddings:
        raise KdbertError(f"--max-seq-len {max_seq_len} exceeds the teacher's {teacher.config.max_position_embeddings} "
                          "positions; use a smaller value")
    tokenizer = load_tokenizer(teacher_path)
    identity = {"command": "distill general", "method": "tinybert",
                **{k: v for k, v in options.items() if k not in ("resume", "overwrite", "func", "no_progress")}}
    out = prepare_output_dir(output_dir, identity, resume, overwrite)
    set_seed(seed)
    student = _general_student(options, teacher, seed)
    ispec, map_report = _intermediate_spec(options, student, teacher,
                                           {"embedding": True, "attention": True, "hidden": True})
    projections = build_projections(ispec, student.config.hidden_size, teacher.config.hidden_size,
                                    student.config.initializer_range, seed=seed)
    sequences = pack_sequences(tokenizer, corpus, max_seq_len=max_seq_len, max_sequences=max_sequences, seed=seed,
                               cache_path=out / "packed_corpus.safetensors")
    dataset = EncodedDataset([{"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}
                              for ids in sequences])
    config = StageConfig(
        "general",
        epochs=float(_option(options, "epochs", GENERAL_DEFAULTS["epochs"])),
        max_steps=options.get("max_steps"),
        learning_rate=float(_option(options, "learning_rate", GENERAL_DEFAULTS["learning_rate"])),
        schedule="linear", warmup_ratio=float(_option(options, "warmup_ratio", 0.1)),
        weight_decay=float(_option(options, "weight_decay", 0.01)),
        batch_size=int(_option(options, "batch_size", GENERAL_DEFAULTS["batch_size"])),
        grad_accum=int(_option(options, "grad_accum", 1)),
        evaluate=False, train_modules=("student", "projections"))
    run = RunConfig(str(out), seed=seed, mixed_precision=_option(options, "mixed_precision", "no"),
                    keep_checkpoints=_option(options, "keep_checkpoints", 2),
                    progress=not options.get("no_progress", False))
    trainer = Trainer({"student": student, "projections": projections}, [Stage(config, intermediate_loss(ispec), dataset)],
                      run, PaddingCollator(tokenizer.pad_token_id), frozen={"teacher": teacher}, tokenizer=tokenizer)
    train_report = trainer.train(resume=resume)
    report = {
        "method": "tinybert", "teacher": teacher_path, "options": identity,
        "student": {"source": _option(options, "student", GENERAL_DEFAULTS["student"]), "init": student.kdbert_init,
                    "num_hidden_layers": student.config.num_hidden_layers, "hidden_size": student.config.hidden_size,
                    "parameters": sum(p.numel() for p in student.parameters())},
        "corpus": [str(c) for c in corpus], "sequences": len(sequences), "max_seq_len": max_seq_len,
        "layer_map": map_report, "loss_terms": ispec.terms,
        "attention_reduction": ispec.attention_reduction, "head_average": ispec.head_average,
        "projections": _projection_report(projections, ispec.projection),
        "stages": train_report.get("stages"), "stage_losses": stage_losses(out / "log.jsonl"),
        "train_seconds": train_report.get("train_seconds"),
        "wall_seconds": round(time.time() - started, 1),
    }
    (out / "general_report.json").write_text(json.dumps(report, indent=2, default=str))
    return report
