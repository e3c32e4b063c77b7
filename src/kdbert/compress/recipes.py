"""How ``kdbert compress`` distils each kind of candidate: one recipe per kind, as data.

A candidate's kind is its name's prefix (``bert-2x256`` is a ``bert``). A round gives a candidate
``steps`` optimiser steps; its kind's recipe says which method spends them and how (options of
``kdbert distill task``):

- ``bert`` (and ``roberta``, ``xlmr``, ``mpnet``, ``electra``, ``distilbert``: the students of a
  teacher of that architecture, :mod:`kdbert.families.selection`): logit KD from the weight-selected
  start, the one token-level loss every candidate of the search shares (below), the word embeddings
  kept as they start (``--word-embeddings kept``: the teacher's, whose AdamW update over the whole
  vocabulary was 30% of a 2-layer 384-wide student's step, for no loss at equal steps). With
  ``intermediate_share``, TinyBERT task distillation instead: that share of the first rung's steps
  go to its intermediate stage (embeddings, attention scores averaged over heads, hidden states
  through g(m)), the rest to its prediction stage (soft cross-entropy on the teacher's logits at
  T=1). At a few hundred steps the intermediate stage cost more than it gave: on SST-2, 300
  prediction steps beat 150 + 150 for every candidate and cost half as much (BENCHMARKS.md);
- ``mobilebert``: logit KD from the fitted start (its intermediate transfer needs a
  general-distilled student, which compress does not build);
- ``user`` (a student the user brings, ``--student``) and ``pretrained`` (the packaged
  all-MiniLM-L6-v2, offered under a bigger teacher): logit KD from its own weights, whatever its
  architecture; one of another vocabulary reads its own tokenizer and the teacher's logits stored
  per row (:func:`reads_stored_logits`);
- ``bilstm``: the distilled BiLSTM (its own vocabulary, the paper's Adadelta and batch 50, the
  teacher's stored logits, labelled in bf16 where the runs train in it), its hidden size the
  candidate's, its embeddings the word vectors given (``--word-vectors``) or random.

On a sentence-pair task the BERT candidates encode the two sentences apart and read a learned cosine of
their mean vectors (``--pooling pair``, :func:`kdbert.core.pooling.pool_pairs`, applied to their start
in :mod:`kdbert.compress.build`): at equal steps on STS-B it moved a bert-3x256 from 56 to 83 Pearson on
dev (BENCHMARKS.md, the recipe study).

Logit KD (``kdbert distill task --method kd``'s defaults) is ``0.7 * T^2 * KL(teacher || student)`` at
T=20 plus ``0.3 *`` cross-entropy to the gold label; on a regression task ``0.7 *`` MSE to the
teacher's score plus ``0.3 *`` MSE to the gold score. Measured at equal steps over three seeds
(BENCHMARKS.md, the recipe study) it was never worse than TinyBERT's soft cross-entropy at T=1 for
the bert family (level on MRPC and CoLA) and 5.6 points of MRPC better for mobilebert, so the search
compares shapes under one loss rather than recipes.

Every token-level run trains at a rate that stays near its peak (its schedule is set for the
search's horizon, since a promoted run continues) and is scored, kept and shipped on the moving
average of its weights (``--ema-decay``, :class:`kdbert.core.optim.MovingAverage`), which settles as a
decayed rate would at whatever step the run pauses: on SST-2 at 1,200 steps it gained what a decay
planned to end there gains (BENCHMARKS.md, the recipe study). The BiLSTM's Adadelta runs are scored on
their trained weights: the same average (``kdbert distill task --method bilstm --ema-decay``) measured
level with them on MRPC and STS-B at the searches' steps.

Every token-level recipe reads the teacher's outputs through one teacher cache shared by all
candidates and rounds (``teacher_cache``), so the PyTorch teacher runs once per distinct training
row for the whole search (TinyBERT's intermediate stage's features too: ~0.2 MB a row of SST-2);
the stored logits of the BiLSTM and of students of their own tokenizer are labelled once by the
teacher's export (:mod:`kdbert.compress.labelling`). ``--kd-labels export`` gives every recipe of
logit KD alone those labels too, where the export labels (on a CPU; :func:`reads_stored_logits`):
on SST-2's 16,000 main-job rows the PyTorch teacher beside a bert-2x384-ffn384 took 57% of its
steps until every row had been seen once, but the export's labels cost 0.5 points of dev (1.0 on
the rows that decide) at equal steps over three seeds (BENCHMARKS.md), so they are the choice for
a base-size teacher only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kdbert.compress.options import ROUND_SHARES, CompressConfig
from kdbert.core.hardware import resolve_precision
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate
from kdbert.families.selection import KINDS as SELECTED_KINDS


@dataclass(frozen=True)
class SearchSettings:
    """How the search distils: rungs of successive halving (``rounds``), steps of the first rung
    (doubled each rung), the token-level runs' batch size, learning rate and the decay of their
    weights' moving average (``ema_decay``, 0: none), the most passes over its rows a candidate of
    the teacher's or the user's weights trains (``max_epochs``, None: no limit), the seed, the BiLSTM's
    word vectors, what the BERT-style students' heads read (``pooling``), where the candidates of logit
    KD alone get the teacher's logits (``kd_labels``), whether candidates cut
    from the teacher keep its word embeddings as they start (``word_embeddings``), the share of a TinyBERT run's first rung spent on intermediate matches, and whether
    a rung gives every family the same wall time or the same steps (``round_share``);
    ``max_train_examples`` distils on that many training rows only (None: all), ``train_subset`` says which;
    ``first_round_share``: the most of the search's time rung 0 may spend. Its wall time is the
    search's :class:`~kdbert.compress.search.Window`. The defaults are ``kdbert compress``'s."""

    rounds: int = CompressConfig.rounds
    first_steps: int = CompressConfig.first_steps
    batch_size: int = CompressConfig.batch_size
    learning_rate: float = CompressConfig.learning_rate
    seed: int = CompressConfig.seed
    ema_decay: float = CompressConfig.ema_decay
    max_epochs: float | None = CompressConfig.max_epochs
    word_vectors: str | None = CompressConfig.word_vectors
    pooling: str = CompressConfig.pooling
    word_embeddings: str = CompressConfig.word_embeddings
    intermediate_share: float = CompressConfig.intermediate_share
    kd_labels: str = CompressConfig.kd_labels
    round_share: str = CompressConfig.round_share
    max_train_examples: int | None = CompressConfig.max_train_examples
    train_subset: str = CompressConfig.train_subset
    first_round_share: float = CompressConfig.first_round_share

    @classmethod
    def of(cls, config: CompressConfig) -> SearchSettings:
        """The settings ``config`` gives."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})

    def __post_init__(self):
        if self.rounds < 1 or self.first_steps < 1:
            raise KdbertError(f"--rounds and --first-steps must be positive (got {self.rounds}, {self.first_steps})")
        if not 0.0 <= self.intermediate_share < 1.0:
            raise KdbertError(f"--intermediate-share {self.intermediate_share:g} must be in [0, 1): the prediction "
                              "stage needs steps of its own")
        if not 0.0 < self.first_round_share <= 1.0:
            raise KdbertError(f"--first-round-share {self.first_round_share:g} must be in (0, 1]: the share of "
                              "the search's time the first round may spend")
        if self.round_share not in ROUND_SHARES:
            raise KdbertError(f"--round-share {self.round_share!r}: choose one of {', '.join(ROUND_SHARES)}")


def _weight_selected(candidate: Candidate, steps: int, settings: SearchSettings) -> dict:
    intermediate = int(settings.first_steps * settings.intermediate_share)  # in the first rung
    if not intermediate:
        return {**_kd(candidate, steps, settings), "freeze_word_embeddings": settings.word_embeddings == "kept"}
    # candidates keep the teacher's head size, so narrower ones have fewer heads: attention is
    # matched as the mean over heads
    return {"method": "tinybert", "max_steps": steps - intermediate, "head_average": True,
            "intermediate_max_steps": intermediate, "intermediate_lr": settings.learning_rate}


def _kd(candidate: Candidate, steps: int, settings: SearchSettings) -> dict:
    return {"method": "kd", "max_steps": steps}


def _bilstm(candidate: Candidate, steps: int, settings: SearchSettings) -> dict:
    # the teacher labels every training (and augmented) row once: in bf16 where the runs train in it
    labelling = "bfloat16" if resolve_precision("auto")[0] == "bf16" else "float32"
    options = {"method": "bilstm", "max_steps": steps, "hidden_size": dict(candidate.shape)["hidden_size"],
               "teacher_dtype": labelling}
    if settings.word_vectors:
        options["word_vectors"] = settings.word_vectors
    return options


RECIPES = {**dict.fromkeys(SELECTED_KINDS, _weight_selected), "mobilebert": _kd, "bilstm": _bilstm, "user": _kd,
           "pretrained": _kd}
"""Candidate kind -> ``recipe(candidate, steps, settings)``: the method and its step options."""


def kind_of(name: str) -> str:
    """The kind of the candidate called ``name``: the name up to the first dash (``bert``, ``roberta``,
    ..., ``mobilebert``, ``bilstm``, ``user``, ``pretrained``)."""
    return name.split("-", 1)[0]


def kind(candidate: Candidate) -> str:
    """The candidate's kind (:func:`kind_of` its name)."""
    return kind_of(candidate.name)


def starts_from_teacher(candidate: Candidate) -> bool:
    """Whether the candidate's runs start from its build from the teacher (``--student FOLDER``);
    the BiLSTM builds its own student from the task's words."""
    return candidate.from_teacher is not None


def reads_stored_logits(candidate: Candidate, settings: SearchSettings | None = None,
                        export_labels: bool = False) -> bool:
    """Whether the candidate's runs read the teacher's logits stored for every training row rather
    than the teacher's outputs per batch: the BiLSTM and a student of its own tokenizer always; where
    ``settings`` ask for it (``kd_labels`` "export") and the teacher's export labels the rows
    (``export_labels``), every candidate they distil by logit KD alone too (:func:`distilled_by_kd`:
    the teacher then never runs beside a student)."""
    if not starts_from_teacher(candidate) or candidate.tokenizer is not None:
        return True
    return (export_labels and settings is not None and settings.kd_labels == "export"
            and distilled_by_kd(candidate, settings))


def distilled_by_kd(candidate: Candidate, settings: SearchSettings) -> bool:
    """Whether the candidate's recipe is logit KD alone (no TinyBERT intermediate stage, which matches
    the teacher's features per token), so its soft targets are one output per row."""
    recipe = RECIPES.get(kind(candidate))
    return recipe is not None and recipe(candidate, settings.first_steps, settings)["method"] == "kd"


def run_options(candidate: Candidate, steps: int, settings: SearchSettings, teacher_cache: str,
                export_labels: bool = False) -> dict:
    """The ``kdbert distill task`` options of one candidate's run of ``steps`` optimiser steps
    (evaluated twice: half-way and at the end, the better on held-out rows kept); ``export_labels``:
    the teacher's export labels the rows (:func:`reads_stored_logits`)."""
    recipe = RECIPES.get(kind(candidate))
    if recipe is None:
        raise KdbertError(f"compress has no distillation recipe for {kind(candidate)} candidates "
                          f"({candidate.name}); leave it out with --candidates")
    options = recipe(candidate, steps, settings)
    options.update(seed=settings.seed, eval_every=max(1, options["max_steps"] // 2), no_progress=True)
    if settings.max_train_examples:
        options.update(max_train_examples=settings.max_train_examples, train_subset=settings.train_subset)
    if starts_from_teacher(candidate):  # AdamW at the search's batch and rate, its weights' average scored
        options.update(batch_size=settings.batch_size, learning_rate=settings.learning_rate)
        if settings.ema_decay:
            options["ema_decay"] = settings.ema_decay
    if not reads_stored_logits(candidate, settings, export_labels):
        options["teacher_cache"] = teacher_cache
    return options
