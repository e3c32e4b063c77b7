"""Step 4 of ``kdbert compress``: the winner's run exported as it ships, timed again in turns with
the exported teacher, and its dev agreement with the teacher; each reused when a rerun finds it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kdbert.compress.speed import RUNTIMES, SpeedSettings, time_against_teacher
from kdbert.compress.teacher import dev_outputs
from kdbert.core.atomic_io import write_json
from kdbert.core.evaluate import agreement
from kdbert.core.qa_evaluate import answer_agreement
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_model
from kdbert.deploy.onnx_runtime import OnnxClassifier

SHIPPED_SPEED = "shipped_speed.json"


def export_task(task: TaskOptions, data) -> TaskOptions:
    """The task the exports are scored on: its dev rows and, of the rows the search holds out, as many
    as dev has, a subset of them (a smaller ``held_out_fraction`` holds out a prefix of the same
    seeded order, :func:`kdbert.data.load.hold_out`)."""
    dev_rows = sum(len(rows) for rows in data.dev.values())
    return replace(task, held_out_fraction=min(task.held_out_fraction,
                                               dev_rows / (len(data.train) + len(data.held_out))))


def shipped_speed(winner: dict, out: Path, task: TaskOptions, settings: SpeedSettings) -> dict:
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


def ship(winner: dict, out: Path, task: TaskOptions, runtime: str, int8_time_left) -> dict:
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


def dev_agreement(data, teacher_outputs, shipped_folder: Path, file_name: str) -> float:
    """Dev agreement (:func:`kdbert.core.evaluate.agreement`; QA: the share of questions with the
    teacher's answer, :func:`kdbert.core.qa_evaluate.answer_agreement`) of the shipped export with
    the teacher's ``teacher_outputs`` (:func:`dev_outputs`)."""
    student = OnnxClassifier(shipped_folder / file_name)
    student_outputs = dev_outputs(data, student.family.evaluator(data, student.encoder, None, 64), student)
    if data.spec.question_answering:
        return answer_agreement(student_outputs, teacher_outputs)
    return agreement(data.spec, student_outputs, teacher_outputs)


def agreement_measure(spec) -> str:
    if spec.question_answering:
        return "% of questions, same answer"
    return "Pearson r x 100" if spec.is_regression else "% of rows, same class"
