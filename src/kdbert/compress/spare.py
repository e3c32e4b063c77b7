"""The finishing's spare time (step 4 of ``kdbert compress``): when the budget, not the schedule, ended
the winner's training (it had not trained the steps of the search's last rung,
:func:`~kdbert.compress.schedule.rung_steps`, nor its ``--max-epochs``, when the window's end stopped it or left no room for
its next rung), the winner trains on toward them in the seconds left once its shipped graph has
been checked, where that graph runs at the speed asked (training on does not change its speed; it
may bring a graph short of the share to it): the finishing's reserve for a next candidate's check,
where a first graph that keeps the share did not need it, and what the search left unused.
Near-line winners left 1.2-1.6 of their search's minutes so.

- It trains in a copy of its run folder (``runs/<candidate>.spare``), so that the search's run, and
  the graph exported from it, stay as the search left them. The run resumes there as it paused
  (the same options, schedule, data order and moving average of the weights) until the last rung's
  steps or a deadline, and is evaluated on the held-out rows as a segment is
  (:func:`~kdbert.compress.search.distil_segment`). What it decided, and the segment row it trained,
  are kept in ``spare_training.json``, so that a rerun of a finished compress ships what it shipped
  instead of training on again in the time the search no longer takes.
- Nothing is tried when the seconds left would not hold the search's first rung (``first_steps``
  steps at the winner's measured seconds per step, plus a segment's time outside training,
  :func:`~kdbert.compress.schedule.predicted_seconds`).
- The trained-on run replaces the shipped one only when its trainer kept a later student than the
  search's run did (the trainer's rule on the rows that pick: the latest evaluation within the
  noise of the best), and that student's graph, exported with the shipped graph's int8 method and
  checked as the first graph was, runs at the speed asked and either keeps the share on the rows
  that decide (whether or not the first kept it; never by scoring higher there) or, where neither
  graph keeps it, scores higher on all held-out rows (those that pick and those that decide,
  pooled), as the winner rule ranks when none keeps.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from kdbert.compress.schedule import Goal, Job, decided, horizon, keeps_decided, predicted_seconds, rung_steps
from kdbert.compress.search import Loaded, Plan, Window, distil_segment
from kdbert.compress.ship import SCORED_BATCH, check_shipped, ship_folder
from kdbert.compress.speed import RUNTIMES
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_model

SPARE_SUFFIX = ".spare"  # the trained-on copy of a run folder: runs/<candidate>.spare
RECORD_FILE = "spare_training.json"  # in the output folder: what the spare time decided, and trained


@dataclass
class Spare:
    """What the spare time did: ``summary`` for the report (``None`` in ``row`` and ``export``: the
    first shipped graph stays), else the trained-on run's segment ``row``, its ``export`` report and
    its ``check`` (:func:`~kdbert.compress.ship.check_shipped`), now shipped in ``out/winner``."""

    summary: dict
    row: dict | None = None
    export: dict | None = None
    check: dict | None = None


def spare_folder(run: str | Path) -> Path:
    """Where ``run`` (a candidate's run folder) trains on: ``<run>.spare`` beside it."""
    run = Path(run)
    return run.with_name(run.name + SPARE_SUFFIX)


def best_step(run: str | Path) -> int | None:
    """The optimiser step of the student a run folder holds at its root (its distil report's)."""
    report = Path(run) / "distill_report.json"
    return json.loads(report.read_text()).get("best_step") if report.is_file() else None


def _copy_run(source: Path, folder: Path) -> None:
    """``source`` copied to ``folder`` whole or not at all (a copy left half-written by a kill is
    made again)."""
    if folder.is_dir():
        return
    staged = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(source, staged)
    staged.rename(folder)


def _decided(plan: Plan, winner: dict, first_check: dict, segments: list[dict], seconds: float, out: Path,
             loaded: Loaded | None, clock: Callable[[], float]) -> dict:
    """What the spare time does with ``winner``: ``{"run", "summary"}``, and the trained-on run's
    segment ``row`` where it trained. Kept in ``out/RECORD_FILE``, so that a rerun of a finished
    compress, which has the seconds the search took left, reads it instead of training anew."""
    path = out / RECORD_FILE
    record = json.loads(path.read_text()) if path.is_file() else None
    if record is not None and record["run"] == str(winner["run"]):
        return record
    name = winner["candidate"]
    segments = [{**segment, "state": "done"} for segment in segments]
    needed = predicted_seconds(name, plan.settings.first_steps, segments)
    summary = {"candidate": name, "seconds_left": round(seconds, 1),
               "seconds_needed": round(needed, 1), "trained": False, "shipped": False}
    last = rung_steps(name, plan.settings.rounds - 1, segments, plan.settings, plan.goal)
    record = {"run": str(winner["run"]), "summary": summary}
    if winner["steps"] >= last:
        summary["why"] = f"it trained the {last:,} steps of the search's last rung" + (
            " (its --max-epochs)" if last < horizon(plan.settings) else "")
    elif not first_check["fast_enough"]:
        summary["why"] = "the shipped graph is too slow as shipped, which training on does not change"
    elif seconds < needed:
        summary["why"] = f"{seconds:.0f} s left, {needed:.0f} s needed for {plan.settings.first_steps} more steps"
    else:
        folder = spare_folder(winner["run"])
        _copy_run(Path(winner["run"]), folder)
        end = clock() + seconds - predicted_seconds(name, 0, segments)  # loading and the last evaluation after it
        job = Job(name, plan.settings.rounds - 1, last)
        record["row"] = distil_segment(replace(plan, window=Window(end, end)), job, winner["steps"], loaded, folder)
    write_json(path, record)
    return record


def train_on(plan: Plan, winner: dict, first_check: dict, segments: list[dict], seconds: float, out: Path,
             scored: TaskOptions, runtime: str, goal: Goal, data, int8_method: str | None, speed_check,
             loaded: Loaded | None = None, clock: Callable[[], float] = time.time) -> Spare:
    """Train ``winner`` (its ranking row, shipped with ``first_check``) on for at most ``seconds`` from
    now, and ship it when it learnt a later student that keeps (module doc). ``segments``: the
    search's, all done (:func:`~kdbert.compress.search.summary`); ``scored``: the task exports are
    scored on (:func:`~kdbert.compress.ship.export_task`); ``int8_method``: the shipped graph's (None:
    shipped in fp32); ``speed_check(row, export_file)``: as the first check's."""
    name = winner["candidate"]
    record = _decided(plan, winner, first_check, segments, seconds, out, loaded, clock)
    summary, row = dict(record["summary"]), record.get("row")
    if row is None:
        return Spare(summary)
    before = best_step(winner["run"])
    summary.update(trained=True, from_steps=winner["steps"], steps=row["steps"], seconds=row["seconds"],
                   score_before=winner["score"], score=row["score"], best_step_before=before,
                   best_step=row["best_step"], run=row["run"])
    if before is not None and row["best_step"] <= before:
        return Spare({**summary, "why": "no later student was kept on the rows that pick"})
    export_folder = out / "exports" / (name + SPARE_SUFFIX)
    export_folder.parent.mkdir(parents=True, exist_ok=True)
    exported = export_model(row["run"], export_folder, quantize="int8" if int8_method else None, task=scored,
                            batch_size=SCORED_BATCH, int8_method=int8_method or "auto")
    row = {**row, "kept": goal.kept(decided(row)[0]), "keeps": keeps_decided(row, goal), "rule": winner["rule"]}
    check = check_shipped(row, export_folder / RUNTIMES[runtime], goal, data, speed_check)
    summary.update(decide_score_before=first_check["decide_score"], decide_score=check["decide_score"],
                   kept_before=first_check["kept"], kept=check["kept"])
    why = _why_not_shipped(check, first_check, row, winner, goal)
    if why:
        shutil.rmtree(out / "exports")
        return Spare({**summary, "why": f"{why}; the first stays shipped"}, check=check)
    ship_folder(export_folder, out)
    shutil.rmtree(out / "exports")
    why = ("a later student was kept and its graph keeps the share and the speed" if check["keeps"] else
           "a later student was kept that scores higher on all held-out rows, where neither graph keeps the "
           "share, and its graph meets the speed")
    return Spare({**summary, "shipped": True, "why": why}, row, exported, check)


def _why_not_shipped(check: dict, first_check: dict, row: dict, winner: dict, goal: Goal) -> str | None:
    """Why the trained-on graph (its ``check``, its segment ``row``) does not replace the first
    (``first_check``, the search's ``winner`` row), or None where it does: it meets the speed, and it
    keeps the share, or neither keeps it and the trained-on student scores higher on all held-out rows
    (:meth:`~kdbert.compress.schedule.Goal.pooled`, as the winner rule ranks when none keeps)."""
    if not check["fast_enough"]:
        return "its shipped graph does not meet the speed"
    if check["keeps"]:
        return None
    if first_check["keeps"]:
        return "its shipped graph does not keep the share"
    trained_on, first = goal.pooled(row), goal.pooled(winner)
    if trained_on <= first:
        return (f"neither graph keeps the share and it scores no higher on all held-out rows "
                f"({trained_on:.2f} against {first:.2f})")
    return None
