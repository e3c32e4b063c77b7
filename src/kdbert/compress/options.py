"""What ``kdbert compress`` is asked: its options (:class:`CompressConfig`, the command's flags) and
the identity a search's study keeps, which every process joining it must share."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from kdbert.compress.disk import KEEPS
from kdbert.compress.speed import RUNTIMES
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.options import POSITIVE, POSITIVE_INT, TRAIN_SUBSETS, UNIT, CheckedOptions, in_range, option

HELD_OUT_FRACTION = 0.1  # of the training rows, picked on when the task options give none

ROUND_SHARES = ("time", "steps")  # what a rung of the search shares out equally between families


@dataclass
class CompressConfig(CheckedOptions):
    """What ``kdbert compress`` searches for and with which budget."""

    teacher: str | None = option(None, "the fine-tuned teacher (HF folder)", group="compress")
    target_speedup: float | None = option(None, "keep students at least this many times faster than the teacher, "
                                                "both deployed in --runtime, on the task's dev rows", type=float,
                                          group="compress", check=POSITIVE)
    target_latency_ms: float | None = option(None, "or: keep students whose median latency per dev row is at most "
                                                   "this", type=float, group="compress", check=POSITIVE)
    min_kept: float = option(0.97, "the share of the teacher's held-out score the winner must keep", type=float,
                             group="compress", check=UNIT)
    runtime: str = option("onnx-int8", "the runtime students are timed and shipped in", group="compress",
                          choices=tuple(RUNTIMES))
    budget_minutes: float = option(30.0, "wall time of the whole command: timing, distilling the candidates, "
                                         "shipping the winner and the report", type=float, group="compress",
                                   check=POSITIVE)
    rounds: int = option(8, "rungs of successive halving, at most (the budget usually ends the search first)",
                         type=int, group="compress",
                         check=in_range(1, 10, int, what="a number of rounds in [1, 10]"))
    first_steps: int = option(200, "optimiser steps of every candidate's first rung (doubled at each rung; with "
                                   "--round-share time, cheap families get proportionally more)", type=int,
                              group="compress", check=in_range(1, 10**7, int, what="a positive number of steps"))
    workers: int = option(1, "candidates distilled at once on this machine, each in its own process (the CPU cores "
                             "split between them; on GPUs, one GPU each)", type=int, group="compress",
                          check=in_range(1, 64, int, what="a number of workers in [1, 64]"))
    storage: str | None = option(None, "the search's Optuna storage: an SQLAlchemy URL (e.g. postgresql+psycopg://"
                                       "user@host/db) that compress processes on other machines join (default: the "
                                       "journal file study.journal in --output-dir)", group="compress")
    study: str | None = option(None, "the study's name in --storage (default: kdbert-compress)", group="compress")
    candidates: str | None = option(None, "only these candidates (comma-separated names, e.g. bert-2x256); default: "
                                          "every family's", group="compress")
    student: list | None = option(None, "a student of your own (a BERT-family folder or hub id; one of another "
                                        "vocabulary reads its own tokenizer and the teacher's stored logits), timed "
                                        "and distilled from its weights as candidate user-<name> beside the built-in "
                                        "shapes; repeatable", type=list, group="compress")
    length_rows: int = option(200, "dev rows timed per model, each at its own length, batch 1", type=int,
                              group="compress", check=in_range(1, 10**6, int, what="a positive number of rows"))
    threads: int | None = option(None, "CPU threads the runs train on and the runtime is timed at (default: all "
                                       "cores)", type=int, group="compress",
                                 check=in_range(1, 1024, int, what="a positive number of threads"))
    timing_threads: int | None = option(None, "CPU threads the teacher and the students are timed and checked at, as "
                                              "you will serve them (default: --threads, else every core)", type=int,
                                        group="compress",
                                        check=in_range(1, 1024, int, what="a positive number of threads"))
    batch_size: int = option(32, "distillation batch size", type=int, group="compress",
                             check=in_range(1, 10**6, int, what="a positive batch size"))
    learning_rate: float = option(1e-4, "distillation learning rate", type=float, group="compress",
                                  check=in_range(0, 1, low_open=True, what="a learning rate in (0, 1]"))
    seed: int = option(42, "random seed of every distillation run", type=int, group="compress")
    ema_decay: float = option(0.998, "decay of the moving average of an AdamW candidate's weights, which is what "
                                     "is scored and shipped (a rate that never decays, settled as a decayed one "
                                     "would be; BENCHMARKS.md); 0: the trained weights", type=float, group="compress",
                              check=in_range(0, 0.99999, what="a decay in [0, 1)"))
    max_epochs: float | None = option(None, "the most passes over its training rows (and --unlabelled or augmented "
                                            "rows) a candidate cut from the teacher or brought trains in the search, "
                                            "however long the budget (default: no limit but the last rung)",
                                      type=float, group="compress", check=POSITIVE)
    word_vectors: str | None = option(None, "GloVe or word2vec text file the BiLSTM candidates' embeddings start "
                                            "from, or encoder:MODEL (each word through that encoder, e.g. "
                                            "encoder:default) (default: random, 300-d)", group="compress")
    selection: str = option("importance", "which of the teacher's layers, heads, FFN units and hidden units a "
                                          "candidate of its architecture starts from: ranked by importance on the "
                                          "training rows (3-layer cuts at equal steps, three seeds: CoLA +2.4 and "
                                          "MRPC +3.0 points of dev over evenly spaced, BENCHMARKS.md), evenly spaced "
                                          "(layers g(m) = ceil(mN/M)), ends (evenly spaced units of the teacher's "
                                          "first, last and evenly between layers) or bottom (of its first M layers)",
                            group="compress", choices=("importance", "even", "ends", "bottom"))
    head: str = option("teacher", "the task head a candidate cut from the teacher starts with: the teacher's (its "
                                  "output layer on the hidden units the cut keeps; on the main job's SST-2 rows 1.3 "
                                  "points better on the rows that pick after 200 steps over six seeds, level by "
                                  "1,200, BENCHMARKS.md) or fresh; a pair-pooled head starts as a cosine either way",
                       group="compress", choices=("teacher", "fresh"))
    pooling: str = option("pair", "what the transformer candidates' heads read on a sentence-pair task: pair (the two "
                                  "sentences encoded apart, their normalised means multiplied: a learned cosine, a "
                                  "classifier's head fitted on it; BERT, RoBERTa, XLM-R and MPNet candidates; +27 "
                                  "points of STS-B, MRPC's 4x student from 91.6% of the teacher to 96.0%, "
                                  "BENCHMARKS.md), teacher (the pair read as one sequence, pooled as the teacher "
                                  "pools), or auto: pair, except that a classifier cut from the teacher under "
                                  "--head teacher reads the pair as the teacher did, with its head; "
                                  "single-sentence tasks and other architectures keep the teacher's",
                          group="compress", choices=("auto", "teacher", "pair"))
    word_embeddings: str = option("kept", "the word embeddings of candidates cut from the teacher (bert-, roberta-, "
                                          "...): kept as they start, the teacher's (AdamW skips its update over the "
                                          "whole vocabulary: 30% less time a step for a 2-layer 384-wide student, "
                                          "level at equal steps on SST-2, BENCHMARKS.md), or trained",
                                  group="compress", choices=("kept", "trained"))
    intermediate_share: float = option(0.0, "share of a weight-selected candidate's steps (bert-, roberta-, ...) "
                                            "spent on TinyBERT's intermediate stage, its prediction stage after (0: logit KD "
                                            "alone, as every token-level candidate)",
                                       type=float, group="compress", check=in_range(0, 0.9, what="a share in [0, 0.9]"))
    kd_labels: str = option("beside", "where the candidates distilled by logit KD alone get the teacher's logits: "
                                      "beside (the PyTorch teacher runs beside each student, its outputs kept per "
                                      "row for the search) or export (its export labels every row once, 2.4x "
                                      "faster a row on a CPU; the students learn the export's outputs: 0.5 points "
                                      "lower on SST-2 dev at equal steps, BENCHMARKS.md); export suits a base-size "
                                      "teacher, whose PyTorch rows cost 5-8x more",
                            group="compress", choices=("beside", "export"))
    round_share: str = option("time", "what a rung of the search shares out equally between families: wall "
                                      "time (cheap steps, e.g. the BiLSTM's, buy more steps) or steps", group="compress",
                              choices=ROUND_SHARES)
    first_round_share: float = option(1 / 3, "the share of the search's time in which candidates may start their "
                                             "first rung (pre-trained students first, then families in turn, spread "
                                             "over the speed range); "
                                             "promotions go on after it",
                                      type=float, group="compress",
                                      check=in_range(0, 1, low_open=True, what="a share in (0, 1]"))
    max_train_examples: int | None = option(None, "distil on N training rows only (default: all; which: "
                                                  "--train-subset)", type=int, group="compress", check=POSITIVE_INT)
    train_subset: str = option("first", "which rows --max-train-examples keeps: first (the file's first N) or "
                                        "like-dev (where the training rows' lengths differ from dev's, as SST-2's "
                                        "phrases do, rows of dev's lengths first: better students at equal steps, "
                                        "each step about 1.4x longer on SST-2; BENCHMARKS.md)", group="compress",
                               choices=TRAIN_SUBSETS)
    augment: str | None = option(None, "candidate kinds (bert, roberta, xlmr, mpnet, electra, distilbert, mobilebert, "
                                       "bilstm; comma-separated, or all) that "
                                       "also compete as an augmented variant, NAME-aug, trained on the BiLSTM paper's "
                                       "new versions of the training rows as well, labelled by the teacher "
                                       "(default: none)", group="compress")
    transfer_text: list | None = option(None, "augmentation: unlabelled text files the -aug variants also distil on, "
                                              "labelled by the teacher (one text per line, or tab-separated texts; "
                                              "other lines are cut into sentences, e.g. the Wikipedia corpus); "
                                              "half the labelling cap goes to them", type=list, group="compress")
    augment_copies: int = option(20, "augmentation: versions tried per training row, at most", type=int,
                                 group="compress", check=POSITIVE_INT)
    augment_max_rows: int = option(50_000, "augmentation: new rows in all, at most (fewer versions per row on large "
                                           "tasks; the teacher labels each once); a task with more training rows "
                                           "gets no augmented variants", type=int, group="compress",
                                   check=POSITIVE_INT)
    augment_labelling_share: float = option(0.1, "augmentation: the share of --budget-minutes the teacher may "
                                                 "spend labelling the new rows (their number is capped by its "
                                                 "speed, timed here)", type=float, group="compress",
                                            check=in_range(0, 1, low_open=True, what="a share in (0, 1]"))
    nltk_data: str | None = option(None, "augmentation: folder with NLTK's POS tagger (taggers/"
                                         "averaged_perceptron_tagger_eng/; default: NLTK's data path)",
                                   group="compress")
    students_store: str | None = option(None, "where general students are looked for (`kdbert students build`; "
                                               "default: $KDBERT_STUDENTS or ~/.cache/kdbert/students)",
                                        group="compress")
    no_general_students: bool = option(False, "start every BERT-style candidate from the teacher's weights, even "
                                              "where a general student of its shape was built", type=bool,
                                       group="compress")
    teacher_trained_on_all_rows: bool = option(False, "accept a teacher whose folder does not say which training rows "
                                                      "it never trained on (a hub model, another tool's run): hold "
                                                      "out --held-out-fraction of its rows anyway; its score there "
                                                      "reads high, and so do the kept shares (the report says so)",
                                               type=bool, group="compress")
    logits_cache: str | None = option(None, "where the teacher's labels of the rows (the logits the BiLSTM and "
                                            "students of another tokenizer learn from) are kept, shared by every "
                                            "search of the same teacher export (default: "
                                            "$XDG_CACHE_HOME/kdbert/teacher-logits)", group="compress")
    teacher_exports: str | None = option(None, "where the teacher's ONNX exports are kept for later searches of the "
                                               "same teacher on this machine, which read them instead of exporting "
                                               "again (default: $XDG_CACHE_HOME/kdbert/teacher-exports; none: not "
                                               "kept)", group="compress")
    keep: str = option("shipped", "what the output folder keeps once the winner ships: shipped (the report, the "
                                  "winner, the exports and runs of the candidates checked for shipping, without "
                                  "checkpoints) or runs (every candidate's run and checkpoints)", group="compress",
                       choices=KEEPS)
    no_spare_training: bool = option(False, "ship the search's winner as the search left it, even where the "
                                            "budget stopped its training and the finishing has time left over "
                                            "once its graph passed its checks (by default it trains on there and "
                                            "ships if it learnt a later student that passes them too)",
                                     type=bool, group="compress")
    no_progress: bool = option(False, "hide the progress bar of the budget", type=bool, group="run")

    @property
    def speed_threads(self) -> int | None:
        """The threads every timing runs at: ``--timing-threads``, else ``--threads`` (None: all cores)."""
        return self.timing_threads or self.threads

    def check(self) -> None:
        super().check()
        if not self.teacher:
            raise KdbertError("--teacher is required: a model fine-tuned on the task (see `kdbert finetune`)")
        if (self.target_speedup is None) == (self.target_latency_ms is None):
            raise KdbertError("pass one of --target-speedup N or --target-latency-ms L")


# The options a resumed or joined search may change, and why; every other option is part of its identity.
OUTSIDE_IDENTITY = {
    "teacher": "the identity names the teacher's resolved folder instead",
    "budget_minutes": "a resumed search may be given more (or less) time",
    "workers": "how many processes work on the search, not what they run",
    "storage": "where the study is, not what it holds",
    "study": "the study's name, not what it holds",
    "threads": "the speed of the runs, not what they compute",
    "length_rows": "the timings are measured once and reused",
    "first_round_share": "a resumed search plans a new window",
    "augment_copies": "the augmented rows are written once per search and reused",
    "augment_labelling_share": "the augmented rows are written once per search and reused",
    "nltk_data": "where the POS tagger is, not what it tags",
    "students_store": "where general students are looked for; the build found is in the identity",
    "no_general_students": "the identity names the general students' build, or none",
    "no_progress": "what is shown, not what is run",
    "no_spare_training": "what the finishing does once the search has ended, not the search",
    "keep": "what is left on disk after the search, not what it runs",
    "logits_cache": "where labels are kept; each is keyed by the teacher export and the text it labels",
    "teacher_exports": "where the teacher's exports are kept; each is keyed by all that decides it",
}


def search_identity(config: CompressConfig, task: TaskOptions, teacher_dir: str, general: dict | None = None) -> dict:
    """What a study's workers must agree on (:func:`kdbert.compress.storage.open_study`): the teacher,
    the task and rows, every option not in :data:`OUTSIDE_IDENTITY` (so a new option is part of it
    unless said otherwise), and the general students' build that candidates start from (``general``:
    its ``build.json``), if any."""
    options = [f.name for f in fields(config) if f.name not in OUTSIDE_IDENTITY]
    return {"teacher": str(Path(teacher_dir).resolve()), "task": task.task, "train_file": task.train_file,
            "held_out_fraction": task.held_out_fraction,
            "options": {name: getattr(config, name) for name in options},
            "general_students": None if general is None else {key: general[key] for key in ("key", "steps")}}
