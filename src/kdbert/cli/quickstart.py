"""The main job: teacher fine-tuning -> student distillation -> evaluation -> teacher-vs-student table.

``kdbert quickstart`` runs the whole path on the packaged teacher and a local GLUE task:

1. fine-tune the default teacher (all-MiniLM-L6-v2) on the task;
2. distil it into a student (default: TinyBERT task distillation into a 3-layer student
   initialised from teacher layers 1, 3, 5 (0-based 0, 2, 4), which needs no general
   distillation to be useful after a short run);
3. export both to ONNX with an int8 copy (``kdbert export --quantize int8``, parity checked on
   dev), evaluate them on dev and ``bench`` all four (parameters, FLOPs, CPU latency, speedup)
   in PyTorch and ONNX Runtime int8;
4. print and save the table (``summary.md``, ``summary.json``), with the student's speedup over
   the teacher deployed the same way (both int8), which is distillation's own share.

Budget ``short`` (default): 16,000 training rows and one epoch per stage; the whole job, exports
and their dev checks included, takes about 6 minutes on 2 idle CPU cores (BENCHMARKS.md: 5.9 min
in bf16 where the CPU has it, 6.5 in float32). ``full`` uses the
per-task defaults on the whole training set. Each step is skipped when its output already exists,
and a step interrupted mid-way resumes from its last checkpoint, so rerunning the command
continues where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from kdbert.cli.common import add_command, add_task_arguments, task_options
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskOptions

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
    from kdbert.methods.front import distill_task
    from kdbert.deploy.bench import bench_model, compare, format_table
    from kdbert.deploy.export import export_model
    from kdbert.methods.finetune import finetune

    out = Path(output_dir)
    short = budget == "short"
    limits = dict(SHORT_BUDGET) if short else {}
    if max_train_examples:
        limits["max_train_examples"] = max_train_examples
    teacher_dir, student_dir = out / "teacher", out / f"student-{method}"

    teacher_metrics = _finished(teacher_dir)
    if teacher_metrics is None:
        log(f"[1/4] fine-tuning the teacher on {task.task} -> {teacher_dir}")
        options = {"output_dir": str(teacher_dir), "model": model, "seed": seed, "no_progress": not progress, **limits}
        teacher_metrics = finetune(task, options, resume=(teacher_dir / "run_config.json").exists())["best_metrics"]

    student_metrics = _finished(student_dir)
    if student_metrics is None:
        log(f"[2/4] distilling ({method}) into a {len(student_layers.split(','))}-layer student -> {student_dir}")
        options = {"method": method, "teacher": str(teacher_dir), "student_layers": student_layers, "seed": seed,
                   "no_progress": not progress}
        if short:
            options.update(epochs=1, intermediate_epochs=1)
        if limits.get("max_train_examples"):
            options["max_train_examples"] = limits["max_train_examples"]
        report = distill_task(task, options, str(student_dir), resume=(student_dir / "run_config.json").exists())
        student_metrics = report["dev_metrics"]

    exports = {}
    for folder in (teacher_dir, student_dir):
        report_path = folder / "onnx" / "export_report.json"
        if not report_path.exists():
            log(f"[3/4] exporting {folder} to ONNX + int8 -> {folder / 'onnx'}")
            export_model(folder, quantize="int8", task=task)
        exports[folder] = json.loads(report_path.read_text())

    log("[4/4] measuring size and CPU speed (PyTorch and ONNX Runtime int8)")
    seq_len = 64 if task.task.lower() in ("sst2", "sst-2", "cola") else 128
    int8 = {folder: folder / "onnx" / "model.int8.onnx" for folder in exports}
    rows = compare([bench_model(str(teacher_dir), seq_len=seq_len, name="teacher", runs=20),
                    bench_model(str(student_dir), seq_len=seq_len, name=f"student ({method})", runs=20),
                    bench_model(int8[teacher_dir], seq_len=seq_len, name="teacher int8", runs=20),
                    bench_model(int8[student_dir], seq_len=seq_len, name=f"student ({method}) int8", runs=20)])
    scores = (teacher_metrics["score"], student_metrics["score"],
              exports[teacher_dir]["dev_metrics"]["onnx_int8"]["score"],
              exports[student_dir]["dev_metrics"]["onnx_int8"]["score"])
    for row, score in zip(rows, scores):
        row["dev_score"] = score
    precision = {name: _training_precision(folder) for name, folder in (("teacher", teacher_dir),
                                                                         ("student", student_dir))}
    retained = 100.0 * student_metrics["score"] / teacher_metrics["score"] if teacher_metrics["score"] else 0.0
    deployed = rows[2]["latency_median_ms"] / rows[3]["latency_median_ms"]
    deployed_retained = 100.0 * scores[3] / scores[2] if scores[2] else 0.0
    table = format_table(rows)
    lines = [f"# kdbert quickstart: {task.task}, budget {budget}", "",
             f"teacher dev: {_describe(teacher_metrics)}", f"student dev: {_describe(student_metrics)}",
             f"student keeps {retained:.1f}% of the teacher's score",
             "trained in " + ", ".join(f"{value} ({name})" for name, value in precision.items()), "",
             f"deployed as ONNX int8 (both): the student is {deployed:.2f}x faster than the int8 teacher at batch 1 "
             f"and keeps {deployed_retained:.1f}% of its score ({rows[3]['speedup']:.2f}x the PyTorch teacher)",
             "", table, ""]
    (out / "summary.md").write_text("\n".join(lines))
    summary = {"rows": rows, "retained_percent": retained, "int8_speedup_vs_int8_teacher": deployed,
               "int8_retained_percent": deployed_retained, "training_precision": precision}
    write_json(out / "summary.json", summary)
    log("\n".join(lines))
    return summary


def _training_precision(folder: Path) -> str:
    """The autocast precision a finished step trained in (from its train report)."""
    runtime = json.loads((folder / "train_report.json").read_text()).get("runtime")
    if runtime is None:  # trained before kdbert recorded it: float32 was the only default then
        return "float32"
    return {"no": "float32"}.get(runtime["mixed_precision"], runtime["mixed_precision"])


def _describe(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in metrics.items())


def cmd_quickstart(args) -> int:
    run_quickstart(task_options(args), args.output_dir, budget=args.budget, method=args.method,
                   student_layers=args.student_layers, seed=args.seed, progress=not args.no_progress,
                   model=args.model, max_train_examples=args.max_train_examples)
    return 0


def add_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "quickstart", cmd_quickstart,
                    help="the main job: fine-tune the default teacher, distil a student, compare them "
                         "(about 6 min on 2 CPU cores)",
                    description="Fine-tune the packaged teacher on a task, distil a student, evaluate and bench "
                                "both, and print a teacher-vs-student table. Rerun to continue an interrupted run.")
    add_task_arguments(p, required=False)
    p.set_defaults(task="sst2")
    p.add_argument("--output-dir", default="runs/quickstart", help="where the teacher, student and summary go")
    p.add_argument("--budget", choices=["short", "full"], default="short",
                   help="short: a 16000-row subset, one epoch per stage; full: per-task defaults")
    p.add_argument("--method", choices=["tinybert", "kd", "pkd"], default="tinybert", help="distillation method")
    p.add_argument("--model", default="default", help="teacher to fine-tune (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--max-train-examples", type=int, help="training rows per stage (overrides the budget's subset)")
    p.add_argument("--student-layers", default="0,2,4", help="teacher layers (0-based) the student starts from")
    p.add_argument("--seed", type=int, default=42, help="random seed")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
