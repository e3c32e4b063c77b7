"""Classic knowledge distillation (Hinton et al., 2015) on a task: one stage, two matches.

Loss per batch (both terms already weighted, logged as ``soft`` and ``hard``;
:func:`kdbert.methods.base.logit_matches`)::

    classification, kd_loss "kl":  soft = alpha * T^2 * KL(softmax(z_t/T) || softmax(z_s/T))
                                   hard = (1 - alpha) * CE(z_s, y)
    classification, kd_loss "mse": soft = alpha * MSE(z_s, z_t)          (logits, no T)
                                   hard = (1 - alpha) * CE(z_s, y)
    regression (STS-B):            soft = alpha * MSE(s, t)              (student vs teacher output)
                                   hard = (1 - alpha) * MSE(s, gold)

KL is ``batchmean`` by default (:func:`kdbert.core.losses.kl_div_loss`); ``--kd-reduction mean`` divides
it by the number of classes as well, as the BERT-PKD reference does; a term whose weight is 0 is left out,
and with ``alpha = 0`` the teacher is never run (plain fine-tuning).

Defaults: ``alpha = 0.7``, ``T = 20``: the vanilla-KD configuration of the BERT-PKD reference
code (its ``kd`` preset), whose BERT6 results are the KD baseline in the reference table, but with
the per-example (``batchmean``) KL, which weights the soft term C times more than the reference's
``mean``; ``--recipe kd/default`` is the reference's configuration, reduction included.
Other anchors: torchdistill's GLUE KD uses T = 3 with 0.1 on the soft term (``--recipe
kd/torchdistill``); DistilBERT's task distillation alpha 0.5, T 2; TextBrewer T 4..8. With
``--temperature 10`` KD is exactly BERT-PKD with beta = 0. Epochs, learning rate and batch size
default to :data:`kdbert.methods.finetune.TASK_DEFAULTS` (tuned for ~20M-parameter students).

The student (:func:`kdbert.methods.base.resolve_student`, shared with PKD and TinyBERT):
``--student`` is an HF folder (any sequence-classification architecture; a new head is added
when its label count differs) or a preset (tinybert4, tinybert6: random init, the teacher's
vocabulary); ``--student-layers`` is ``K`` (the first K teacher layers) or a list ``0,2,4`` of
0-based teacher layers copied into a BERT student of the teacher's width (embeddings and pooler
copied, fresh classifier). Default: the first half of the teacher's layers, as the PKD paper's
vanilla-KD students.

A folder student with a tokenizer of its own (another vocabulary: a pre-trained model of another
family) never reads the teacher's tokens (:func:`stored_logits_inputs`): the teacher's logits on
every training row (augmented and ``--unlabelled`` rows included) are computed once with the
teacher's tokenizer and stored (:mod:`kdbert.core.teacher_logits`, ``--logits-cache``), the
student reads each row through its own tokenizer (cut to ``--max-seq-len`` within its positions)
beside the row's stored logits, and the plan's teacher is
:class:`~kdbert.core.teacher_logits.StoredTeacherLogits`. Soft targets are per row, so sequence
classification and regression only: a QA window's per-token logits do not line up with another
tokenizer's tokens. A student of the teacher's tokens reads the same stored logits when
``--teacher-onnx`` labels them (the teacher's int8 export labels a row several times faster on a
CPU than the PyTorch teacher runs beside the student); it then learns the export's outputs.

``--sentence-weight w`` adds a third term (:func:`sentence_matches`): the student's sentence vector
(the masked mean of its last layer, what a mean-pooling head reads), projected to the teacher's
width, is pulled towards the teacher's by cosine distance: d_t numbers per row where the logits give
C. For a student of its own tokenizer the teacher's vectors are computed once per row by the PyTorch
teacher (in ``--teacher-dtype``; an export gives logits only) and stored beside its logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kdbert.core.evaluators import task_evaluator
from kdbert.core.matching import Match
from kdbert.core.loading import own_tokenizer
from kdbert.core.method import DistillContext, Method, Plan, Student, TaskInputs, TaskSource
from kdbert.core.stages import task_stage
from kdbert.core.teacher_logits import StoredTeacherLogits
from kdbert.data.batching import TaskCollator, TokenizerInputs, encode_with_logits, longer_than
from kdbert.data.tasks import TaskSpec
from kdbert.errors import KdbertError
from kdbert.options import NON_NEGATIVE, option
from kdbert.methods.base import (LogitKDConfig, StoredLogitsOptions, StudentLayerOptions, check_kd_loss, kd_matches,
                                 kd_report, resolve_student, student_description, teacher_if_needed)

SENTENCE_LOSSES = ("cosine", "relation")
UNLIMITED = 10**6  # a tokenizer's model_max_length at or above this means "no limit known"


@dataclass
class KDConfig(StudentLayerOptions, StoredLogitsOptions, LogitKDConfig):
    """Classic KD (see the module docstring)."""

    method = "kd"
    sentence_weight: float = option(0.0, "weight of the sentence term: 1 - cos(W s + b, t), s and t the student's and "
                                         "the teacher's sentence vectors (masked means of their last layers), W a "
                                         "projection learned beside the student and not shipped; 0: off",
                                    NON_NEGATIVE, float, "losses")
    sentence_loss: str = option("cosine", "the sentence term's loss: cosine (each row's projected vector against "
                                          "the teacher's) or relation (each pair of rows' cosine similarity against "
                                          "the teacher's, no projection)", type=str, group="losses",
                                choices=SENTENCE_LOSSES)
    freeze_word_embeddings: bool = option(False, "keep the student's word embeddings as they start (the teacher's, "
                                                 "where it starts from the teacher): AdamW then skips their update "
                                                 "over the whole vocabulary, a third of a 2-layer 384-wide student's "
                                                 "step on a CPU", type=bool, group="student")


class KD(Method):
    name, help, config = "kd", "Hinton soft targets", KDConfig

    def initial_student(self, teacher, spec: TaskSpec, config: KDConfig) -> Student:
        """KD's initial student (:func:`kdbert.methods.base.resolve_student`)."""
        check_kd_loss(config.kd_loss, spec)
        return resolve_student(teacher, spec, config)

    def task_inputs(self, source: TaskSource, config: KDConfig) -> TaskInputs:
        """The teacher's tokens for a student of its tokenizer (the default), the teacher beside it; else
        :func:`stored_logits_inputs`: a folder student with a tokenizer of its own, or ``--teacher-onnx``."""
        folder = config.student if config.student and Path(str(config.student)).is_dir() else None
        tokenizer = own_tokenizer(folder, source.teacher, source.tokenizer) if folder else None
        if tokenizer is None and not config.teacher_onnx:
            return super().task_inputs(source, config)
        return stored_logits_inputs(source, config, tokenizer)

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``kd`` whose matches are :func:`~kdbert.methods.base.logit_matches`."""
        config, spec = ctx.config, ctx.spec
        sentence = sentence_matches(config)  # a projection trains beside the student
        projected = any(match.projection for match in sentence)
        frozen = word_embedding_patterns(ctx.student.model) if config.freeze_word_embeddings else ()
        stages = [task_stage("kd", config, kd_matches(config, spec) + sentence, ctx, frozen=frozen,
                             train=("student.*", "projections.*") if projected else ("student.*",))]
        report = {**kd_report(config, spec), **({"sentence_weight": config.sentence_weight,
                                                   "sentence_loss": config.sentence_loss}
                                                  if config.sentence_weight else {})}
        return Plan({"student": ctx.student.model}, teacher_if_needed(ctx.teacher, stages), stages,
                    report={"loss": report, **student_description(ctx.student)})


def word_embedding_patterns(model) -> tuple[str, ...]:
    """The trainer's name of ``model``'s word-embedding matrix (``student.bert.embeddings.word_embeddings.weight``
    for a BERT student), as a :attr:`~kdbert.core.stages.StageConfig.frozen` pattern."""
    try:
        weight = model.get_input_embeddings().weight
    except (AttributeError, NotImplementedError):
        raise KdbertError(f"--freeze-word-embeddings: the student ({type(model).__name__}) has no word embeddings "
                          "to keep; drop the option") from None
    return tuple(f"student.{name}" for name, param in model.named_parameters() if param is weight)


def sentence_matches(config: KDConfig) -> list[Match]:
    """The sentence term, where ``sentence_weight`` asks for it; ``sentence_loss`` cosine::

        sentence = w * mean_b (1 - cos(W u_b + c, v_b))

    or relation (no projection)::

        sentence = w * mean_{i != j} (cos(u_i, u_j) - cos(v_i, v_j))^2

    u and v the student's and the teacher's sentence vectors (the masked means of their last
    layers, each over its own tokenizer's real tokens), W one projection from the student's width to
    the teacher's (``projections.sentence``): a signal of d_t numbers per row (cosine) or of how
    each pair of rows relate (relation) beside the C logits, which a student of another tokenizer
    can read too (the teacher's vectors are then stored per row)."""
    if not config.sentence_weight:
        return []
    if config.sentence_loss == "relation":
        return [Match("sentence", "mean", "similarity_relation", config.sentence_weight, student_layer=-1,
                      teacher_layer=-1)]
    return [Match("sentence", "mean", "cosine_distance", config.sentence_weight, student_layer=-1, teacher_layer=-1,
                  projection="sentence")]


# ----------------------------------------------------------------------------- a student of its own tokenizer
def own_tokenizer_problem(spec: TaskSpec) -> str | None:
    """Why a student of its own tokenizer cannot learn ``spec`` from the teacher's logits per row, or None."""
    if spec.question_answering:
        return (f"{spec.name}'s soft targets are the teacher's logits per token of its tokenizer, which another "
                "tokenizer's tokens do not line up with; distil a student of the teacher's tokenizer")
    if spec.truncation == "windows":
        return ("--truncation windows gives the teacher several rows of a text where the student reads one; use "
                "--truncation head, tail or head+tail")
    return None


def check_own_tokenizer(student: str, spec: TaskSpec, teacher_cache: str | None = None) -> None:
    """Refuse, in one line, a ``student`` of its own tokenizer where its rows cannot be paired with the
    teacher's outputs per row."""
    problem = own_tokenizer_problem(spec)
    if problem is None and teacher_cache:
        problem = ("it never reads the teacher's tokens that --teacher-cache keeps outputs of; drop --teacher-cache "
                   "(the teacher's logits are stored per row, --logits-cache DIR)")
    if problem is not None:
        raise KdbertError(f"--student {student} has a tokenizer of its own: {problem}")


def check_stored_labels(teacher_onnx: str, spec: TaskSpec, teacher_cache: str | None = None) -> None:
    """Refuse, in one line, ``--teacher-onnx`` labels for a student of the teacher's tokens where rows
    cannot be paired with one output each, or beside a ``--teacher-cache`` it would never read."""
    if spec.question_answering:
        problem = f"{spec.name}'s soft targets are per token, not per row; drop --teacher-onnx (the teacher then runs beside the student)"
    elif spec.truncation == "windows":
        problem = "--truncation windows reads a text as several rows; use --truncation head, tail or head+tail, or drop --teacher-onnx"
    elif teacher_cache:
        problem = "the teacher never runs beside the student, so --teacher-cache keeps nothing; drop --teacher-cache"
    else:
        return
    raise KdbertError(f"--teacher-onnx {teacher_onnx} labels each training row once: {problem}")


def student_max_seq_len(student, tokenizer, max_seq_len: int) -> tuple[int, int | None]:
    """The student's token limit: ``max_seq_len`` within its positions (its config's and its
    tokenizer's), and those positions (None: no limit known)."""
    limits = [getattr(student.config, "max_position_embeddings", None), tokenizer.model_max_length]
    known = [limit for limit in limits if isinstance(limit, int) and limit < UNLIMITED]
    positions = min(known) if known else None
    return min(max_seq_len, positions or max_seq_len), positions


def say_cut_rows(source: TaskSource, tokenizer, limit: int, positions: int | None) -> int:
    """How many training rows the student's ``limit`` cuts that the teacher read whole, said in one
    line when there are any (with the option that changes it)."""
    rows = source.rows
    student, teacher = longer_than(tokenizer, rows, limit), longer_than(source.tokenizer, rows, source.max_seq_len)
    cut = sum(s and not t for s, t in zip(student, teacher))
    if cut:
        if positions is not None and limit >= positions:
            fix = f"the student takes no more than its {positions} positions"
        else:
            fix = "raise --max-seq-len" + (f" (the student takes up to {positions} tokens)" if positions else "")
        print(f"student tokenizer: {cut} of {len(rows)} training rows are cut to the student's {limit} tokens where "
              f"the teacher read them whole; {fix}")
    return cut


def stored_logits_inputs(source: TaskSource, config: KDConfig, tokenizer=None) -> TaskInputs:
    """A student that reads the teacher's logits stored per row (module doc), labelled once (not at
    all with ``alpha`` 0) and read by :class:`~kdbert.core.teacher_logits.StoredTeacherLogits`: a
    folder student of its own ``tokenizer``, its rows and dev encoded by it (saved with it), or
    (``tokenizer`` None) a student of the teacher's tokens whose labels ``--teacher-onnx`` gives,
    so that the teacher never runs beside it."""
    spec = source.data.spec
    if tokenizer is None:
        check_stored_labels(config.teacher_onnx, spec, config.teacher_cache)
        student = resolve_student(source.teacher, spec, config)
        tokenizer, limit, report = source.tokenizer, source.max_seq_len, {}
    else:
        check_own_tokenizer(config.student, spec, config.teacher_cache)
        student = resolve_student(source.teacher, spec, config, own_tokenizer=True)
        limit, positions = student_max_seq_len(student.model, tokenizer, source.max_seq_len)
        report = {"student_tokenizer": {"vocab_size": len(tokenizer), "max_seq_len": limit,
                                        "rows_cut": say_cut_rows(source, tokenizer, limit, positions)}}
    check_kd_loss(config.kd_loss, spec)
    inputs = TokenizerInputs.for_task(tokenizer, limit, spec)
    logits = sentences = None
    if config.alpha > 0:
        logits, report["teacher_logits"] = source.teacher_logits(config.teacher_dtype, config.logits_cache,
                                                                 config.teacher_onnx)
    if config.sentence_weight:
        sentences, report["teacher_sentences"] = source.teacher_logits(config.teacher_dtype, config.logits_cache,
                                                                       output="sentence")
    return TaskInputs(student, encode_with_logits(source.rows, inputs, logits, sentences),
                      TaskCollator(None, inputs, spec.is_regression), task_evaluator(source.data, tokenizer, limit),
                      tokenizer, report, teacher=StoredTeacherLogits())


METHOD = KD()
