"""The distilled BiLSTM (Tang et al. 2019): a word-level BiLSTM fitted to the teacher's logits.

The student (:mod:`kdbert.families.bilstm.model`) reads word ids from its own vocabulary: the words of
the training texts (augmented rows included, ``--min-count``), then the ``--frequent-words`` most
frequent words of ``--word-vectors`` that they lack, so that the common words of new text keep
their meaning instead of becoming ``[UNK]``. No dev word joins for being a dev word: dev scores
then say what new text gets (:func:`kdbert.families.bilstm.model.init_bilstm`; the report's
``student`` names the sources and the dev OOV rate). Embeddings start from the word vectors where
they have the word.
Hidden size: ``--hidden-size``, by default :data:`HIDDEN_SIZE` (the paper's 150) and
:data:`PAIR_HIDDEN_SIZE` for sentence pairs. The student never sees the teacher's tokens, so this
recipe provides :func:`task_inputs` (the front's hook for students with their own inputs)
instead of ``initial_student``:

1. the teacher labels every training row once (:func:`kdbert.core.teacher_logits.label_with_teacher`,
   ``--teacher-dtype bfloat16`` under bf16 autocast): its logits are stored beside the training
   file (``--logits-cache`` elsewhere) keyed by the teacher's identity and each row's texts, and
   reused by later runs, seeds and student sizes;
2. batches carry the student's word ids and those stored logits (``batch["teacher_logits"]``),
   and the teacher in the plan is :class:`~kdbert.core.teacher_logits.StoredTeacherLogits`, which
   returns them: the real teacher never runs during training.

Loss per batch (B examples, C outputs; one stage, terms logged as ``distill`` and ``hard``)::

    distill = alpha * (1/B) sum_b ||z_s,b - z_t,b||^2        (squared L2 over the C logits; the paper's)
    hard    = (1 - alpha) * CE(z_s, y)                        (regression: MSE(s, gold score))

For regression (C = 1) ``distill`` is the squared error to the teacher's score. ``--alpha`` is
the weight of the teacher term as for every kdbert method: the default 1.0 is the paper's
objective (its alpha, the hard-label weight, is 1 - ours = 0); ``--alpha 0`` trains the same
BiLSTM on the gold labels alone (the no-distillation baseline) and never runs the teacher.
Augmented rows carry the label of the row they came from, so mix in the hard term only with
care on augmented data.

Optimiser: Adadelta (lr 1.0, rho 0.95, eps 1e-6, constant rate, no gradient clipping, no
weight decay), as the paper; ``--optimizer adamw`` (lr 1e-3, linear warmup and decay, gradient
norm clipped to 1.0) is available. Adadelta must not be clipped together with weight decay:
its weight decay is an L2 term added to the gradient *after* clipping, and with the gradient of
the ~760k parameters (SST-2, GloVe 50d) clipped to norm 1, that term (0.01 ||theta|| = 4.4 at
the first step) outweighed it: the weights shrank (||theta|| 439 -> 111 in two epochs) and the
loss rose instead of falling (BENCHMARKS.md). Other defaults: batch 50
(the paper's), 10 epochs, the best dev epoch kept. The saved student is a BiLSTM folder
(``config.json``, ``model.safetensors``, ``vocab.txt``) that :func:`kdbert.families.bilstm.model.load_bilstm`
reads and ``kdbert evaluate`` / ``kdbert bench`` accept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kdbert.core.matching import Match
from kdbert.core.method import DistillContext, Method, Plan, Student, TaskInputs, TaskSource
from kdbert.options import POSITIVE_INT, UNIT, MethodConfig, in_range, option, override
from kdbert.core.stages import task_stage
from kdbert.core.teacher_logits import StoredTeacherLogits, task_store_folder
from kdbert.core.trace import HookAdapter, register_adapter
from kdbert.methods.base import StoredLogitsOptions
from kdbert.errors import KdbertError
from kdbert.families.bilstm.batching import DistillationCollator, encode_for_distillation
from kdbert.families.bilstm.evaluate import WordTaskEvaluator
from kdbert.families.bilstm.model import FREQUENT_WORDS, BiLSTMStudent, init_bilstm

OPTIMIZER_RATES = {"adadelta": 1.0, "adamw": 1e-3}

# The BiLSTM's hidden size per direction without --hidden-size: the paper's 150, for sentence pairs
# too. The authors' MRPC / STS / QQP configs use 300; measured with their p_ng 0 on MRPC and RTE it
# scored no better (MRPC distilled + aug 78.1 against 79.2 +- 1.1) at about 3x the training time
# (BENCHMARKS.md, distilled BiLSTM). Set PAIR_HIDDEN_SIZE to switch.
HIDDEN_SIZE = 150
PAIR_HIDDEN_SIZE = 150


@dataclass
class BiLSTMDistillConfig(StoredLogitsOptions, MethodConfig):
    """Options of the distilled BiLSTM (see the module docstring)."""

    method = "bilstm"
    weight_decay: float = override(MethodConfig, "weight_decay", 0.0)
    word_vectors: str | None = option(None, "GloVe or word2vec text file (.txt/.gz) initialising the word "
                                            "embeddings, or encoder:MODEL (each word through that encoder, e.g. "
                                            "encoder:default; stored beside the teacher's logits) (default: random)",
                                      group="student")
    min_count: int = option(1, "keep words seen at least this often in the training texts (the --frequent-words "
                               "join regardless)", POSITIVE_INT, int, "student")
    frequent_words: int = option(FREQUENT_WORDS, "also give ids to this many of the word vectors' most frequent words "
                                                 "that the training texts lack, so new text's common words keep their "
                                                 "vector (GloVe / word2vec: the file's first words; encoder:MODEL: its "
                                                 "tokenizer's whole words); 0 = the training words only",
                                 in_range(0, 10**7, int, what="a whole number of words, 0 or more"), int, "student")
    embedding_dim: int | None = option(None, "embedding size (default: the word vectors' size, 300 without)",
                                       POSITIVE_INT, int, "student")
    hidden_size: int | None = option(None, f"BiLSTM hidden size per direction (default {HIDDEN_SIZE}; sentence "
                                           f"pairs: {PAIR_HIDDEN_SIZE}; the authors' pair configs use 300)",
                                     POSITIVE_INT, int, "student")
    fc_size: int = option(200, "size of the ReLU layer before the output", POSITIVE_INT, int, "student")
    freeze_embeddings: bool = option(False, "keep the initial word embeddings fixed", type=bool, group="student")
    dropout: float = option(0.0, "dropout on the embeddings and the ReLU layer (0 in the paper)",
                            in_range(0, 0.99), float, "student")
    max_words: int | None = option(None, "cut each text to this many words (default: no limit)", POSITIVE_INT, int,
                                   "student")
    alpha: float = option(1.0, "weight of the soft-target term; the hard-label term gets 1 - alpha", UNIT,
                          float, "losses")
    optimizer: str = option("adadelta", "adadelta (rho 0.95, constant lr 1.0; the paper's) or adamw (lr 1e-3, "
                                        "linear schedule)", type=str, group="losses", choices=("adadelta", "adamw"))
    max_grad_norm: float | None = option(None, "clip the gradient's norm to this before each step; 0 = no clipping "
                                               "(default: none with adadelta, as the paper; 1.0 with adamw)",
                                         in_range(0, 1e9), float, "losses")

    def task_defaults(self, task: str) -> dict:
        return {"epochs": 10.0, "batch_size": 50, "learning_rate": OPTIMIZER_RATES[self.optimizer],
                "max_grad_norm": 0.0 if self.optimizer == "adadelta" else 1.0}

    def check(self) -> None:
        super().check()
        if self.student is not None:
            raise KdbertError("--student does not apply to --method bilstm: its student is built from the training "
                              "texts and --word-vectors (sizes: --hidden-size, --fc-size); drop --student")


# The student is no HF transformer: its output is the logits, no other feature is needed.
register_adapter(BiLSTMStudent, HookAdapter({}))


# ----------------------------------------------------------------------------- plan
def bilstm_matches(alpha: float) -> list[Match]:
    """``distill`` (squared L2 to the stored teacher logits) and ``hard`` (gold labels), weighted
    ``alpha`` and ``1 - alpha``; a term of weight 0 is left out."""
    matches = []
    if alpha > 0:
        matches.append(Match("distill", "logits", "squared_l2", alpha))
    if alpha < 1:
        matches.append(Match("hard", "logits", "hard_label", 1.0 - alpha, target="labels"))
    return matches


TRAINED_WITHOUT_EMBEDDINGS = ("student.forward_lstm.*", "student.backward_lstm.*", "student.fc.*",
                              "student.classifier.*")


# ----------------------------------------------------------------------------- method
class BiLSTM(Method):
    name = "bilstm"
    help = "distilled BiLSTM (Tang et al.): a word-level BiLSTM fitted to the teacher's stored logits"
    config = BiLSTMDistillConfig

    def task_inputs(self, source: TaskSource, config: BiLSTMDistillConfig) -> TaskInputs:
        """The BiLSTM student built from the training rows' texts and the word vectors' frequent words
        (the dev texts give the report's OOV rate, no word), the rows encoded as word ids with the
        teacher's stored logits beside them (:meth:`~kdbert.core.method.TaskSource.teacher_logits`:
        labelled once; not at all with ``alpha`` 0), and the word-level dev evaluator."""
        data, rows = source.data, source.rows
        spec = data.spec
        if spec.question_answering:
            raise KdbertError(f"--method bilstm classifies whole texts and cannot point at answer spans in "
                              f"{spec.name}; use --method kd, tinybert, pkd, distilbert or mobilebert")
        hidden_size = config.hidden_size or (PAIR_HIDDEN_SIZE if spec.is_pair else HIDDEN_SIZE)
        model, vocab, built = init_bilstm(
            [text for row in rows for text in row.texts], spec.num_labels, spec.is_pair, config.word_vectors,
            config.min_count, config.embedding_dim, config.seed,
            dev_texts=[text for split in data.dev.values() for row in split for text in row.texts],
            vectors_folder=task_store_folder(source.task, spec, config.logits_cache),
            frequent_words=config.frequent_words,
            hidden_size=hidden_size, fc_size=config.fc_size, freeze_embeddings=config.freeze_embeddings,
            dropout=config.dropout)
        report = {"student": {"vocab_size": len(vocab), "parameters": sum(p.numel() for p in model.parameters()),
                              "config": asdict(model.config), "word_vectors": config.word_vectors, **built}}
        logits = None
        if config.alpha > 0:
            logits, report["teacher_logits"] = source.teacher_logits(config.teacher_dtype, config.logits_cache,
                                                                     config.teacher_onnx)
        train_set = encode_for_distillation(rows, vocab, spec.is_pair, teacher_logits=logits,
                                            max_words=config.max_words)
        vectors = f" and {config.word_vectors}" if config.word_vectors else ""
        origin = f"BiLSTM from {len(rows)} training rows{vectors}"
        return TaskInputs(Student(model, origin), train_set, DistillationCollator(regression=spec.is_regression),
                          WordTaskEvaluator(data, vocab), vocab, report)

    def build_task_plan(self, ctx: DistillContext) -> Plan:
        """One stage ``bilstm``: :func:`bilstm_matches` with the chosen optimiser (Adadelta at a
        constant rate, or AdamW with linear warmup and decay); frozen embeddings are left out of the
        trained parameters."""
        config = ctx.config
        matches = bilstm_matches(config.alpha)
        train = TRAINED_WITHOUT_EMBEDDINGS if config.freeze_embeddings else ("student.*",)
        stage = task_stage("bilstm", config, matches, ctx, optimizer=config.optimizer, train=train,
                           schedule="constant" if config.optimizer == "adadelta" else "linear",
                           max_grad_norm=config.max_grad_norm or None)
        frozen = {"teacher": StoredTeacherLogits()} if config.alpha > 0 else {}
        return Plan({"student": ctx.student.model}, frozen, [stage],
                    report={"loss": {"alpha": config.alpha, "distill": "squared_l2", "optimizer": config.optimizer,
                                     "regression": ctx.spec.is_regression}})


METHOD = BiLSTM()
