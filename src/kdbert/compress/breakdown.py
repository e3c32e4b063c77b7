"""The speedup breakdown in ``kdbert compress``'s report (the FastFormers paper's form): from the
teacher as trained to the winner as shipped, one change at a time, each timed on this machine at
batch 1 over the task's dev rows (the same rows and threads as the search's speed table):

1. teacher, PyTorch fp32, every row padded to ``seq_len``;
2. the same, each row at its own length (sequence length);
3. teacher, ONNX Runtime fp32 (runtime);
4. teacher, ONNX Runtime int8, the method its export kept (int8; only when shipping int8);
5. the winner in the shipped runtime (distillation);
6. the same on every core (threads; only when the search timed fewer threads than the machine has).

Each row: ``latency_ms`` (median; step 1 at the fixed length, the others p50 over real rows),
``factor`` = previous latency / this one, ``total`` = step 1's latency / this one, and the dev
score of that model in that runtime. ``breakdown.json`` keeps the rows for one winner and timing
settings, so a rerun reuses them.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from kdbert.compress.speed import RUNTIMES, SpeedSettings, time_export
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskOptions
from kdbert.deploy.bench import bench_model

FILE = "breakdown.json"


def speedup_breakdown(teacher_dir: str, out: Path, task: TaskOptions, settings: SpeedSettings,
                      scores: dict[str, float | None], winner_run: str, winner_latency_ms: float) -> list[dict]:
    """The rows of the module doc for the winner shipped in ``out/winner`` (distilled in
    ``winner_run``; ``winner_latency_ms`` as the report timed it), the teacher exported in
    ``out/teacher-onnx``. ``scores``: dev scores keyed ``teacher``, ``teacher_onnx_fp32``,
    ``teacher_onnx_int8`` and ``winner``."""
    key = {"winner": str(winner_run), "settings": settings.key(), "winner_latency_ms": winner_latency_ms}
    path = out / FILE
    if path.is_file():
        previous = json.loads(path.read_text())
        if previous.get("key") == key:
            return previous["rows"]
    threads = settings.threads or os.cpu_count()
    torch_row = bench_model(teacher_dir, seq_len=settings.seq_len, threads=threads, runs=settings.runs, task=task,
                            length_rows=settings.length_rows)
    teacher_fp32 = time_export(out / "teacher-onnx" / RUNTIMES["onnx-fp32"], task, settings)
    steps = [("teacher", f"PyTorch fp32, padded to {settings.seq_len} tokens", torch_row["latency_median_ms"],
              scores["teacher"]),
             ("teacher", "each row at its own length", torch_row["latency_real_p50_ms"], scores["teacher"]),
             ("teacher", "ONNX Runtime fp32", teacher_fp32["latency_real_p50_ms"], scores["teacher_onnx_fp32"])]
    if settings.runtime == "onnx-int8":
        teacher_int8 = time_export(out / "teacher-onnx" / RUNTIMES["onnx-int8"], task, settings)
        quantization = json.loads((out / "teacher-onnx" / "export_report.json").read_text())["quantization"]
        steps.append(("teacher", f"ONNX Runtime int8 ({quantization['method']})", teacher_int8["latency_real_p50_ms"],
                      scores["teacher_onnx_int8"]))
    steps.append(("winner", "distilled", winner_latency_ms, scores["winner"]))
    if threads < (os.cpu_count() or 1):
        every_core = time_export(out / "winner" / RUNTIMES[settings.runtime], task,
                                 replace(settings, threads=os.cpu_count()))
        steps.append(("winner", f"{os.cpu_count()} threads instead of {threads}", every_core["latency_real_p50_ms"],
                      scores["winner"]))
    rows, first, previous = [], steps[0][2], steps[0][2]
    for model, change, latency, score in steps:
        rows.append({"model": model, "change": change, "latency_ms": latency, "factor": previous / latency,
                     "total": first / latency, "dev_score": score})
        previous = latency
    write_json(path, {"key": key, "rows": rows})
    return rows


def format_breakdown(rows: list[dict]) -> list[str]:
    """The breakdown as Markdown table lines."""
    lines = ["| model | change | ms / dev row | factor | total | dev score |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        score = "-" if row["dev_score"] is None else f"{row['dev_score']:.2f}"
        lines.append(f"| {row['model']} | {row['change']} | {row['latency_ms']:.2f} | {row['factor']:.2f}x | "
                     f"{row['total']:.2f}x | {score} |")
    return lines
