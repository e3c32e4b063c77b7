"""``kdbert compress``: the fastest student that keeps the teacher's score, found and proven on this
machine within ``--budget-minutes`` of wall time in all, in four steps (each resumable; every
candidate run is an ordinary run folder), each planned against one deadline
(:mod:`kdbert.compress.budget`):

1. time the exported teacher and every family's candidate shapes in the runtime shipped
   (:mod:`kdbert.compress.speed`), keeping those that meet the speed target (a budget too short to
   time them all times them families in turn, spread over their sizes, and says which it left);
2. build the kept candidates from the teacher and distil them by asynchronous successive halving
   on an Optuna study, in ``--workers`` processes, continuing promoted candidates where they paused
   (:mod:`kdbert.compress.build`, :mod:`kdbert.compress.search`, :mod:`kdbert.compress.schedule`,
   :mod:`kdbert.compress.storage`), with ``--augment`` beside augmented variants of them
   (:mod:`kdbert.compress.augment`);
3. pick the winner on held-out training rows among every candidate trained
   (:func:`kdbert.compress.schedule.pick_winner`);
4. export it as it ships, checked on dev, and write ``compress_report.json`` / ``.md`` and the
   winner's model card (:mod:`kdbert.deploy.model_card`).

Shares in the report: ``kept = student / teacher`` score, and the share of the teacher's gain over
the majority class kept, ``(student - majority) / (teacher - majority)``, which stays meaningful
where the teacher is near chance; agreement: the share of dev rows on which the shipped student
predicts the teacher's class (Pearson x 100 for regression). The shipped export is timed again
with its trained weights, in turns with the exported teacher within the same minutes
(:func:`kdbert.compress.speed.time_against_teacher`: a slow spell of the machine slows both), the
speedup reported, and the speedup is broken down step by step (:mod:`kdbert.compress.breakdown`).
The exports (the teacher's and the winner's) are scored on the dev rows and a sample of the
held-out rows as large as dev (:func:`export_task`), so that their int8 choice and parity check
cost what dev's size does, not the whole held-out set's (6,735 rows on SST-2); the teacher is
scored on all of them once, before anything is timed.

Bad input is refused in one line before anything is written: the options' checks
(``--budget-minutes`` must be positive), an ``--output-dir`` that cannot be written, a teacher that
is not fine-tuned for the task's outputs.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from kdbert.compress.augment import (
    AugmentSettings,
    augment_for_search,
    is_augmented,
    with_variant_rows,
    with_variants,
)
from kdbert.compress.breakdown import format_breakdown, speedup_breakdown, teacher_steps
from kdbert.compress.budget import (TEACHER_EXPORT_SHARE, Deadline, Progress, after_export_seconds, every_core,
                                    export_passes, finishing_seconds, fixed_seconds)
from kdbert.compress import search
from kdbert.compress.recipes import ROUND_SHARES, SearchSettings
from kdbert.compress.schedule import Goal, latest, pick_winner, spread_order
from kdbert.compress.search import Plan, Window, check_budget, first_round_seconds, teacher_row_seconds
from kdbert.compress.storage import journal_path, open_study
from kdbert.compress.speed import (
    RUNTIMES,
    SpeedSettings,
    all_candidates,
    measure_speed,
    meeting_target,
    shape_context,
    time_against_teacher,
    time_teacher,
)
from kdbert.core.atomic_io import write_json
from kdbert.core.evaluate import agreement
from kdbert.core.metrics import compute_metrics, task_score
from kdbert.core.qa_evaluate import answer_agreement
from kdbert.data.load import TaskOptions, is_data_file, load_task
from kdbert.deploy.export import export_model
from kdbert.deploy.model_card import write_compress_card
from kdbert.deploy.onnx_runtime import OnnxClassifier
from kdbert.deploy.report import build_table, plot_pareto
from kdbert.errors import KdbertError
from kdbert.families.registry import family_of_folder
from kdbert.options import POSITIVE, POSITIVE_INT, UNIT, CheckedOptions, in_range, option

REPORT = "compress_report.json"
HELD_OUT_FRACTION = 0.1  # of the training rows, picked on when the task options give none
PLOT = "pareto.png"
SHIPPED_SPEED = "shipped_speed.json"


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
    length_rows: int = option(200, "dev rows timed per model, each at its own length, batch 1", type=int,
                              group="compress", check=in_range(1, 10**6, int, what="a positive number of rows"))
    threads: int | None = option(None, "CPU threads of the timed runtime (default: all cores)", type=int,
                                 group="compress", check=in_range(1, 1024, int, what="a positive number of threads"))
    batch_size: int = option(32, "distillation batch size", type=int, group="compress",
                             check=in_range(1, 10**6, int, what="a positive batch size"))
    learning_rate: float = option(1e-4, "distillation learning rate", type=float, group="compress",
                                  check=in_range(0, 1, low_open=True, what="a learning rate in (0, 1]"))
    seed: int = option(42, "random seed of every distillation run", type=int, group="compress")
    word_vectors: str | None = option(None, "GloVe or word2vec text file the BiLSTM candidates' embeddings start "
                                            "from (default: random, 300-d)", group="compress")
    intermediate_share: float = option(0.0, "share of a BERT-style candidate's steps spent on TinyBERT's "
                                            "intermediate stage (0: the prediction stage only)", type=float,
                                       group="compress", check=in_range(0, 0.9, what="a share in [0, 0.9]"))
    round_share: str = option("time", "what a rung of the search shares out equally between families: wall "
                                      "time (cheap steps, e.g. the BiLSTM's, buy more steps) or steps", group="compress",
                              choices=ROUND_SHARES)
    first_round_share: float = option(1 / 3, "the share of the search's time in which candidates may start their "
                                             "first rung (families in turn, spread over the speed range); "
                                             "promotions go on after it",
                                      type=float, group="compress",
                                      check=in_range(0, 1, low_open=True, what="a share in (0, 1]"))
    max_train_examples: int | None = option(None, "distil on the first N training rows only (default: all)", type=int,
                                            group="compress",
                                            check=POSITIVE_INT)
    augment: str | None = option(None, "candidate kinds (bert, mobilebert, bilstm; comma-separated, or all) that "
                                       "also compete as an augmented variant, NAME-aug, trained on the BiLSTM paper's "
                                       "new versions of the training rows as well, labelled by the teacher "
                                       "(default: none)", group="compress")
    augment_copies: int = option(20, "augmentation: versions tried per training row, at most", type=int,
                                 group="compress", check=POSITIVE_INT)
    augment_max_rows: int = option(50_000, "augmentation: new rows in all, at most (fewer versions per row on large "
                                           "tasks; the teacher labels each once)", type=int, group="compress",
                                   check=POSITIVE_INT)
    augment_labelling_share: float = option(0.1, "augmentation: the share of --budget-minutes the teacher may "
                                                 "spend labelling the new rows (their number is capped by its "
                                                 "speed, timed here)", type=float, group="compress",
                                            check=in_range(0, 1, low_open=True, what="a share in (0, 1]"))
    nltk_data: str | None = option(None, "augmentation: folder with NLTK's POS tagger (taggers/"
                                         "averaged_perceptron_tagger_eng/; default: NLTK's data path)",
                                   group="compress")
    no_progress: bool = option(False, "hide the progress bar of the budget", type=bool, group="run")

    def check(self) -> None:
        super().check()
        if not self.teacher:
            raise KdbertError("--teacher is required: a model fine-tuned on the task (see `kdbert finetune`)")
        if (self.target_speedup is None) == (self.target_latency_ms is None):
            raise KdbertError("pass one of --target-speedup N or --target-latency-ms L")


def _majority_score(data) -> float | None:
    """The dev score of always answering the most frequent training label (the mean for regression);
    ``None`` for question answering, which has no such constant answer."""
    if data.spec.question_answering:
        return None
    labels = [row.label for row in data.train]
    if data.spec.is_regression:
        constant = sum(labels) / len(labels)
    else:
        constant = Counter(labels).most_common(1)[0][0]
    metrics = {}
    for name, rows in data.dev.items():
        predictions = np.full(len(rows), constant, dtype=float if data.spec.is_regression else int)
        references = np.array([row.label for row in rows])
        metrics.update(compute_metrics(data.spec.metrics, predictions, references,
                                       "" if len(data.dev) == 1 else f"{name}/"))
    return task_score(metrics, data.spec.metrics, tuple(data.dev))


def _dev_outputs(data, evaluator, model):
    """What the agreement compares of a model (scored by ``evaluator``, its own): its logits over
    every dev split's rows, or for QA its answer to every dev question."""
    if data.spec.question_answering:
        return evaluator.dev_answers(model)
    return np.concatenate([evaluator.predict(model, d) for d in evaluator.splits.values()])


def _agreement(data, teacher_outputs, shipped_folder: Path, file_name: str) -> float:
    """Dev agreement (:func:`kdbert.core.evaluate.agreement`; QA: the share of questions with the
    teacher's answer, :func:`kdbert.core.qa_evaluate.answer_agreement`) of the shipped export with
    the teacher's ``teacher_outputs`` (:func:`_dev_outputs`)."""
    student = OnnxClassifier(shipped_folder / file_name)
    student_outputs = _dev_outputs(data, student.family.evaluator(data, student.encoder, None, 64), student)
    if data.spec.question_answering:
        return answer_agreement(student_outputs, teacher_outputs)
    return agreement(data.spec, student_outputs, teacher_outputs)


def _agreement_measure(spec) -> str:
    if spec.question_answering:
        return "% of questions, same answer"
    return "Pearson r x 100" if spec.is_regression else "% of rows, same class"


def _export_dev_scores(export_folder: Path) -> dict[str, float]:
    """An export's dev score per runtime (``onnx_fp32``, ``onnx_int8``; empty for an export made
    without a task)."""
    report = json.loads((export_folder / "export_report.json").read_text())
    return {runtime: metrics["score"] for runtime, metrics in report.get("dev_metrics", {}).items()}


def _shipped_speed(winner: dict, out: Path, task: TaskOptions, settings: SpeedSettings) -> dict:
    """The shipped winner timed in turns with the exported teacher
    (:func:`~kdbert.compress.speed.time_against_teacher`), kept in ``out/shipped_speed.json`` for
    that run and those settings, so that a rerun reports the same figures."""
    key = {"winner": str(winner["run"]), "settings": settings.key()}
    path = out / SHIPPED_SPEED
    if path.is_file():
        previous = json.loads(path.read_text())
        if previous.get("key") == key:
            return previous["timing"]
    file_name = RUNTIMES[settings.runtime]
    timing = time_against_teacher(out / "teacher-onnx" / file_name, out / "winner" / file_name, task, settings)
    write_json(path, {"key": key, "timing": timing})
    return timing


def _ship(winner: dict, out: Path, task: TaskOptions, runtime: str, int8_time_left) -> dict:
    """The winner's run exported as it ships (int8 for ``onnx-int8``; ``int8_time_left()``: the
    seconds its int8 choice may still make static methods in), checked on dev; reused when the
    folder already holds the export of that run."""
    folder = out / "winner"
    report_path = folder / "export_report.json"
    if report_path.is_file():
        previous = json.loads(report_path.read_text())
        if previous.get("source") == str(winner["run"]):
            return previous
    return export_model(winner["run"], folder, quantize="int8" if runtime == "onnx-int8" else None, task=task,
                        int8_time_left=int8_time_left)


def teacher_saw_held_out_rows(teacher_dir: str, task: TaskOptions) -> bool | None:
    """Whether the teacher was fine-tuned on the rows the search holds out to pick on: ``False`` for a
    ``kdbert finetune`` folder of the same task and training file that held out the same share (the
    same seeded rows, :func:`kdbert.data.load.hold_out`), ``True`` for one that held out none or
    another share, ``None`` where the folder does not say (a hub model, another tool's folder,
    another task's teacher)."""
    config = Path(teacher_dir) / "run_config.json"
    if not config.is_file():
        return None
    recorded = json.loads(config.read_text())
    if (recorded.get("command"), recorded.get("task"), recorded.get("train_file")) != (
            "finetune", task.task, task.train_file):
        return None
    return recorded.get("held_out_fraction", 0.0) != task.held_out_fraction


def check_output_dir(out: Path) -> None:
    """Refuse an ``--output-dir`` that cannot be written (a file, or below a file or a folder this
    process cannot create files in: tried with a temporary file, removed at once, since permission
    bits do not tell for root or for read-only and virtual file systems) before anything is written."""
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise KdbertError(f"--output-dir {out}: {existing} is a file, not a folder; choose another --output-dir")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise KdbertError(f"--output-dir {out}: cannot create files in {existing} ({err.strerror}); choose "
                          "another --output-dir") from None


def _offered(context, names: str | None) -> list:
    """Every family's candidates, or the ``--candidates`` named."""
    offered = all_candidates(context)
    if not names:
        return offered
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = sorted(set(wanted) - {c.name for c in offered})
    if unknown:
        raise KdbertError(f"--candidates: unknown {', '.join(unknown)}; this teacher offers "
                          f"{', '.join(c.name for c in offered)}")
    return [c for c in offered if c.name in wanted]


def _latency_ratio(config: CompressConfig, table: dict | None = None, kept: list | None = None) -> float:
    """The winner's latency over the teacher's, at most: the slowest ``kept`` candidate's, or before
    they are timed, what the target allows (at most 1; a latency target, before the teacher is
    timed: 1)."""
    if kept is not None:
        return max(table["candidates"][c.name]["latency_real_p50_ms"] for c in kept) / \
            table["teacher"]["latency_real_p50_ms"]
    if config.target_speedup is not None:
        return min(1.0, 1.0 / config.target_speedup)
    return 1.0 if table is None else min(1.0, config.target_latency_ms / table["teacher"]["latency_real_p50_ms"])


@dataclass
class _Teacher:
    """The teacher as the search and the report see it: its folder, model and tokenizer, its scores
    on the dev and held-out rows and the seconds they took, its dev outputs for the agreement and
    the seconds they took, then from step 1 its deployed scores and its steps of the speedup
    breakdown."""

    folder: str
    model: object
    tokenizer: object
    metrics: dict
    pass_seconds: float
    outputs: object
    dev_seconds: float
    deployed: dict | None = None
    steps: list[dict] | None = None


def _checked_teacher(config: CompressConfig, data) -> _Teacher:
    """The teacher loaded for the task (one that is not fine-tuned for its outputs is refused), with
    its dev outputs, timed."""
    folder = str(Path(config.teacher).expanduser())
    if not Path(folder).is_dir():
        raise KdbertError(f"--teacher {folder} is not a folder; pass a model fine-tuned on the task "
                          "(see `kdbert finetune`)")
    family = family_of_folder(folder)
    model, tokenizer = family.load(Path(folder), data.spec)
    evaluator = family.evaluator(data, tokenizer, None, 64)
    started = time.time()
    metrics = evaluator(model)
    scored = time.time()
    outputs = _dev_outputs(data, evaluator, model)
    return _Teacher(folder, model, tokenizer, metrics, scored - started, outputs, time.time() - scored)


def _characters(rows) -> int:
    return sum(len(text) for row in rows for text in row.texts)


def export_task(task: TaskOptions, data) -> TaskOptions:
    """The task the exports are scored on: its dev rows and, of the rows the search holds out, as many
    as dev has, a subset of them (a smaller ``held_out_fraction`` holds out a prefix of the same
    seeded order, :func:`kdbert.data.load.hold_out`)."""
    dev_rows = sum(len(rows) for rows in data.dev.values())
    return replace(task, held_out_fraction=min(task.held_out_fraction,
                                               dev_rows / (len(data.train) + len(data.held_out))))


def _check_fits(config: CompressConfig, teacher: _Teacher, data, offered: list, settings: SearchSettings,
                train_rows: int, spent: float) -> None:
    """Refuse, before anything is written, a budget shorter than what compress needs on this machine
    whatever it searches: the ``spent`` seconds of loading and scoring the teacher, then
    :func:`~kdbert.compress.budget.fixed_seconds` and one first round, at the
    teacher's measured speed on the dev and held-out rows, per character of text (the exports'
    held-out sample, :func:`export_task`, costs its share of them)."""
    dev = [row for rows in data.dev.values() for row in rows]
    sample = min(len(dev), len(data.held_out))
    scored_characters = _characters(dev) + _characters(data.held_out) * sample / max(1, len(data.held_out))
    pass_seconds = teacher.pass_seconds * scored_characters / max(1, _characters(dev) + _characters(data.held_out))
    row_seconds = teacher.pass_seconds / (len(dev) + len(data.held_out))
    rows, first_round = first_round_seconds(offered, settings, train_rows, row_seconds)
    needed = spent + fixed_seconds(pass_seconds, config.runtime, _latency_ratio(config)) + first_round
    if needed > 60 * config.budget_minutes:
        raise KdbertError(f"--budget-minutes {config.budget_minutes:g} is too short for this teacher on this machine: "
                          f"exporting it and the winner scores {len(dev) + sample} dev and held-out rows "
                          f"{export_passes(config.runtime)} times each (the int8 choice and the parity check), "
                          f"{pass_seconds:.0f} s a time for the teacher here, and one first round runs the teacher on "
                          f"{rows} rows: about {needed / 60:.1f} min with the {spent:.0f} s spent loading and scoring "
                          f"the teacher; give it at least {math.ceil(needed / 60)} min")


def _time_teacher(teacher: _Teacher, task: TaskOptions, out: Path, settings: SpeedSettings, deadline: Deadline) -> dict:
    """Step 1 for the teacher: exported (scored on ``task``, :func:`export_task`; static int8 methods
    while it stays within ``TEACHER_EXPORT_SHARE`` of the budget) and timed
    (:func:`~kdbert.compress.speed.time_teacher`), its deployed scores read from its export and its
    steps of the speedup breakdown timed; returns the speed table."""
    export_end = deadline.clock() + TEACHER_EXPORT_SHARE * 60 * deadline.minutes
    table = time_teacher(teacher.folder, task, out, settings, int8_time_left=lambda: export_end - deadline.clock())
    teacher.deployed = _export_dev_scores(out / "teacher-onnx")
    teacher.steps = teacher_steps(teacher.folder, out, task, settings, table["teacher"], {
        "teacher": teacher.metrics["score"], "teacher_onnx_fp32": teacher.deployed.get("onnx_fp32"),
        "teacher_onnx_int8": teacher.deployed.get("onnx_int8")})
    return table


def _finishing(config: CompressConfig, table: dict, teacher: _Teacher, kept: list | None = None) -> float:
    """:func:`~kdbert.compress.budget.finishing_seconds` for the slowest of ``kept`` (before timing: the
    slowest the target allows, its own export not known yet)."""
    exports = [table["candidates"][c.name].get("export_seconds", 0.0) for c in kept or ()]
    return finishing_seconds(table["teacher"], _latency_ratio(config, table, kept), max(exports, default=0.0),
                             teacher.dev_seconds, every_core(config.threads))


def _timing_order(offered: list) -> list:
    """The order candidates are timed in: families in turn, each spread over its sizes (the product of
    its shape's numbers, which grows with each of them) by :func:`~kdbert.compress.schedule.spread_order`."""
    return spread_order(offered, {c.name: math.prod(dict(c.shape).values()) for c in offered})


def compress(task: TaskOptions, config: CompressConfig, output_dir: str | os.PathLike,
             clock=time.time, command: str | list[str] | None = None) -> dict:
    """Run the four steps (module doc) into ``output_dir`` within ``config.budget_minutes`` from now
    (``clock``: :class:`~kdbert.compress.budget.Deadline`'s; ``command``: the command line, for the
    winner's model card); returns the report."""
    config.check()
    deadline = Deadline(config.budget_minutes, clock)
    if not task.held_out_fraction:
        task = replace(task, held_out_fraction=HELD_OUT_FRACTION)
    out = Path(output_dir)
    check_output_dir(out)
    augment = AugmentSettings.parse(config.augment, copies=config.augment_copies, max_rows=config.augment_max_rows,
                                    nltk_data=config.nltk_data, labelling_share=config.augment_labelling_share)
    saw_held_out = teacher_saw_held_out_rows(str(Path(config.teacher).expanduser()), task)
    if saw_held_out:
        print(f"note: the teacher was fine-tuned on the {task.held_out_fraction:.0%} of training rows this search "
              "holds out to pick on, so it scores optimistically there and they may rank students unlike dev; "
              f"`kdbert finetune --held-out-fraction {task.held_out_fraction:g}` gives a teacher without them")
    data = load_task(task)
    teacher = _checked_teacher(config, data)
    context = shape_context(teacher.folder, task, config.word_vectors)
    offered = _offered(context, config.candidates)
    search_settings = SearchSettings(**{f.name: getattr(config, f.name) for f in fields(SearchSettings)})
    train_rows = data.train[: config.max_train_examples] if config.max_train_examples else data.train
    new_folder, new_journal = not out.exists(), config.storage is None and not journal_path(out).exists()
    study = open_study(out, search_identity(config, task, teacher.folder), config.storage, config.study)
    if search.other_leader(study) or search.ended_elsewhere(study, out):
        return _join(study, config, task, out, context, offered, augment, search_settings)
    progress = Progress(deadline, enabled=not config.no_progress)
    try:
        if not search.under_way(study):  # a search under way was judged when it started
            _check_fits(config, teacher, data, offered, search_settings, len(train_rows), deadline.spent())
        with search.leading(study, out):
            return _compress(task, config, out, data, train_rows, teacher, context, offered, augment,
                             search_settings, deadline, progress, saw_held_out, study, command)
    except KdbertError:
        if new_journal and not search.under_way(study):  # refused before the search: nothing left behind
            journal_path(out).unlink(missing_ok=True)
            if new_folder and not any(out.iterdir()):
                out.rmdir()
        raise
    finally:
        progress.close()


def search_identity(config: CompressConfig, task: TaskOptions, teacher_dir: str) -> dict:
    """What a study's workers must agree on (:func:`kdbert.compress.storage.open_study`): the teacher,
    the task and rows, and every option that changes what a candidate's run is or who wins."""
    options = ("target_speedup", "target_latency_ms", "min_kept", "runtime", "rounds", "first_steps", "candidates",
               "batch_size", "learning_rate", "seed", "word_vectors", "intermediate_share", "round_share",
               "max_train_examples", "augment")
    return {"teacher": str(Path(teacher_dir).resolve()), "task": task.task, "train_file": task.train_file,
            "held_out_fraction": task.held_out_fraction,
            "options": {name: getattr(config, name) for name in options}}


def _join(study, config: CompressConfig, task: TaskOptions, out: Path, context, offered, augment,
          settings: SearchSettings) -> None:
    """Work on the search another live process leads (same ``--storage``/``--study``, this machine
    seeing its output folder); that process ships the winner."""
    plan_attrs = search.wait_for_plan(study)
    leading = study.user_attrs[search.LEADER_ATTR]
    leader = leading["worker"]
    if study.user_attrs.get(search.ENDED_ATTR):
        print(f"study '{study.study_name}' has ended: nothing left to distil (its winner is shipped by {leader} "
              f"into {leading['output_dir']}/winner)")
        return None
    by_name = {c.name: c for c in with_variants(offered, augment.kinds)}
    plan = Plan([by_name[name] for name in plan_attrs["candidates"]], str(Path(config.teacher).expanduser()),
                task, str(out), settings, Goal(**plan_attrs["goal"]), Window(**plan_attrs["window"]), config.threads)
    missing = search.missing_starts(plan)
    if missing:
        raise KdbertError(f"--output-dir {out} has no start for {', '.join(missing)}: a process joining study "
                          f"'{study.study_name}' must use the output folder of the search {leader} leads "
                          "(shared with this machine, e.g. over NFS)")
    ran = search.work(study, plan, lambda row: print(search.segment_line(row), flush=True))
    print(f"joined study '{study.study_name}': {ran} segment(s) distilled here; {leader} ships the winner")
    return None


def _compress(task, config, out, data, train_rows, teacher: _Teacher, context, offered, augment, search_settings,
              deadline: Deadline, progress: Progress, saw_held_out, study, command=None) -> dict:
    speed_settings = SpeedSettings(config.runtime, config.threads, config.length_rows)
    scored = export_task(task, data)
    with progress.phase("timing"):
        table = _time_teacher(teacher, scored, out, speed_settings, deadline)
        first_round = first_round_seconds(offered, search_settings, len(train_rows), teacher_row_seconds(table))[1]
        stop_at = deadline.end - _finishing(config, table, teacher) - first_round
        table = measure_speed(teacher.folder, scored, out, speed_settings, _timing_order(offered), context,
                              stop_at=stop_at, clock=deadline.clock)
    untimed = [c.name for c in offered if c.name not in table["candidates"]]
    if untimed:
        progress.line(f"timed {len(offered) - len(untimed)} of {len(offered)} candidates: the budget leaves no time "
                      f"for {', '.join(untimed)} (a rerun with a larger --budget-minutes times them)")
    timed = [c for c in offered if c.name in table["candidates"]]
    try:
        fast = set(meeting_target({**table, "candidates": {c.name: table["candidates"][c.name] for c in timed}},
                                  config.target_speedup, config.target_latency_ms))
    except KdbertError as err:
        if not untimed:
            raise
        raise KdbertError(f"--budget-minutes {config.budget_minutes:g} left time to time {len(timed)} of "
                          f"{len(offered)} candidates on this machine ({deadline.spent():.0f} s spent) and none of "
                          f"them meets the target ({str(err).split(': ', 1)[1].split('; ')[0]}); raise "
                          "--budget-minutes") from None
    kept = with_variants([c for c in timed if c.name in fast], augment.kinds)
    table = with_variant_rows(table, kept)
    latency = {name: row["latency_real_p50_ms"] for name, row in table["candidates"].items()}
    kept = spread_order(kept, latency)
    reserve = _finishing(config, table, teacher, kept)
    if not search.under_way(study):  # a search under way was judged when it started
        check_budget(table, kept, search_settings, len(train_rows), config.budget_minutes, deadline.left() - reserve)
    augmentation = None
    with progress.phase("search"):
        if any(is_augmented(c.name) for c in kept):
            text_fields = list(task.text_columns) if is_data_file(task.task) else list(data.spec.text_fields)
            augmentation = augment_for_search(teacher.model, teacher.tokenizer, data.spec, train_rows, text_fields,
                                              out, augment, config.budget_minutes * 60, config.seed)
        window = Window.from_now(deadline.left() - reserve, config.first_round_share)
        goal = Goal(teacher.metrics["selection_score"], config.min_kept, latency)
        plan = Plan(kept, teacher.folder, task, str(out), search_settings, goal, window, config.threads)
        searched = search.run_search(plan, study, config.workers, config.storage, config.study,
                                     search_identity(config, task, teacher.folder), progress.segment_finished,
                                     context, (teacher.model, teacher.tokenizer))
    with progress.phase("finishing"):
        report = _finish(scored, config, out, data, teacher, table, searched, goal, speed_settings, deadline)
    report.update(augmentation=augmentation, teacher_saw_held_out_rows=saw_held_out, budget={
        "minutes": config.budget_minutes, "finishing_reserve_seconds": round(reserve, 1), "untimed": untimed,
        "phase_seconds": progress.phase_seconds(), "seconds": round(deadline.spent(), 1)})
    _write_report(report, out, config.runtime)
    write_compress_card(out / "winner", report, data, task.held_out_fraction, len(train_rows), command)
    progress.line(f"compress: {deadline.spent() / 60:.1f} min of --budget-minutes {config.budget_minutes:g} ("
                  + ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in progress.phase_seconds().items())
                  + " min)")
    return report


def _finish(task, config: CompressConfig, out: Path, data, teacher: _Teacher, table: dict, searched: dict,
            goal: Goal, speed_settings: SpeedSettings, deadline: Deadline) -> dict:
    """Step 4: the winner picked, exported (scored on ``task``, :func:`export_task`, its static int8
    methods only while they leave the rest its time), timed in turns with the teacher, broken down
    and compared; the report (without the budget's figures)."""
    winner = pick_winner([{**row, "state": "done"} for row in searched["segments"]], goal)
    winner = {**winner, "latency_real_p50_ms": table["candidates"][winner["candidate"]]["latency_real_p50_ms"]}
    winner.pop("state")
    ratio = winner["latency_real_p50_ms"] / table["teacher"]["latency_real_p50_ms"]
    after = after_export_seconds(table["teacher"], ratio, teacher.dev_seconds, every_core(config.threads))
    shipped = _ship(winner, out, task, config.runtime, int8_time_left=lambda: deadline.left() - after)
    file_name = RUNTIMES[config.runtime]
    in_turns = _shipped_speed(winner, out, task, speed_settings)
    runtime_key = "onnx_int8" if config.runtime == "onnx-int8" else "onnx_fp32"
    majority = _majority_score(data)
    student_dev, teacher_dev = shipped["dev_metrics"][runtime_key]["score"], teacher.metrics["score"]
    breakdown = speedup_breakdown(teacher.steps, out, task, speed_settings, student_dev, winner["run"],
                                  in_turns["latency_real_p50_ms"]["student"])
    return {
        "task": data.spec.name, "teacher": teacher.folder, "runtime": config.runtime,
        "target": {"speedup": config.target_speedup, "latency_ms": config.target_latency_ms,
                   "min_kept": config.min_kept},
        "held_out_rows": len(data.held_out), "speed": table, "search": searched,
        "winner": winner,
        "seconds_per_candidate": _seconds_per_candidate(searched), "speedup_breakdown": breakdown,
        "teacher_scores": {"held_out": teacher.metrics["selection_score"], "dev": teacher_dev,
                           "dev_deployed": teacher.deployed.get(runtime_key)},
        "shipped": {"folder": str(out / "winner"), "dev_score": student_dev, "parity": shipped["parity"],
                    "int8": shipped.get("quantization"),
                    "speedup": in_turns["speedup"]["student"],
                    "speedup_random_weights": table["candidates"][winner["candidate"]]["speedup"],
                    "latency_real_p50_ms": in_turns["latency_real_p50_ms"]["student"],
                    "teacher_latency_real_p50_ms": in_turns["latency_real_p50_ms"]["teacher"],
                    "timed_in_turns": in_turns["rounds"],
                    "kept_dev": student_dev / teacher_dev,
                    "gain_kept_dev": (student_dev - majority) / (teacher_dev - majority)
                    if majority is not None and teacher_dev != majority else None,
                    "majority_dev": majority,
                    "agreement_dev": _agreement(data, teacher.outputs, out / "winner", file_name),
                    "agreement_measure": _agreement_measure(data.spec)},
    }


def _write_report(report: dict, out: Path, runtime: str) -> None:
    write_json(out / REPORT, report)
    plotted = plot_pareto(build_table(_plot_records(report)), out / PLOT, latency="onnx_int8",
                          title=f"kdbert compress, {report['task']}: dev score against ms per dev row "
                                f"({runtime}, batch 1)")
    (out / "compress_report.md").write_text(format_report(report, PLOT if plotted else None))


def _seconds_per_candidate(searched: dict) -> dict[str, float]:
    """Wall seconds each candidate's distillation took, over all its segments."""
    seconds: dict[str, float] = {}
    for row in searched["segments"]:
        seconds[row["candidate"]] = round(seconds.get(row["candidate"], 0.0) + row["seconds"], 1)
    return seconds


def _last_runs(report: dict) -> dict[str, dict]:
    """Each distilled candidate's segment with the most steps (in a report of the engine before the
    study, recorded in BENCHMARKS.md: its run in the last round it reached)."""
    searched = report["search"]
    if "segments" not in searched:
        return {row["candidate"]: {**row, "score": row["selection_score"]} for rows in searched["rounds"] for row in rows}
    return latest([{**row, "state": "done"} for row in searched["segments"]])


def _plot_records(report: dict) -> list[dict]:
    """:func:`kdbert.deploy.report.build_table` records of the teacher and every distilled candidate:
    dev score (PyTorch) against the deployed latency per dev row; the latency axis says ORT int8
    for either runtime's figure."""
    speed = report["speed"]
    records = [{"name": "teacher", "task": report["task"], "score": report["teacher_scores"]["dev"],
                "teacher": True, "params": speed["teacher"]["params_total"],
                "latency_onnx_int8_ms": speed["teacher"]["latency_real_p50_ms"]}]
    for name, run in _last_runs(report).items():
        row = speed["candidates"][name]
        records.append({"name": name, "task": report["task"], "score": run["dev_score"], "teacher": False,
                        "params": row["params_total"], "latency_onnx_int8_ms": row["latency_real_p50_ms"]})
    return records


def format_report(report: dict, plot: str | None = None) -> str:
    """The report as Markdown: the winner, then every candidate timed (and distilled). Reports
    written before a figure existed (the trained export's timing, agreement, time per candidate,
    the method per run: logit KD then) render without it."""
    shipped, speed = report["shipped"], report["speed"]
    finals = _last_runs(report)
    seconds = report.get("seconds_per_candidate", {})
    teacher_ms = shipped.get("teacher_latency_real_p50_ms", speed["teacher"]["latency_real_p50_ms"])
    turns = f", timed in turns with the teacher {len(shipped['timed_in_turns'])} times" if "timed_in_turns" in shipped else ""
    timed = (f" (trained export, {shipped['latency_real_p50_ms']:.2f} against {teacher_ms:.2f} ms{turns})"
             if "latency_real_p50_ms" in shipped else "")
    gain = (f", {100 * shipped['gain_kept_dev']:.1f}% of the gain over the majority class {shipped['majority_dev']:.2f}"
            if shipped["gain_kept_dev"] is not None else "")
    agreement_text = (f"; agreement with the teacher on dev: {shipped['agreement_dev']:.1f} "
                      f"({shipped['agreement_measure']})" if "agreement_dev" in shipped else "")
    deployed = (f" (the teacher in {report['runtime']}: {report['teacher_scores']['dev_deployed']:.2f})"
                if report["teacher_scores"].get("dev_deployed") is not None else "")
    saw = report.get("teacher_saw_held_out_rows")
    held_out_note = ("" if saw is None else
                     f"{report['held_out_rows']} training rows held out to pick on; the teacher was fine-tuned "
                     + ("on them too, so its held-out score is optimistic." if saw else "without them."))
    lines = [f"# kdbert compress: {report['task']}, {report['runtime']}", "",
             *([held_out_note, ""] if held_out_note else []),
             f"Winner: **{report['winner']['candidate']}** ({report['winner']['rule']}): "
             f"{shipped['speedup']:.2f}x the teacher's speed on dev rows{timed}, dev score {shipped['dev_score']:.2f} "
             f"against {report['teacher_scores']['dev']:.2f}{deployed} ({100 * shipped['kept_dev']:.1f}% kept{gain})"
             f"{agreement_text}.", "",
             "| model | ms / dev row (p50) | speedup | held-out score | dev score (PyTorch) | method | steps "
             "| distillation time |",
             "|---|---:|---:|---:|---:|---|---:|---:|",
             f"| teacher | {speed['teacher']['latency_real_p50_ms']:.2f} | 1.00x | "
             f"{report['teacher_scores']['held_out']:.2f} | {report['teacher_scores']['dev']:.2f} | - | - | - |"]
    for name, row in sorted(speed["candidates"].items(), key=lambda item: item[1]["latency_real_p50_ms"]):
        run = finals.get(name)
        lines.append(f"| {name} | {row['latency_real_p50_ms']:.2f} | {row['speedup']:.2f}x | "
                     + (f"{run['score']:.2f} | {run['dev_score']:.2f} | {run.get('method', 'kd')} | "
                        f"{run['steps']} | " + (f"{seconds[name] / 60:.1f} min |" if name in seconds else "- |")
                        if run else "- | - | - | - | - |"))
    if report.get("augmentation"):
        facts = report["augmentation"]
        sources = facts.get("augmented_rows", facts["input_rows"])
        lines += ["", f"Candidates named -aug also trained on {facts['rows']} new versions of "
                      + (f"the first {sources} of the " if sources < facts["input_rows"] else "the ")
                      + f"{facts['input_rows']} training rows (the BiLSTM paper's rules, up to "
                      f"{facts['tries_per_row']} tries a row; the held-out rows not among them), labelled by the "
                      "teacher."]
    if report.get("speedup_breakdown"):
        lines += ["", "Where the speedup comes from, one change at a time (batch 1, dev rows):", "",
                  *format_breakdown(report["speedup_breakdown"])]
    if plot:
        lines += ["", f"![dev score against latency]({plot})"]
    return "\n".join(lines) + "\n"
