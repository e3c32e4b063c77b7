"""The main job: teacher fine-tuning -> student distillation -> evaluation -> teacher-vs-student table.

``kdbert quickstart`` runs the whole path on the packaged teacher and a local GLUE task:

1. fine-tune the default teacher (all-MiniLM-L6-v2) on the task;
2. distil it into a student (default: TinyBERT task distillation into a 3-layer student
   initialised from teacher layers 1, 3, 5 (0-based 0, 2, 4), which needs no general
   distillation to be useful after a short run);
3. evaluate both on dev and ``bench`` both (parameters, FLOPs, CPU latency, speedup);
4. print and save the table (``summary.md``, ``summary.json``).

Budget ``short`` (default) takes about 7 minutes on 2 idle CPU cores: 16,000 training rows and one
epoch per stage. ``full`` uses the per-task defaults on the whole training set. Each step is
skipped when its output already exists, and a step interrupted mid-way resumes from its
last checkpoint, so rerunning the command continues where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from kdbert.bench import bench_model, compare, format_table
from kdbert.data.load import TaskOptions
from kdbert.distill import distill_task
from kdbert.finetune import FinetuneConfig, finetune
from kdbert.io import write_json

SHORT_BUDGET = {"max_train_examples": 16000, "epochs": 1}


def _finished(folder: Path) -> dict | None:
    report = folder / "metrics.json"
    return json.loads(report.read_text()) if report.exists() and (folder / "train_report.json").exists() else None


def run_quickstart(task: TaskOptions, output_dir: str, budget: str = "short", method: str = "tinybert",
                   student_layers: str = "0,2,4", seed: int = 42, progress: bool = True, model: str = "default",
                   max_train_examples: int | None = None, log=print) -> dict:
    """Run the main job; returns the summary rows (also written to ``output_dir``).

    ``model`` is the teacher to fine-tune (default: the packaged all-MiniLM-L6-v2);
    ``max_train_examples`` overrides the budget's training subset.
    """
    out = Path(output_dir)
    short = budget == "short"
    limits = dict(SHORT_BUDGET) if short else {}
    if max_train_examples:
        limits["max_train_examples"] = max_train_examples
    teacher_dir, student_dir = out / "teacher", out / f"student-{method}"

    teacher_metrics = _finished(teacher_dir)
    if teacher_metrics is None:
        log(f"[1/3] fine-tuning the teacher on {task.task} -> {teacher_dir}")
        config = FinetuneConfig(output_dir=str(teacher_dir), model=model, seed=seed, progress=progress, **limits)
        teacher_metrics = finetune(task, config, resume=(teacher_dir / "run_config.json").exists())["best_metrics"]

    student_metrics = _finished(student_dir)
    if student_metrics is None:
        log(f"[2/3] distilling ({method}) into a {len(student_layers.split(','))}-layer student -> {student_dir}")
        options = {"method": method, "teacher": str(teacher_dir), "student_layers": student_layers, "seed": seed,
                   "no_progress": not progress}
        if short:
            options.update(epochs=1, intermediate_epochs=1)
        if limits.get("max_train_examples"):
            options["max_train_examples"] = limits["max_train_examples"]
        report = distill_task(task, options, str(student_dir), resume=(student_dir / "run_config.json").exists())
        student_metrics = report["dev_metrics"]

    log("[3/3] measuring size and CPU speed")
    seq_len = 64 if task.task.lower() in ("sst2", "sst-2", "cola") else 128
    rows = compare([bench_model(str(teacher_dir), seq_len=seq_len, name="teacher", runs=20),
                    bench_model(str(student_dir), seq_len=seq_len, name=f"student ({method})", runs=20)])
    for row, metrics in zip(rows, (teacher_metrics, student_metrics)):
        row["dev_score"] = metrics["score"]
    retained = 100.0 * student_metrics["score"] / teacher_metrics["score"] if teacher_metrics["score"] else 0.0
    table = format_table(rows)
    lines = [f"# kdbert quickstart: {task.task}, budget {budget}", "",
             f"teacher dev: {_describe(teacher_metrics)}", f"student dev: {_describe(student_metrics)}",
             f"student keeps {retained:.1f}% of the teacher's score", "", table, ""]
    (out / "summary.md").write_text("\n".join(lines))
    write_json(out / "summary.json", {"rows": rows, "retained_percent": retained})
    log("\n".join(lines))
    return {"rows": rows, "retained_percent": retained}


def _describe(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in metrics.items())
