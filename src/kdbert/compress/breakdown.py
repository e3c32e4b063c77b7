"""The speedup breakdown in ``kdbert compress``'s report (the FastFormers paper's form): from the
teacher as trained to the winner as shipped, one change at a time, each timed on this machine at
batch 1 over the task's dev rows (the same rows and threads as the search's speed table; the
teacher's steps 1-3 run each row ``BREAKDOWN_REPEATS`` times, the speed table 3):

1. teacher, PyTorch fp32, every row padded to ``seq_len``;
2. the same, each row at its own length (sequence length);
3. teacher, ONNX Runtime fp32 (runtime);
4. teacher, ONNX Runtime int8, the method its export kept (int8; only when shipping int8);
5. the winner in the shipped runtime (distillation);
6. the same at other threads: on every core where the search timed fewer, else on one thread (a
   server running one thread per worker); not on a one-core machine. The teacher is timed there
   too, in the same turns, so that the report can state the speedup with each model at its own
   fastest thread count (:func:`each_at_its_fastest`).

Each row: ``latency_ms`` (median; step 1 at the fixed length, the others p50 over real rows),
``factor`` = previous latency / this one, ``total`` = step 1's latency / this one, and the dev
score of that model in that runtime. The teacher's steps (1-4) do not depend on the search: they
are timed before it (:func:`teacher_steps`; the deployed teacher's row is the speed table's), so
that what they cost is measured before the search plans its time; the winner's (5-6) after it
(:func:`speedup_breakdown`). ``breakdown.json`` keeps both, the teacher's for one set of timing
settings, the winner's for one winner too, so a rerun reuses them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kdbert.compress.speed import (RUNTIMES, SpeedSettings, other_threads, time_against_teacher, time_export,
                                   timed_model, timed_threads)
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.bench import measure_latency, time_torch_task_rows
from kdbert.deploy.task_rows import time_feeds
from kdbert.families.registry import family_of_folder

FILE = "breakdown.json"
# Times each dev row is run for the teacher's steps 1-3, against the speed table's 3: a row of the
# report, not a decision, and the PyTorch teacher's 600 runs of 200 rows took 34 s of an 8-minute
# budget on an AVX2-only AMD EPYC (2026-12-04).
BREAKDOWN_REPEATS = 1


def _reused(out: Path, part: str, key: dict, measure) -> list[dict]:
    """``part`` of ``out/breakdown.json`` when it was measured for ``key``, else ``measure()``, kept."""
    path = out / FILE
    saved = json.loads(path.read_text()) if path.is_file() else {}
    if saved.get(part, {}).get("key") != key:
        saved[part] = {"key": key, "steps": measure()}
        write_json(path, saved)
    return saved[part]["steps"]


def teacher_steps(teacher_dir: str, out: Path, task: TaskOptions, settings: SpeedSettings, teacher_row: dict,
                  scores: dict[str, float | None]) -> list[dict]:
    """Steps 1-4 of the module doc for the teacher exported in ``out/teacher-onnx`` (``teacher_row``: its
    row in the speed table, timed in ``settings.runtime``); ``scores``: dev scores keyed ``teacher``,
    ``teacher_onnx_fp32`` and ``teacher_onnx_int8``."""

    def measure() -> list[dict]:
        padded_ms, own_length_ms = _torch_teacher_ms(teacher_dir, task, settings)
        fp32_ms = teacher_row["latency_real_p50_ms"] if settings.runtime == "onnx-fp32" else _onnx_ms(
            out / "teacher-onnx" / RUNTIMES["onnx-fp32"], task, settings)
        steps = [("teacher", f"PyTorch fp32, padded to {settings.seq_len} tokens", padded_ms, scores["teacher"]),
                 ("teacher", "each row at its own length", own_length_ms, scores["teacher"]),
                 ("teacher", "ONNX Runtime fp32", fp32_ms, scores["teacher_onnx_fp32"])]
        if settings.runtime == "onnx-int8":
            quantization = json.loads((out / "teacher-onnx" / "export_report.json").read_text())["quantization"]
            steps.append(("teacher", f"ONNX Runtime int8 ({quantization['method']})",
                          teacher_row["latency_real_p50_ms"], scores["teacher_onnx_int8"]))
        return [_step(*step) for step in steps]

    return _reused(out, "teacher", {"settings": settings.key()}, measure)


def _torch_teacher_ms(teacher_dir: str, task: TaskOptions, settings: SpeedSettings) -> tuple[float, float]:
    """The PyTorch teacher's batch-1 latency in ms: the median of ``settings.runs`` runs padded to
    ``settings.seq_len``, and the p50 over the task's rows at their own lengths, each run
    ``BREAKDOWN_REPEATS`` times."""
    threads = timed_threads(settings.threads)
    model = family_of_folder(teacher_dir).load_for_bench(teacher_dir)
    padded = measure_latency(model, settings.seq_len, runs=settings.runs, threads=threads)["median_ms"]
    rows = time_torch_task_rows(model, teacher_dir, task, settings.length_rows, threads, BREAKDOWN_REPEATS)
    return padded, rows["latency_real_p50_ms"]


def _onnx_ms(file: Path, task: TaskOptions, settings: SpeedSettings) -> float:
    """The p50 batch-1 latency in ms of the export ``file`` over the task's rows at their own
    lengths (:func:`~kdbert.compress.speed.timed_model`), each run ``BREAKDOWN_REPEATS`` times."""
    return time_feeds(*timed_model(file, load_task(task), settings), BREAKDOWN_REPEATS)["latency_real_p50_ms"]


def speedup_breakdown(teacher: list[dict], out: Path, task: TaskOptions, settings: SpeedSettings, winner_score: float,
                      winner_run: str, winner_latency_ms: float, timer=None) -> list[dict]:
    """The rows of the module doc: the ``teacher`` steps (:func:`teacher_steps`), then the winner shipped
    in ``out/winner`` (distilled in ``winner_run``, scoring ``winner_score`` on dev; ``winner_latency_ms``
    as the report timed it). The winner at the other thread count is timed in turns with the teacher
    by ``timer`` (default :func:`~kdbert.compress.speed.time_against_teacher`, here; compress gives its
    fresh timing process's, where the ship check was timed: in the process that searched the same
    graph read slower at one thread than at two, in a fresh one 0.32 against 0.39 ms)."""
    threads = timed_threads(settings.threads)

    def measure() -> list[dict]:
        steps = [_step("winner", "distilled", winner_latency_ms, winner_score)]
        other = other_threads(settings.threads)
        if other is not None:
            file_name = RUNTIMES[settings.runtime]
            timed = timer or time_against_teacher
            again = timed(out / "teacher-onnx" / file_name, out / "winner" / file_name, task,
                          replace(settings, threads=other))
            steps.append({**_step("winner", f"{other} thread(s) instead of {threads}",
                                  again["latency_real_p50_ms"]["student"], winner_score),
                          "threads": other, "teacher_latency_ms": again["latency_real_p50_ms"]["teacher"]})
        return steps

    key = {"winner": str(winner_run), "settings": settings.key(), "winner_latency_ms": winner_latency_ms}
    rows, first, previous = [], teacher[0]["latency_ms"], teacher[0]["latency_ms"]
    for step in teacher + _reused(out, "winner", key, measure):
        rows.append({**step, "factor": previous / step["latency_ms"], "total": first / step["latency_ms"]})
        previous = step["latency_ms"]
    return rows


def each_at_its_fastest(rows: list[dict], threads: int, teacher_ms: float, winner_ms: float) -> dict | None:
    """The winner's speedup with each model at its own fastest thread count here: the teacher's and
    the winner's latency at the ``threads`` the search timed (``teacher_ms``, ``winner_ms``, in
    turns) and at the other count (the breakdown's last row of ``rows``, which timed both in turns),
    ``speedup`` = the teacher's lower latency / the winner's lower one. A base-size teacher runs
    faster on every core while a small student does not (on SST-2's rows MPNet-base 16.7 ms at one
    thread, 11.3 at two; the MiniLM-L6 cut to 4 layers 1.55 and 1.58): timed at one thread it reads
    1.5x high. None without the other count (one core, or a breakdown from before it kept the teacher's)."""
    other = next((row for row in rows if "teacher_latency_ms" in row), None)
    if other is None:
        return None
    teacher = min((teacher_ms, threads), (other["teacher_latency_ms"], other["threads"]))
    winner = min((winner_ms, threads), (other["latency_ms"], other["threads"]))
    return {"timed_threads": threads, "teacher_threads": teacher[1], "teacher_ms": teacher[0],
            "winner_threads": winner[1], "winner_ms": winner[0], "speedup": teacher[0] / winner[0]}


def _step(model: str, change: str, latency_ms: float, dev_score: float | None) -> dict:
    return {"model": model, "change": change, "latency_ms": latency_ms, "dev_score": dev_score}


def format_breakdown(rows: list[dict]) -> list[str]:
    """The breakdown as Markdown table lines."""
    lines = ["| model | change | ms / dev row | factor | total | dev score |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        score = "-" if row["dev_score"] is None else f"{row['dev_score']:.2f}"
        lines.append(f"| {row['model']} | {row['change']} | {row['latency_ms']:.2f} | {row['factor']:.2f}x | "
                     f"{row['total']:.2f}x | {score} |")
    return lines
