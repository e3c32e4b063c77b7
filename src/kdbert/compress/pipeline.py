"""``kdbert compress``: the fastest student that keeps the teacher's score, found and proven on this
machine, in four steps (each resumable; every candidate run is an ordinary run folder):

1. time the exported teacher and every family's candidate shapes in the runtime shipped
   (:mod:`kdbert.compress.speed`), keeping those that meet the speed target;
2. build the kept candidates from the teacher and distil them by successive halving
   (:mod:`kdbert.compress.build`, :mod:`kdbert.compress.search`), with ``--augment`` beside
   augmented variants of them (:mod:`kdbert.compress.augment`);
3. pick the winner on held-out training rows (:func:`kdbert.compress.search.pick_winner`);
4. export it as it ships, checked on dev, and write ``compress_report.json`` / ``.md``.

Shares in the report: ``kept = student / teacher`` score, and the share of the teacher's gain over
the majority class kept, ``(student - majority) / (teacher - majority)``, which stays meaningful
where the teacher is near chance; agreement: the share of dev rows on which the shipped student
predicts the teacher's class (Pearson x 100 for regression). The shipped export is timed again
with its trained weights, in turns with the exported teacher within the same minutes
(:func:`kdbert.compress.speed.time_against_teacher`: a slow spell of the machine slows both), the
speedup reported, and the speedup is broken down step by step (:mod:`kdbert.compress.breakdown`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kdbert.compress.augment import (
    AugmentSettings,
    augment_for_search,
    is_augmented,
    with_variant_rows,
    with_variants,
)
from kdbert.compress.breakdown import format_breakdown, speedup_breakdown
from kdbert.compress.recipes import ROUND_SHARES, SearchSettings
from kdbert.compress.search import STATE as SEARCH_STATE
from kdbert.compress.search import check_budget, pick_winner, spent_seconds, spread_order, successive_halving
from kdbert.compress.speed import (
    RUNTIMES,
    SpeedSettings,
    all_candidates,
    measure_speed,
    meeting_target,
    shape_context,
    time_against_teacher,
)
from kdbert.core.atomic_io import write_json
from kdbert.core.evaluate import agreement
from kdbert.core.metrics import compute_metrics, task_score
from kdbert.core.qa_evaluate import answer_agreement
from kdbert.data.load import TaskOptions, is_data_file, load_task
from kdbert.deploy.export import export_model
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
    budget_minutes: float = option(30.0, "wall time for distilling the candidates", type=float, group="compress",
                                   check=POSITIVE)
    rounds: int = option(8, "rounds of successive halving, at most (the budget usually ends the search first)",
                         type=int, group="compress",
                         check=in_range(1, 10, int, what="a number of rounds in [1, 10]"))
    first_steps: int = option(200, "optimiser steps per candidate in the first round (doubled each round)", type=int,
                              group="compress", check=in_range(1, 10**7, int, what="a positive number of steps"))
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
    round_share: str = option("time", "what a round of the search shares out equally: wall time (cheap steps, "
                                      "e.g. the BiLSTM's, buy more steps) or steps", group="compress",
                              choices=ROUND_SHARES)
    first_round_share: float = option(1 / 3, "the most of --budget-minutes the first round may spend: its runs "
                                             "(families in turn, spread over the speed range) stop short of it",
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


def _agreement(data, teacher, teacher_eval, shipped_folder: Path, file_name: str) -> float:
    """Dev agreement (:func:`kdbert.core.evaluate.agreement`; QA: the share of questions with the
    teacher's answer, :func:`kdbert.core.qa_evaluate.answer_agreement`) of the shipped export with
    the teacher (scored by ``teacher_eval``, its evaluator), over every dev split's rows."""
    student = OnnxClassifier(shipped_folder / file_name)
    student_eval = student.family.evaluator(data, student.encoder, None, 64)
    if data.spec.question_answering:
        return answer_agreement(student_eval, student, teacher_eval, teacher)
    student_logits = np.concatenate([student_eval.predict(student, d) for d in student_eval.splits.values()])
    teacher_logits = np.concatenate([teacher_eval.predict(teacher, d) for d in teacher_eval.splits.values()])
    return agreement(data.spec, student_logits, teacher_logits)


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


def _ship(winner: dict, out: Path, task: TaskOptions, runtime: str) -> dict:
    """The winner's run exported as it ships (int8 for ``onnx-int8``), checked on dev; reused when
    the folder already holds the export of that run."""
    folder = out / "winner"
    report_path = folder / "export_report.json"
    if report_path.is_file():
        previous = json.loads(report_path.read_text())
        if previous.get("source") == str(winner["run"]):
            return previous
    return export_model(winner["run"], folder, quantize="int8" if runtime == "onnx-int8" else None, task=task)


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


def compress(task: TaskOptions, config: CompressConfig, output_dir: str | os.PathLike) -> dict:
    """Run the four steps (module doc) into ``output_dir``; returns the report."""
    config.check()
    if not task.held_out_fraction:
        task = replace(task, held_out_fraction=HELD_OUT_FRACTION)
    out = Path(output_dir)
    teacher_dir = str(Path(config.teacher).expanduser())
    speed_settings = SpeedSettings(config.runtime, config.threads, config.length_rows)
    search_settings = SearchSettings(
        rounds=config.rounds, first_steps=config.first_steps, budget_minutes=config.budget_minutes,
        batch_size=config.batch_size, learning_rate=config.learning_rate, seed=config.seed,
        word_vectors=config.word_vectors, intermediate_share=config.intermediate_share,
        round_share=config.round_share, max_train_examples=config.max_train_examples,
        first_round_share=config.first_round_share)
    augment = AugmentSettings.parse(config.augment, copies=config.augment_copies, max_rows=config.augment_max_rows,
                                    nltk_data=config.nltk_data, labelling_share=config.augment_labelling_share)
    saw_held_out = teacher_saw_held_out_rows(teacher_dir, task)
    if saw_held_out:
        print(f"note: the teacher was fine-tuned on the {task.held_out_fraction:.0%} of training rows this search "
              "holds out to pick on, so it scores optimistically there and they may rank students unlike dev; "
              f"`kdbert finetune --held-out-fraction {task.held_out_fraction:g}` gives a teacher without them")
    context = shape_context(teacher_dir, task, config.word_vectors)
    offered = all_candidates(context)
    if config.candidates:
        wanted = [name.strip() for name in config.candidates.split(",") if name.strip()]
        unknown = sorted(set(wanted) - {c.name for c in offered})
        if unknown:
            raise KdbertError(f"--candidates: unknown {', '.join(unknown)}; this teacher offers "
                              f"{', '.join(c.name for c in offered)}")
        offered = [c for c in offered if c.name in wanted]
    table = measure_speed(teacher_dir, task, out, speed_settings, offered, context)
    fast = set(meeting_target(table, config.target_speedup, config.target_latency_ms))
    kept = with_variants([c for c in offered if c.name in fast], augment.kinds)
    table = with_variant_rows(table, kept)
    latency = {name: row["latency_real_p50_ms"] for name, row in table["candidates"].items()}
    kept = spread_order(kept, latency)
    data = load_task(task)
    train_rows = data.train[: config.max_train_examples] if config.max_train_examples else data.train
    if not (out / SEARCH_STATE).is_file():  # a search under way was judged when it started
        check_budget(table, kept, search_settings, len(train_rows))
    teacher_family = family_of_folder(teacher_dir)
    teacher, tokenizer = teacher_family.load(Path(teacher_dir), data.spec)
    augmentation = None
    if any(is_augmented(c.name) for c in kept):
        text_fields = list(task.text_columns) if is_data_file(task.task) else list(data.spec.text_fields)
        augmentation = augment_for_search(teacher, tokenizer, data.spec, train_rows, text_fields, out, augment,
                                          config.budget_minutes * 60, config.seed)
    search = successive_halving(kept, teacher_dir, task, out, search_settings)
    teacher_eval = teacher_family.evaluator(data, tokenizer, None, 64)
    teacher_metrics = teacher_eval(teacher)
    winner = pick_winner(search["rounds"][-1], table["candidates"], teacher_metrics["selection_score"],
                         config.min_kept)
    shipped = _ship(winner, out, task, config.runtime)
    file_name = RUNTIMES[config.runtime]
    in_turns = _shipped_speed(winner, out, task, speed_settings)
    runtime_key = "onnx_int8" if config.runtime == "onnx-int8" else "onnx_fp32"
    majority = _majority_score(data)
    student_dev, teacher_dev = shipped["dev_metrics"][runtime_key]["score"], teacher_metrics["score"]
    teacher_deployed = _export_dev_scores(out / "teacher-onnx")
    breakdown = speedup_breakdown(teacher_dir, out, task, speed_settings, {
        "teacher": teacher_dev, "teacher_onnx_fp32": teacher_deployed.get("onnx_fp32"),
        "teacher_onnx_int8": teacher_deployed.get("onnx_int8"), "winner": student_dev},
        winner["run"], in_turns["latency_real_p50_ms"]["student"])
    report = {
        "task": data.spec.name, "teacher": teacher_dir, "runtime": config.runtime,
        "target": {"speedup": config.target_speedup, "latency_ms": config.target_latency_ms,
                   "min_kept": config.min_kept},
        "held_out_rows": len(data.held_out), "speed": table, "augmentation": augmentation, "search": search,
        "winner": winner,
        "seconds_per_candidate": _seconds_per_candidate(search), "speedup_breakdown": breakdown,
        "teacher_scores": {"held_out": teacher_metrics["selection_score"], "dev": teacher_dev,
                           "dev_deployed": teacher_deployed.get(runtime_key)},
        "teacher_saw_held_out_rows": saw_held_out,
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
                    "agreement_dev": _agreement(data, teacher, teacher_eval, out / "winner", file_name),
                    "agreement_measure": _agreement_measure(data.spec)},
    }
    write_json(out / REPORT, report)
    plotted = plot_pareto(build_table(_plot_records(report)), out / PLOT, latency="onnx_int8",
                          title=f"kdbert compress, {report['task']}: dev score against ms per dev row "
                                f"({config.runtime}, batch 1)")
    (out / "compress_report.md").write_text(format_report(report, PLOT if plotted else None))
    return report


def _seconds_per_candidate(search: dict) -> dict[str, float]:
    """Wall seconds each candidate's distillation took, over every round it ran (a rerun of round 0
    with more steps counts the shorter run too)."""
    seconds: dict[str, float] = {}
    for rows in search["rounds"]:
        for row in rows:
            seconds[row["candidate"]] = round(seconds.get(row["candidate"], 0.0) + spent_seconds(row), 1)
    return seconds


def _last_runs(report: dict) -> dict[str, dict]:
    """Each distilled candidate's longest run (the last round it reached)."""
    return {row["candidate"]: row for rows in report["search"]["rounds"] for row in rows}


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
    seconds = report.get("seconds_per_candidate") or _seconds_per_candidate(report["search"])
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
                     + (f"{run['selection_score']:.2f} | {run['dev_score']:.2f} | {run.get('method', 'kd')} | "
                        f"{run['steps']} | {seconds[name] / 60:.1f} min |" if run else "- | - | - | - | - |"))
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
