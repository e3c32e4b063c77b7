"""The teacher as ``kdbert compress`` sees it: loaded and checked for the task once, scored on the
dev and held-out rows, its dev outputs kept for the agreement; then exported and timed (step 1)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kdbert.compress.breakdown import teacher_steps
from kdbert.compress.budget import TEACHER_EXPORT_SHARE, Deadline
from kdbert.compress.options import CompressConfig
from kdbert.compress.speed import SpeedSettings, time_teacher
from kdbert.core.metrics import compute_metrics, task_score
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.families.registry import family_of_folder


@dataclass
class Teacher:
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


def checked_teacher(config: CompressConfig, data) -> Teacher:
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
    outputs = dev_outputs(data, evaluator, model)
    return Teacher(folder, model, tokenizer, metrics, scored - started, outputs, time.time() - scored)


def dev_outputs(data, evaluator, model):
    """What the agreement compares of a model (scored by ``evaluator``, its own): its logits over
    every dev split's rows, or for QA its answer to every dev question."""
    if data.spec.question_answering:
        return evaluator.dev_answers(model)
    return np.concatenate([evaluator.predict(model, d) for d in evaluator.splits.values()])


def majority_score(data) -> float | None:
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


def export_dev_scores(export_folder: Path) -> dict[str, float]:
    """An export's dev score per runtime (``onnx_fp32``, ``onnx_int8``; empty for an export made
    without a task)."""
    report = json.loads((export_folder / "export_report.json").read_text())
    return {runtime: metrics["score"] for runtime, metrics in report.get("dev_metrics", {}).items()}


def time_and_export_teacher(teacher: Teacher, task: TaskOptions, out: Path, settings: SpeedSettings, deadline: Deadline) -> dict:
    """Step 1 for the teacher: exported (scored on ``task``, :func:`export_task`; static int8 methods
    while it stays within ``TEACHER_EXPORT_SHARE`` of the budget) and timed
    (:func:`~kdbert.compress.speed.time_teacher`), its deployed scores read from its export and its
    steps of the speedup breakdown timed; returns the speed table."""
    export_end = deadline.clock() + TEACHER_EXPORT_SHARE * 60 * deadline.minutes
    table = time_teacher(teacher.folder, task, out, settings, int8_time_left=lambda: export_end - deadline.clock())
    teacher.deployed = export_dev_scores(out / "teacher-onnx")
    teacher.steps = teacher_steps(teacher.folder, out, task, settings, table["teacher"], {
        "teacher": teacher.metrics["score"], "teacher_onnx_fp32": teacher.deployed.get("onnx_fp32"),
        "teacher_onnx_int8": teacher.deployed.get("onnx_int8")})
    return table
