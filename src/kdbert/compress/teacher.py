"""The teacher as ``kdbert compress`` sees it: loaded and checked for the task once, scored on the
dev and held-out rows, its dev outputs kept for the agreement; then exported and timed (step 1)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kdbert.compress.breakdown import teacher_steps
from kdbert.compress.budget import TEACHER_EXPORT_SHARE, Deadline
from kdbert.compress.options import CompressConfig
from kdbert.compress.speed import SpeedSettings, time_teacher
from kdbert.core.evaluate import Scored
from kdbert.core.metrics import compute_metrics, task_score
from kdbert.data.held_out import RECORD_FILE, held_out_indices, read_record
from kdbert.data.load import TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.families.registry import family_of_folder


@dataclass
class Teacher:
    """The teacher as the search and the report see it: its folder, model and tokenizer, its scores
    on the dev and held-out rows and the seconds they took, its dev outputs for the agreement and
    the seconds they took, its predictions on the held-out rows that decide (None: no such rows, or
    question answering) for the paired noise margin, then from step 1 its deployed scores and its
    steps of the speedup breakdown."""

    folder: str
    model: object
    tokenizer: object
    metrics: dict
    pass_seconds: float
    outputs: object
    dev_seconds: float
    decide_predictions: np.ndarray | None = None
    deployed: dict | None = None
    steps: list[dict] | None = None
    dev_logits: dict | None = None  # each dev split's logits (name -> (N, C)); None for question answering

    def scored(self) -> dict:
        """Its PyTorch scoring as an export reads it (:func:`~kdbert.deploy.export.export_classifier`'s
        ``known``): its dev metrics and logits (the export's held-out rows may be a prefix of those it
        was scored on, so their metrics are left out); empty without logits."""
        if self.dev_logits is None:
            return {}
        metrics = {name: value for name, value in self.metrics.items()
                   if not name.startswith(("held-out/", "selection_", "decide"))}
        return {"pytorch": Scored(metrics, self.dev_logits)}


def loaded_teacher(config: CompressConfig, spec) -> tuple[str, object, object]:
    """The teacher's folder, model and tokenizer, loaded for the task ``spec`` (one that is not
    fine-tuned for its outputs is refused in one line)."""
    folder = str(Path(config.teacher).expanduser())
    if not Path(folder).is_dir():
        raise KdbertError(f"--teacher {folder} is not a folder; pass a model fine-tuned on the task "
                          "(see `kdbert finetune`)")
    model, tokenizer = family_of_folder(folder).load(Path(folder), spec)
    return folder, model, tokenizer


def checked_teacher(loaded: tuple[str, object, object], data) -> Teacher:
    """The teacher (:func:`loaded_teacher`) scored on ``data``'s rows, with its dev outputs and its
    predictions on the rows that decide. A classifier's dev outputs are the logits its scoring
    computed, and their seconds its pass's share by characters of text (the dev rows' of all it
    scored); question answering's answers are predicted again, and timed."""
    folder, model, tokenizer = loaded
    evaluator = family_of_folder(folder).evaluator(data, tokenizer, None, 64)
    started = time.time()
    if data.spec.question_answering:
        metrics, decide = evaluator(model), None
        scored = time.time()
        outputs = dev_outputs(data, evaluator, model)
        return Teacher(folder, model, tokenizer, metrics, scored - started, outputs, time.time() - scored, decide)
    logits: dict = {}
    metrics, decide = evaluator.scored(model, logits)
    seconds = time.time() - started
    dev = [row for rows in data.dev.values() for row in rows]
    dev_share = text_characters(dev) / max(1, text_characters(dev + data.held_out + data.decide))
    return Teacher(folder, model, tokenizer, metrics, seconds, np.concatenate(list(logits.values())),
                   seconds * dev_share, decide, dev_logits=logits)


def text_characters(rows) -> int:
    """The characters of ``rows``' texts, what a pass over them costs in proportion to."""
    return sum(len(text) for row in rows for text in row.texts)


def dev_outputs(data, evaluator, model):
    """What the agreement compares of a model (scored by ``evaluator``, its own): its logits over
    every dev split's rows, or for QA its answer to every dev question."""
    if data.spec.question_answering:
        return evaluator.dev_answers(model)
    return np.concatenate([evaluator.predict(model, d) for d in evaluator.splits.values()])


def majority_score(data, rows: list | None = None) -> float | None:
    """The score of always answering the most frequent training label (the mean for regression) on
    dev, or on ``rows`` (e.g. the held-out rows that decide); ``None`` for question answering, which
    has no such constant answer."""
    if data.spec.question_answering:
        return None
    labels = [row.label for row in data.train]
    if data.spec.is_regression:
        constant = sum(labels) / len(labels)
    else:
        constant = Counter(labels).most_common(1)[0][0]
    splits = data.dev if rows is None else {"rows": rows}
    metrics = {}
    for name, split in splits.items():
        predictions = np.full(len(split), constant, dtype=float if data.spec.is_regression else int)
        references = np.array([row.label for row in split])
        metrics.update(compute_metrics(data.spec.metrics, predictions, references,
                                       "" if len(splits) == 1 else f"{name}/"))
    return task_score(metrics, data.spec.metrics, tuple(splits))


def held_out_task(teacher_dir: str, task: TaskOptions, trained_on_all: bool) -> tuple[TaskOptions, dict]:
    """The task with the training rows the teacher never trained on held out, found, not guessed, and
    what was found (``{"source", "teacher_saw_held_out_rows", "teacher_picked_on_deciding_rows"}``):

    - the rows its ``held_out.json`` lists (``kdbert finetune --held-out-fraction`` writes it), whatever
      share ``task`` asks for, those that decide as it lists them (a record written before it did: the
      teacher's checkpoint was picked on every held-out row, and the search decides on half of them);
    - a ``kdbert finetune`` folder of the same task and training file that held out a share before the
      rows were recorded: that share, where this task's rows are still drawn uniformly
      (:func:`kdbert.data.held_out.held_out_indices`, the rule it was fine-tuned with);
    - otherwise refused in one line, unless ``trained_on_all`` (``--teacher-trained-on-all-rows``):
      then ``task``'s share, rows the teacher trained on."""
    folder = Path(teacher_dir)
    recorded = read_record(folder)
    if recorded is not None:
        return (replace(task, held_out_rows=str(folder), held_out_fraction=recorded["fraction"]),
                {"source": f"{folder / RECORD_FILE} ({recorded['rows']} rows, {recorded['rule']})",
                 "teacher_saw_held_out_rows": False, "teacher_picked_on_deciding_rows": not recorded.get("decide")})
    config = folder / "run_config.json"
    run = json.loads(config.read_text()) if config.is_file() else {}
    fraction = run.get("held_out_fraction", 0.0)
    same_rows = (run.get("command"), run.get("task"), run.get("train_file")) == ("finetune", task.task, task.train_file)
    if same_rows and fraction:
        rows = load_task(replace(task, held_out_fraction=0.0, decide_share=0.0, held_out_rows=None))
        if held_out_indices(rows, fraction)[1] == "uniform":
            return (replace(task, held_out_fraction=fraction),
                    {"source": f"{config} (held_out_fraction {fraction:g}, uniform)", "teacher_saw_held_out_rows": False})
        why = (f"was fine-tuned before kdbert recorded its held-out rows, and {task.task}'s rows are now held out "
               "to look like dev")
    else:
        why = "does not say which training rows it never trained on (no held_out.json)"
    if trained_on_all:
        return task, {"source": "--teacher-trained-on-all-rows", "teacher_saw_held_out_rows": True}
    raise KdbertError(f"--teacher {teacher_dir} {why}; fine-tune it with `kdbert finetune --task {task.task} "
                      f"--held-out-fraction {task.held_out_fraction:g}`, or pass --teacher-trained-on-all-rows to "
                      "hold out rows it trained on (its kept shares then read high)")


def export_dev_scores(export_folder: Path) -> dict[str, float]:
    """An export's dev score per runtime (``onnx_fp32``, ``onnx_int8``; empty for an export made
    without a task)."""
    report = json.loads((export_folder / "export_report.json").read_text())
    return {runtime: metrics["score"] for runtime, metrics in report.get("dev_metrics", {}).items()}


def time_and_export_teacher(teacher: Teacher, task: TaskOptions, out: Path, settings: SpeedSettings, deadline: Deadline,
                            exports=None) -> dict:
    """Step 1 for the teacher: exported (scored on ``task``, :func:`export_task`; static int8 methods
    while it stays within ``TEACHER_EXPORT_SHARE`` of the budget), or read from ``exports`` where an
    earlier search kept it (:mod:`kdbert.compress.teacher_exports`), and timed
    (:func:`~kdbert.compress.speed.time_teacher`), its deployed scores read from its export and its
    steps of the speedup breakdown timed; returns the speed table."""
    export_end = deadline.clock() + TEACHER_EXPORT_SHARE * 60 * deadline.minutes
    table = time_teacher(teacher.folder, task, out, settings, int8_time_left=lambda: export_end - deadline.clock(),
                         exports=exports, known=teacher.scored())
    teacher.deployed = export_dev_scores(out / "teacher-onnx")
    teacher.steps = teacher_steps(teacher.folder, out, task, settings, table["teacher"], {
        "teacher": teacher.metrics["score"], "teacher_onnx_fp32": teacher.deployed.get("onnx_fp32"),
        "teacher_onnx_int8": teacher.deployed.get("onnx_int8")})
    return table
