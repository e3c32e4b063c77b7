"""Step 4 of ``kdbert compress``: the winner's run exported as it ships and checked there on the
held-out rows that decide and timed again in turns with the exported teacher (in a fresh process,
:mod:`~kdbert.compress.timing_process`; once more after a
narrow miss, :func:`~kdbert.compress.budget.narrowly_missed`, the mean of the two deciding; the next
candidate exported when it falls short of either), and its dev agreement with the teacher; each
reused when a rerun finds it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from kdbert.compress.budget import narrowly_missed
from kdbert.compress.schedule import Goal
from kdbert.compress.speed import RUNTIMES, SpeedSettings, meets_target, time_against_teacher
from kdbert.compress.teacher import dev_outputs
from kdbert.core.atomic_io import replace_dir, write_json
from kdbert.core.evaluate import agreement, to_predictions
from kdbert.core.metrics import kept_standard_error
from kdbert.core.qa_evaluate import answer_agreement
from kdbert.data.glue import TaskData
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_model
from kdbert.deploy.onnx_runtime import OnnxClassifier

SHIPPED_SPEED = "shipped_speed.json"
SCORED_BATCH = 1
"""Rows per batch a shipped graph is scored in: one at a time, as it is timed, since a dynamic int8
graph quantises each batch's activations with one scale, so a row's output moves with the rows
batched beside it (SST-2's 4x winner: 86.34 on the rows that decide one at a time, 87.50 in batches
of 64 sorted by length)."""


def export_task(task: TaskOptions, data) -> TaskOptions:
    """The task the exports are scored on (their int8 choice and parity check): its dev rows and, of the
    held-out rows that pick, as many as dev has (a prefix of their seeded order,
    :func:`kdbert.data.held_out.split_decide`, which holds no row that decides)."""
    dev_rows = sum(len(rows) for rows in data.dev.values())
    return replace(task, decide_share=0.0, max_held_out_examples=max(1, min(dev_rows, len(data.held_out))))


def shipped_speed(run: str, export_file: Path, out: Path, task: TaskOptions, settings: SpeedSettings,
                  times: int = 1, timer: Callable[..., dict] | None = None) -> dict:
    """``export_file`` (the export of ``run`` as it ships) timed in turns with the exported teacher
    (``timer``: as :func:`~kdbert.compress.speed.time_against_teacher`, None for that one here; compress
    times in a fresh process, :class:`~kdbert.compress.timing_process.TimingProcess`) until it has been timed ``times`` times, each
    kept per run in ``out/shipped_speed.json`` for those settings, so that the report and a rerun read
    the figures the check saw; returns their mean (:func:`mean_timing`)."""
    path = out / SHIPPED_SPEED
    stored = json.loads(path.read_text()) if path.is_file() else {}
    if stored.get("settings") != settings.key():
        stored = {"settings": settings.key(), "timings": {}}
    timings = stored["timings"].setdefault(str(run), [])
    if isinstance(timings, dict):  # a file written before timings were kept as a list: its one timing
        timings = stored["timings"][str(run)] = [timings]
    if len(timings) < times:
        teacher_file = out / "teacher-onnx" / RUNTIMES[settings.runtime]
        while len(timings) < times:
            timings.append((timer or time_against_teacher)(teacher_file, export_file, task, settings))
        write_json(path, stored)
    return mean_timing(timings)


def mean_timing(timings: list[dict]) -> dict:
    """Timings in turns of one student (:func:`~kdbert.compress.speed.time_against_teacher`) as one:
    each figure's mean (the speedup ``student``, the latencies ``student`` and ``teacher``), every one's
    ``rounds`` in one list where given, and how many ``timings`` they are."""
    mean = {"speedup": {"student": float(np.mean([t["speedup"]["student"] for t in timings]))},
            "latency_real_p50_ms": {name: float(np.mean([t["latency_real_p50_ms"][name] for t in timings]))
                                    for name in ("student", "teacher")}, "timings": len(timings)}
    if all("rounds" in t for t in timings):
        mean["rounds"] = [row for t in timings for row in t["rounds"]]
    return mean


def timed_as_shipped(run: str, export_file: Path, out: Path, task: TaskOptions, settings: SpeedSettings,
                     target_speedup: float | None, target_latency_ms: float | None,
                     may_time_again: Callable[[], bool], timer: Callable[..., dict] | None = None) -> dict:
    """The speed check of a shipped graph: ``{"speedup", "timings", "fast_enough"}`` from its timing in
    turns (:func:`shipped_speed` by ``timer``); a narrow miss (:func:`~kdbert.compress.budget.narrowly_missed`) is
    timed once more where ``may_time_again()`` (the time left holds it and a next check), and the mean
    of the two decides."""
    timed = shipped_speed(run, export_file, out, task, settings, timer=timer)
    if (narrowly_missed(timed["speedup"]["student"], timed["latency_real_p50_ms"]["student"], target_speedup,
                        target_latency_ms) and may_time_again()):
        timed = shipped_speed(run, export_file, out, task, settings, times=2, timer=timer)
    speedup, latency = timed["speedup"]["student"], timed["latency_real_p50_ms"]["student"]
    return {"speedup": speedup, "timings": timed["timings"],
            "fast_enough": meets_target(speedup, latency, target_speedup, target_latency_ms)}


MAX_SHIP_TRIES = 3  # candidates exported and checked on the rows that decide, at most


def ship(winner: dict, folder: Path, task: TaskOptions, runtime: str, int8_time_left) -> dict:
    """``winner``'s run exported into ``folder`` as it ships (int8 for ``onnx-int8``;
    ``int8_time_left()``: the seconds its int8 choice may still make static methods in), checked on
    dev; reused when the folder already holds the export of that run."""
    if _export_of(folder) == str(winner["run"]):
        return json.loads((folder / "export_report.json").read_text())
    return export_model(winner["run"], folder, quantize="int8" if runtime == "onnx-int8" else None, task=task,
                        batch_size=SCORED_BATCH, int8_time_left=int8_time_left)


def _export_of(folder: Path) -> str | None:
    """The run an export folder was made from (None: no export there)."""
    report = folder / "export_report.json"
    return json.loads(report.read_text()).get("source") if report.is_file() else None


def decide_score(folder: Path, file_name: str, data, goal: Goal | None = None) -> tuple[dict, np.ndarray | None]:
    """The export ``folder/file_name`` scored on the held-out rows that decide (``data.decide``), one
    row at a time (:data:`SCORED_BATCH`):
    ``decide_score``, its bootstrap standard error ``decide_se`` and, against the teacher's
    predictions there (``goal.teacher_decide_predictions``, where known), ``decide_paired_se``; and
    its predictions there (None for question answering)."""
    model = OnnxClassifier(folder / file_name)
    baseline = None if goal is None or goal.teacher_decide_predictions is None else np.asarray(
        goal.teacher_decide_predictions)
    rows = TaskData(data.spec, [], {}, decide=data.decide, decide_baseline=baseline)
    evaluator = model.family.evaluator(rows, model.encoder, None, SCORED_BATCH)
    metrics, predictions = (evaluator(model), None) if data.spec.question_answering else evaluator.scored(model)
    return {key: metrics[key] for key in ("decide_score", "decide_se", "decide_paired_se") if key in metrics}, predictions


def ship_checked(ranking: list[dict], out: Path, task: TaskOptions, runtime: str, goal: Goal, data,
                 int8_time_left, check_seconds, speed_check=None) -> tuple[dict, dict, list[dict]]:
    """Ship what keeps the share and the speed as it ships: export the first of ``ranking``
    (:func:`~kdbert.compress.schedule.ranked_candidates`) into ``out/exports/<candidate>``, score that
    graph on the rows that decide and time it (``speed_check(row, export_file)`` -> ``{"speedup",
    "fast_enough"}``; None: not timed here). While it falls short of ``goal`` by more than
    :meth:`~kdbert.compress.schedule.Goal.decide_margin` (paired with the teacher's predictions on the
    same rows where the goal has them) or of the speed asked, export and check the next that keeps it
    in PyTorch (after a graph too slow as shipped, the next in the ranking), at most
    ``MAX_SHIP_TRIES`` and while ``int8_time_left()`` exceeds ``check_seconds(candidate)``, what exporting
    and timing it takes as the finishing's reserve counts it.
    The first shipped graph that keeps both goes to ``out/winner``; if none does, the fast enough one
    scoring best there (of those checked; the best of all when none is fast enough). Returns that
    candidate's row, its export report and every check (``candidate``, ``decide_score``,
    ``decide_se``, ``kept``, ``margin``, ``margin_kind``, ``keeps``, ``speedup``, ``fast_enough``)."""
    file_name = RUNTIMES[runtime]
    checks, exports = [], {}
    for row in ranking:
        if checks:
            if not row["keeps"] and any(check["fast_enough"] for check in checks):
                continue  # one that does not keep is worth a try only while no graph checked ran fast enough
            if len(checks) == MAX_SHIP_TRIES or int8_time_left() < check_seconds(row["candidate"]):
                break
        folder = out / "exports" / row["candidate"]
        if not folder.exists() and _export_of(out / "winner") == str(row["run"]):  # a rerun: shipped before
            shutil.copytree(out / "winner", folder)
        exports[row["candidate"]] = ship(row, folder, task, runtime, int8_time_left)
        checks.append(check_shipped(row, folder / file_name, goal, data, speed_check))
        if checks[-1]["keeps"] and checks[-1]["fast_enough"]:
            break
    fast = [check for check in checks if check["fast_enough"]] or checks
    chosen = next((c for c in fast if c["keeps"]), max(fast, key=lambda c: c["decide_score"]))
    winner = next(row for row in ranking if row["candidate"] == chosen["candidate"])
    ship_folder(out / "exports" / chosen["candidate"], out)
    shutil.rmtree(out / "exports")  # the shipped export is in winner/; the others are what the report says
    return winner, exports[chosen["candidate"]], checks


def check_shipped(row: dict, export_file: Path, goal: Goal, data, speed_check=None) -> dict:
    """``row``'s shipped graph ``export_file`` checked: scored on the rows that decide against ``goal``
    within :meth:`~kdbert.compress.schedule.Goal.decide_margin` and timed by ``speed_check(row,
    export_file)`` (None: not timed); ``candidate``, ``run``, ``decide_score``, ``decide_se``, ``kept``,
    ``margin``, ``margin_kind``, ``keeps``, ``speedup``, ``fast_enough``."""
    scored, _ = decide_score(export_file.parent, export_file.name, data, goal)
    score, error = scored["decide_score"], scored["decide_se"]
    margin, kind = goal.decide_margin(error, scored.get("decide_paired_se"))
    speed = speed_check(row, export_file) if speed_check else {"speedup": None, "fast_enough": True}
    return {"candidate": row["candidate"], "run": str(row["run"]), "decide_score": score, "decide_se": error,
            "kept": goal.kept(score), "margin": margin, "margin_kind": kind,
            "keeps": goal.keeps_within(score, margin), **speed}


def ship_folder(export_folder: Path, out: Path) -> None:
    """Put the export in ``export_folder`` at ``out/winner``, whole or not at all."""
    staged = out / "winner.tmp"
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(export_folder, staged)
    replace_dir(staged, out / "winner")


def shipped_dev_outputs(data, shipped_folder: Path, file_name: str):
    """The shipped export's dev outputs (:func:`dev_outputs`), scored as compress scores it."""
    student = OnnxClassifier(shipped_folder / file_name)
    return dev_outputs(data, student.family.evaluator(data, student.encoder, None, SCORED_BATCH), student)


def dev_agreement(data, teacher_outputs, student_outputs) -> float:
    """Dev agreement (:func:`kdbert.core.evaluate.agreement`; QA: the share of questions with the
    teacher's answer, :func:`kdbert.core.qa_evaluate.answer_agreement`) of the shipped export's
    ``student_outputs`` with the teacher's ``teacher_outputs`` (both :func:`dev_outputs`)."""
    if data.spec.question_answering:
        return answer_agreement(student_outputs, teacher_outputs)
    return agreement(data.spec, student_outputs, teacher_outputs)


def kept_noise(data, teacher_outputs, student_outputs, teacher_decide, student_decide) -> dict:
    """How far the kept share on dev and on the rows that decide may differ by their draws alone:
    ``kept_dev_se`` and ``kept_decide_se``, the bootstrap standard errors of each set's kept share
    (:func:`~kdbert.core.metrics.kept_standard_error`; dev's splits pooled), and ``gap_se`` =
    sqrt(kept_dev_se^2 + kept_decide_se^2), the standard error of kept(dev) - kept(decide) for two
    sets drawn apart. ``teacher_outputs``, ``student_outputs``: dev logits (:func:`dev_outputs`);
    ``teacher_decide``, ``student_decide``: predictions on the rows that decide. Empty for question
    answering, where the teacher's predictions on the rows that decide are not known, and where a
    share has no standard error (the teacher scores 0 or less on some resample of its rows)."""
    if data.spec.question_answering or teacher_decide is None or not data.decide:
        return {}
    metrics = data.spec.metrics
    dev_references = np.concatenate([[row.label for row in rows] for rows in data.dev.values()])
    dev_se = kept_standard_error(metrics, to_predictions(data.spec, student_outputs),
                                 to_predictions(data.spec, teacher_outputs), dev_references)
    decide_se = kept_standard_error(metrics, np.asarray(student_decide), np.asarray(teacher_decide),
                                    np.array([row.label for row in data.decide]))
    if dev_se is None or decide_se is None:
        return {}
    return {"kept_dev_se": dev_se, "kept_decide_se": decide_se, "gap_se": float(np.hypot(dev_se, decide_se))}


def agreement_measure(spec) -> str:
    if spec.question_answering:
        return "% of questions, same answer"
    return "Pearson r x 100" if spec.is_regression else "% of rows, same class"
