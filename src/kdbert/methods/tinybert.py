"""TinyBERT (Jiao et al., 2020): transformer distillation, general and task-specific.

Task distillation is two stages run by the shared trainer (:func:`build_task_plan`):

1. ``intermediate``: match the teacher's embeddings, pre-softmax attention scores and hidden
   states through the layer map g(m), with learnable projections W_e / W_h (d_s -> d_t)::

       L = MSE(E_s W_e, E_t) + sum_m MSE(A_s^m, A_t^g(m)) + sum_m MSE(H_s^m W_h, H_t^g(m))

   all weights 1, constant learning rate, no warmup, no evaluation (as the reference code).
2. ``prediction``: soft cross-entropy to the teacher's logits (temperature T, default 1), or
   MSE to the *gold* score for regression (STS-B), linear schedule, evaluated on dev.

Both stages are match lists (:func:`intermediate_matches`, :func:`prediction_matches`).
General distillation (:func:`build_general_plan`) is stage 1 on raw text from a pre-trained
teacher; its result (a bare ``BertModel`` folder) is the starting student of task distillation.
A recipe YAML may replace the stages with a plan written as data (``stages:``, see
:mod:`kdbert.core.stages`).

Differences from the reference code (huawei-noah TinyBERT), on purpose:
  - the per-task defaults (intermediate epochs, max_seq_len) ARE applied; the reference
    assigns them to misspelt attributes, so they never take effect;
  - one projection per matched layer by default (the v2 checkpoints), with ``shared`` for the
    v1 code's single ``fit_dense`` (which it also applies to the embeddings: we do the same);
  - the attention loss can use a masked mean instead of the -1e2 threshold trick;
  - the last partial batch is used, and runs resume from checkpoints;
  - general distillation reads the corpus as single-segment packed text (``[CLS] tokens [SEP]``,
    up to ``max_seq_len``, token types all 0, nothing masked), the input task distillation sees
    for single sentences. The reference feeds BERT pre-training instances instead
    (``pregenerate_training_data.py``: two segments ``[CLS] A [SEP] B [SEP]`` with token types 0/1
    and 15% of tokens masked, 80/10/10), so its student also sees [MASK] tokens and segment B
    embeddings during general distillation. Neither paper nor code says this matters for the
    losses (no MLM term is used); ours spends no positions on masked tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kdbert.options import (
    EPOCHS,
    LEARNING_RATE,
    POSITIVE_INT,
    MethodConfig,
    TeacherCacheOptions,
    TrainOptions,
    in_range,
    option,
    override,
)
from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.core.layer_maps import LayerMap, LayerMapRules, resolve_layer_map
from kdbert.core.matching import PROJECTION_INITS, Match
from kdbert.families import bert as students
from kdbert.core.loading import check_vocabulary, load_encoder
from kdbert.families.bert import STUDENT_INITS
from kdbert.core.method import DistillContext, Method, Plan, Student
from kdbert.methods.base import resolve_student
from kdbert.core.stages import stages_from_data, task_stage

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
REGRESSION_TARGETS = ("gold", "teacher")


def task_defaults(task_name: str) -> dict:
    """The TinyBERT defaults of a task (GLUE name; anything else gets the fallback)."""
    return {**COMMON_TASK_DEFAULTS, **TASK_DEFAULTS.get(task_name, FALLBACK_TASK_DEFAULTS)}


# ----------------------------------------------------------------------------- options
@dataclass
class IntermediateOptions:
    """What stage 1 (and general distillation) matches, and how."""

    layer_map: str | None = option(None, "student -> teacher layer map g(m) (default: tinybert, for "
                                         "--student-layers students each copy's own layer but the last, which "
                                         "matches the teacher's last, else uniform; pkd skip)",
                                   group="layer mapping", choices=LAYER_MAPS)
    teacher_layers: str | None = option(None, "explicit map: teacher layer (1-based) for each student layer, e.g. "
                                              "3,6,9,12", group="layer mapping")
    attention_reduction: str = option("tinybert-reference", "tinybert: attention-loss reduction (reference: zero "
                                      "masked scores, mean over all entries)", group="losses",
                                      choices=ATTENTION_REDUCTIONS)
    head_average: bool = option(False, "tinybert: average attention over heads (allows different head counts)",
                                type=bool, group="losses")
    hidden_projection: str = option("per-layer", "tinybert: one W_h per matched layer (default) or one shared",
                                    group="losses", choices=PROJECTIONS)
    projection_init: str = option("random", "tinybert: W_e / W_h start random (default, as the reference) or "
                                            "fitted to the first batch by least squares (a student copied from "
                                            "the teacher then starts near zero loss)", group="losses",
                                  choices=PROJECTION_INITS)
    student_init: str | None = option(None, "preset student's weights: random (default, as the papers) or selected "
                                            "from the teacher's (weight selection)", group="student",
                                      choices=STUDENT_INITS)


@dataclass
class TinyBertConfig(IntermediateOptions, TeacherCacheOptions, MethodConfig):
    """TinyBERT task distillation; ``None`` fields take the task's defaults (:func:`task_defaults`)."""

    method = "tinybert"
    student_layers: str | None = option(None, "build the student from these teacher layers (0-based, e.g. 0,1,2) "
                                              "or the first K layers (an integer), as BERT-PKD does", group="student")
    temperature: float | None = option(None, "softmax temperature (default: the method's)",
                                       in_range(0, 1e4, low_open=True), float, "losses")
    regression_target: str = option("gold", "tinybert, regression tasks (STS-B): prediction-stage MSE to the gold "
                                    "score (default, the paper) or to the teacher's score (use it with an augmented "
                                    "--train-file, whose rows carry the original sentence's gold score)",
                                    group="losses", choices=REGRESSION_TARGETS)
    no_embedding_loss: bool = option(False, "ablation: drop the embedding loss", type=bool, group="losses")
    no_attention_loss: bool = option(False, "ablation: drop the attention loss", type=bool, group="losses")
    no_hidden_loss: bool = option(False, "ablation: drop the hidden-state loss", type=bool, group="losses")
    no_prediction_loss: bool = option(False, "ablation: train the prediction stage on gold labels only", type=bool,
                                      group="losses")
    skip_intermediate: bool = option(False, "tinybert: run the prediction stage only", type=bool, group="stages")
    intermediate_epochs: float | None = option(None, "tinybert: epochs of the intermediate-layer stage", EPOCHS,
                                               float, "stages")
    intermediate_lr: float | None = option(None, "tinybert: learning rate of the intermediate stage", LEARNING_RATE,
                                           float, "stages")
    intermediate_max_steps: int | None = option(None, "tinybert: optimiser steps of the intermediate stage",
                                                POSITIVE_INT, int, "stages")
    stages: list | None = option(None, "a stage plan written as data (recipe YAML), replacing TinyBERT's two "
                                       "stages; see kdbert.core.stages", type=list, group="plan",
                                command_line=False)

    def task_defaults(self, task: str) -> dict:
        return task_defaults(task)

    @property
    def terms_on(self) -> dict[str, bool]:
        return {t: not getattr(self, f"no_{t}_loss") for t in INTERMEDIATE_TERMS}


@dataclass
class TinyBertGeneralConfig(IntermediateOptions, TrainOptions):
    """TinyBERT general distillation (paper: 3 epochs, batch 256, lr 1e-4, sequences of 128)."""

    method = "tinybert"
    teacher: str | None = option("default", "pre-trained (not fine-tuned) teacher", group="models")
    student: str | None = option(DEFAULT_STUDENT, "tinybert: preset or config folder (default tinybert4)",
                                 group="models")
    corpus: list | None = option(None, "text files or folders", type=list, group="models")
    max_sequences: int | None = option(None, "use at most N packed sequences", in_range(1, 10**12, int), int, "models")
    epochs: float | None = override(TrainOptions, "epochs", GENERAL_DEFAULTS["epochs"])
    learning_rate: float | None = override(TrainOptions, "learning_rate", GENERAL_DEFAULTS["learning_rate"])
    batch_size: int | None = override(TrainOptions, "batch_size", GENERAL_DEFAULTS["batch_size"])
    max_seq_len: int | None = override(TrainOptions, "max_seq_len", GENERAL_DEFAULTS["max_seq_len"])
    save_every: int | None = option(None, "checkpoint every N optimiser steps (default: at the end of each epoch)",
                                    POSITIVE_INT, int, "models")

    @property
    def terms_on(self) -> dict[str, bool]:
        return dict.fromkeys(INTERMEDIATE_TERMS, True)


# ----------------------------------------------------------------------------- layer map
LAYER_MAP_RULES = LayerMapRules("TinyBERT", LAYER_MAPS, "uniform", rounded_default=True)


def resolve_layers(config, student, teacher, log=print, copied_layers=None) -> tuple[LayerMap, dict]:
    """The layer map (:func:`kdbert.core.layer_maps.resolve_layer_map`) checked against both models'
    head counts, printed with ``log``, and its report. Without a choice: for a student whose layers
    were copied from the teacher's (``copied_layers``, 0-based) each student layer but the last
    matches the output of the layer it was copied from, g(m) = copied_layers[m - 1] + 1, and the
    last matches the teacher's last, g(M) = N, whose output the copied head was fitted on (map
    ``copied``); else ``uniform``, rounded when the teacher depth is not a multiple of the student's.

    Why: the uniform map asks a student copied from layers 0, 2, 4 of a 6-layer teacher to turn the
    copy of layer 0 into layer 2's output, and so on; on SQuAD two epochs of that pulled the student
    from 30.0 EM (prediction stage alone) to 10.6. Matching every copied layer to its own output
    (1, 3, 5) reached 33.4 there, but collapsed a copy of layers 0-2 to one class on IMDb (1, 2, 3:
    the head then reads layer 3's features). This map collapses on neither: 27.8 EM on SQuAD (1, 3,
    6) and 78.5 on IMDb (1, 2, 6; uniform 77.2) (BENCHMARKS.md)."""
    s_cfg, t_cfg = student.config, teacher.config
    m, n = s_cfg.num_hidden_layers, t_cfg.num_hidden_layers
    if copied_layers and config.layer_map is None and config.teacher_layers in (None, ""):
        listed = ",".join([str(layer + 1) for layer in copied_layers[:-1]] + [str(n)])
        resolved = replace(resolve_layer_map(LAYER_MAP_RULES, m, n, "explicit", listed), name="copied")
    else:
        resolved = resolve_layer_map(LAYER_MAP_RULES, m, n, config.layer_map, config.teacher_layers)
    layer_map, attention = resolved.layer_map, config.terms_on["attention"]
    h_s, h_t = s_cfg.num_attention_heads, t_cfg.num_attention_heads
    if attention and not config.head_average and h_s != h_t:
        raise KdbertError(f"the student has {h_s} attention heads and the teacher {h_t}: the attention loss needs "
                          "equal counts; pass --head-average or --no-attention-loss")
    layer_map.validate(m, n, h_s, h_t, needs_attention=attention, head_average=config.head_average)
    log(resolved.describe())
    return layer_map, {"method": resolved.name, "pairs": [list(p) for p in layer_map.pairs],
                       "attention_pairs": [list(p) for p in layer_map.attention_pairs], "table": layer_map.table()}


# ----------------------------------------------------------------------------- matches
def intermediate_matches(layer_map: LayerMap, terms_on: dict, projection: str, reduction: str,
                         head_average: bool) -> list[Match]:
    """Stage 1's matches (all weights 1, as the paper and reference)::

        embedding = MSE(E_s W_e, E_t);  attention = sum_m MSE(A_s^m, A_t^g(m));  hidden = sum_m MSE(H_s^m W_h, H_t^g(m))

    ``projection`` "per-layer" gives one W per matched pair, "shared" one for all (v1's ``fit_dense``).
    """
    proj = "linear" if projection == "per-layer" else "shared"
    layers = [(s, t) for s, t in layer_map.pairs if s > 0]
    matches = []
    if terms_on["embedding"]:
        matches.append(Match("embedding", "embeddings", "hidden_mse", student_layer=0, teacher_layer=0,
                             projection=proj))
    if terms_on["attention"]:
        matches += [Match("attention", "attention_scores", "attention_mse", student_layer=s, teacher_layer=t,
                          options={"reduction": reduction, "head_average": head_average}) for s, t in layers]
    if terms_on["hidden"]:
        matches += [Match("hidden", "hidden", "hidden_mse", student_layer=s, teacher_layer=t, projection=proj)
                    for s, t in layers]
    return matches


def prediction_matches(regression: bool, temperature: float, gold_only: bool, regression_target: str) -> list[Match]:
    """Stage 2: soft CE to the teacher, or the task loss (``gold_only``); for regression, MSE to
    the gold score (the reference) or, with ``regression_target="teacher"``, to the teacher's
    predicted score (what augmented rows need: their gold score is the original sentence's)."""
    if gold_only:
        return [Match("task", "logits", "hard_label", target="labels")]
    if regression:
        return [Match("prediction", "logits", "regression_mse", target="labels" if regression_target == "gold"
                      else "teacher")]
    return [Match("prediction", "logits", "soft_cross_entropy", options={"temperature": temperature})]


def _intermediate_stage(name: str, config, ctx, layer_map: LayerMap, projections_from=None, **settings):
    matches = intermediate_matches(layer_map, config.terms_on, config.hidden_projection, config.attention_reduction,
                                   config.head_average)
    train = ("student.*", "projections.*") if any(m.projection for m in matches) else ("student.*",)
    return task_stage(name, config, matches, ctx, projections_from=projections_from,
                      projection_init=config.projection_init, evaluate=False, train=train, eval_every=None, **settings)


# ----------------------------------------------------------------------------- method
class TinyBert(Method):
    name, help = "tinybert", "intermediate-layer then prediction-layer stages"
    config, general_config = TinyBertConfig, TinyBertGeneralConfig

    def initial_student(self, teacher, spec: TaskSpec, config: TinyBertConfig) -> Student:
        """The student task distillation starts from (a ``...ForSequenceClassification``).

        ``config.student``: a preset (tinybert4, tinybert6; default tinybert4) built on the
        teacher's vocabulary, or an HF folder (e.g. from general distillation) loaded with a fresh
        classifier for the task. ``config.student_layers`` instead copies teacher layers
        (``"0,1,2"``, or ``"3"`` for the first three). Random parts are seeded by ``config.seed``.
        """
        folder = Path(str(config.student)).expanduser()
        if config.student and config.student not in students.PRESETS and not folder.is_dir():
            raise KdbertError(f"--student {config.student}: not a preset ({', '.join(students.PRESETS)}) nor an "
                              "existing model folder")
        default_preset = None if config.student_layers else DEFAULT_STUDENT
        return resolve_student(teacher, spec, config, default_preset=default_preset)

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """TinyBERT task distillation: [intermediate, prediction] (see the module docstring), or the
        config's ``stages`` plan written as data.

        Options (None = the task's TinyBERT default): intermediate_epochs, intermediate_lr,
        intermediate_max_steps (stage 1); epochs, learning_rate, max_steps, warmup_ratio, eval_every
        (stage 2); batch_size, grad_accum, weight_decay (both stages); temperature; layer_map,
        teacher_layers, attention_reduction, head_average, hidden_projection; regression_target;
        ablations no_embedding_loss, no_attention_loss, no_hidden_loss, no_prediction_loss,
        skip_intermediate.
        """
        config, spec, student = ctx.config, ctx.spec, ctx.student.model
        terms_on, copied = config.terms_on, ctx.student.copied_layers
        run_intermediate = any(terms_on.values()) and not config.skip_intermediate
        report: dict = {"layer_map": None, "projections": None}
        if config.stages:
            layer_map, report["layer_map"] = resolve_layers(config, student, ctx.teacher, copied_layers=copied)
            stages = stages_from_data(config.stages, config, ctx, layer_map, int(student.config.num_hidden_layers))
            report.update(stage_plan="recipe", phases={s.config.name: asdict(s.config) for s in stages})
            return Plan({"student": student}, {"teacher": ctx.teacher}, stages, report)
        stages = []
        if run_intermediate:
            layer_map, report["layer_map"] = resolve_layers(config, student, ctx.teacher, copied_layers=copied)
            folder = config.student if config.student and Path(str(config.student)).is_dir() else None
            stages.append(_intermediate_stage("intermediate", config, ctx, layer_map, folder,
                                              epochs=config.intermediate_epochs,
                                              max_steps=config.intermediate_max_steps,
                                              learning_rate=config.intermediate_lr, schedule="constant",
                                              warmup_ratio=0.0))
            report["projections"] = {"mode": config.hidden_projection}
            report["attention_reduction"] = config.attention_reduction if terms_on["attention"] else None
            report["head_average"] = config.head_average
        gold_only = config.no_prediction_loss
        stages.append(task_stage("prediction", config, prediction_matches(
            spec.is_regression, config.temperature, gold_only, config.regression_target), ctx))

        if gold_only:
            prediction_terms = ["task"]
            prediction_target = "gold labels (cross-entropy)" if not spec.is_regression else "gold scores (MSE)"
        elif spec.is_regression and config.regression_target == "teacher":
            prediction_terms, prediction_target = ["prediction"], "teacher scores (MSE)"
        elif spec.is_regression:
            prediction_terms, prediction_target = ["prediction"], "gold scores (MSE), as the reference"
        else:
            prediction_target = f"teacher soft cross-entropy, T={config.temperature:g}"
            prediction_terms = ["prediction"]
        report.update({
            "loss_terms": {"intermediate": [t for t, on in terms_on.items() if on] if run_intermediate else [],
                           "prediction": prediction_terms},
            "prediction_target": prediction_target,
            "temperature": config.temperature,
            "phases": {s.config.name: asdict(s.config) for s in stages},
            "task_defaults": task_defaults(spec.name),
        })
        return Plan(modules={"student": student}, frozen={"teacher": ctx.teacher}, stages=stages, report=report)

    def general_teacher(self, config: TinyBertGeneralConfig):
        """The pre-trained teacher, as a bare encoder."""
        return load_encoder(config.teacher)

    def general_student(self, teacher, tokenizer, config: TinyBertGeneralConfig) -> Student:
        return general_bert_student(teacher, config.student, config.seed, config.student_init)

    def general_max_seq_len(self, config: TinyBertGeneralConfig, teacher, student: Student) -> int:
        if config.max_seq_len > teacher.config.max_position_embeddings:
            raise KdbertError(f"--max-seq-len {config.max_seq_len} exceeds the teacher's "
                              f"{teacher.config.max_position_embeddings} positions; use a smaller value")
        return config.max_seq_len

    def general_data(self, sequences: list[list[int]], tokenizer, teacher, config: TinyBertGeneralConfig):
        """``(dataset, collator, report)``: packed sequences as single-segment BERT inputs."""
        rows = [{"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}
                for ids in sequences]
        return EncodedDataset(rows), PaddingCollator(tokenizer.pad_token_id), {}

    def build_general_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``general``: stage 1's matches on raw text (linear schedule, no evaluation)."""
        config, student = ctx.config, ctx.student.model
        layer_map, map_report = resolve_layers(config, student, ctx.teacher, copied_layers=ctx.student.copied_layers)
        stages = [_intermediate_stage("general", config, ctx, layer_map)]
        report = {"student": {"source": config.student, "init": ctx.student.origin,
                              "num_hidden_layers": student.config.num_hidden_layers,
                              "hidden_size": student.config.hidden_size,
                              "parameters": sum(p.numel() for p in student.parameters())},
                  "layer_map": map_report, "loss_terms": list(INTERMEDIATE_TERMS),
                  "attention_reduction": config.attention_reduction, "head_average": config.head_average,
                  "projections": {"mode": config.hidden_projection}}
        return Plan({"student": student}, {"teacher": ctx.teacher}, stages, report=report)


METHOD = TinyBert()


def general_bert_student(teacher, name: str, seed: int, student_init: str | None) -> Student:
    """A bare ``BertModel`` student for general distillation from a preset or a config folder
    (``name``): randomly initialised, or selected from the teacher's weights with
    ``student_init="teacher-weights"``."""
    from transformers import BertConfig

    if name in students.PRESETS:
        model_config = students.student_config(name, teacher.config, num_labels=2)
    else:
        path = Path(str(name)).expanduser()
        if not (path / "config.json").is_file():
            raise KdbertError(f"--student {name}: not a preset ({', '.join(students.PRESETS)}) nor a folder "
                              "with a config.json")
        check_vocabulary(str(path), teacher)
        model_config = BertConfig.from_pretrained(path)
    model_config.architectures = None
    model = students.build_student(model_config, seed=seed).bert
    return Student(model, students.apply_student_init(model, teacher, student_init))
