"""The main job: fine-tune the teacher, then ``kdbert compress`` it, and print a teacher-vs-student table.

``kdbert quickstart`` runs the whole path on the packaged teacher and a local GLUE task:

1. fine-tune the default teacher (all-MiniLM-L6-v2) on the task, without the training rows the
   search holds out (``--held-out-fraction``, default 0.1), so that the search's picks and its
   "kept" compare students with a teacher on rows neither has trained on;
2. a short ``kdbert compress`` (:mod:`kdbert.compress.pipeline`): time the int8 teacher and every
   candidate shape on this machine, distil those at least ``--target-speedup`` times faster by
   successive halving within ``--budget-minutes``, pick the winner on held-out training rows and
   export it as int8, parity and dev score checked; its report and Pareto plot go to
   ``compress/``;
3. ``bench`` the teacher and the winner in PyTorch and ONNX Runtime int8 (parameters, FLOPs, CPU
   latency, speedup) and print and save the table (``summary.md``, ``summary.json``), with the
   winner's speedup over the teacher deployed the same way (both int8) on the task's dev rows.

Budget ``short`` (default): 16,000 training rows, one epoch for the teacher, a 6-minute search;
about 10 minutes on 2 idle CPU cores (BENCHMARKS.md). ``full`` fine-tunes on the whole training
set with the per-task defaults (the search keeps its own budget). Each step is skipped when its
output exists, and an interrupted step resumes, so rerunning the command continues where it
stopped.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kdbert.cli.common import add_command, add_task_arguments, task_options
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskOptions

SHORT_BUDGET = {"max_train_examples": 16000, "epochs": 1}


def _finished(folder: Path) -> dict | None:
    report = folder / "metrics.json"
    return json.loads(report.read_text()) if report.exists() and (folder / "train_report.json").exists() else None


def run_quickstart(task: TaskOptions, output_dir: str, budget: str = "short", target_speedup: float = 4.0,
                   budget_minutes: float = 6.0, first_steps: int = 100, intermediate_share: float = 0.0,
                   candidates: str | None = None,
                   word_vectors: str | None = None, seed: int = 42, progress: bool = True, model: str = "default",
                   max_train_examples: int | None = None, log=print) -> dict:
    """Run the main job; returns the summary (also written to ``output_dir``).

    ``model`` is the teacher to fine-tune (default: the packaged all-MiniLM-L6-v2);
    ``max_train_examples`` overrides the budget's training subset (the search distils on it too);
    ``target_speedup``, ``budget_minutes``, ``first_steps``, ``intermediate_share``, ``candidates`` and
    ``word_vectors`` are ``kdbert compress``'s options.
    """
    from kdbert.compress.pipeline import HELD_OUT_FRACTION, CompressConfig, compress
    from kdbert.deploy.bench import bench_model, compare, format_table
    from kdbert.methods.finetune import finetune

    out = Path(output_dir)
    task = replace(task, held_out_fraction=task.held_out_fraction or HELD_OUT_FRACTION)
    limits = dict(SHORT_BUDGET) if budget == "short" else {}
    if max_train_examples:
        limits["max_train_examples"] = max_train_examples
    teacher_dir, search_dir = out / "teacher", out / "compress"

    teacher_metrics = _finished(teacher_dir)
    if teacher_metrics is None:
        log(f"[1/3] fine-tuning the teacher on {task.task} -> {teacher_dir}")
        options = {"output_dir": str(teacher_dir), "model": model, "seed": seed, "no_progress": not progress, **limits}
        teacher_metrics = finetune(task, options, resume=(teacher_dir / "run_config.json").exists())["best_metrics"]

    log(f"[2/3] compress: students >= {target_speedup:g}x faster than the int8 teacher, distilled for "
        f"{budget_minutes:g} min -> {search_dir}")
    config = CompressConfig(teacher=str(teacher_dir), target_speedup=target_speedup, budget_minutes=budget_minutes,
                            first_steps=first_steps, intermediate_share=intermediate_share, candidates=candidates,
                            word_vectors=word_vectors, seed=seed,
                            max_train_examples=limits.get("max_train_examples"))
    report = compress(task, config, search_dir)
    winner = report["winner"]

    log("[3/3] measuring size and CPU speed (PyTorch and ONNX Runtime int8)")
    seq_len = 64 if task.task.lower() in ("sst2", "sst-2", "cola") else 128
    name = f"student ({winner['candidate']})"
    rows = compare([bench_model(str(teacher_dir), seq_len=seq_len, name="teacher", runs=20),
                    bench_model(winner["run"], seq_len=seq_len, name=name, runs=20),
                    bench_model(search_dir / "teacher-onnx" / "model.int8.onnx", seq_len=seq_len,
                                name="teacher int8", runs=20),
                    bench_model(search_dir / "winner" / "model.int8.onnx", seq_len=seq_len, name=f"{name} int8",
                                runs=20)])
    shipped, teacher_int8 = report["shipped"], report["teacher_scores"]["dev_deployed"]
    scores = (teacher_metrics["score"], winner["dev_score"], teacher_int8, shipped["dev_score"])
    for row, score in zip(rows, scores):
        row["dev_score"] = score
    retained = 100.0 * winner["dev_score"] / teacher_metrics["score"] if teacher_metrics["score"] else 0.0
    deployed_retained = 100.0 * shipped["dev_score"] / teacher_int8 if teacher_int8 else 0.0
    int8_methods = {"teacher": json.loads((search_dir / "teacher-onnx" / "export_report.json").read_text())
                    ["quantization"]["method"], "student": shipped["int8"]["method"]}
    lines = [f"# kdbert quickstart: {task.task}, budget {budget}", "",
             f"teacher dev: {_describe(teacher_metrics)}",
             f"winner of the search: {winner['candidate']} ({winner['method']}, {winner['steps']} steps, "
             f"{winner['rule']}), dev {winner['dev_score']:.2f}: {retained:.1f}% of the teacher's score",
             f"trained in {_training_precision(teacher_dir)} (teacher)", "",
             f"deployed as ONNX int8 (teacher {int8_methods['teacher']}, student {int8_methods['student']}: "
             f"the fastest method within 0.5 dev points of fp32), on the task's dev rows at their own lengths: "
             f"the student is "
             f"{shipped['speedup']:.2f}x faster than the int8 teacher at batch 1 and keeps {deployed_retained:.1f}% "
             f"of its score; every candidate in {search_dir / 'compress_report.md'} and "
             f"{search_dir / 'pareto.png'}",
             "", format_table(rows), ""]
    (out / "summary.md").write_text("\n".join(lines))
    summary = {"rows": rows, "winner": winner["candidate"], "retained_percent": retained,
               "int8_speedup_vs_int8_teacher": shipped["speedup"], "int8_retained_percent": deployed_retained,
               "int8_methods": int8_methods,
               "training_precision": {"teacher": _training_precision(teacher_dir)},
               "compress_report": str(search_dir / "compress_report.json")}
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
    run_quickstart(task_options(args), args.output_dir, budget=args.budget, target_speedup=args.target_speedup,
                   budget_minutes=args.budget_minutes, first_steps=args.first_steps,
                   intermediate_share=args.intermediate_share, candidates=args.candidates,
                   word_vectors=args.word_vectors, seed=args.seed, progress=not args.no_progress, model=args.model,
                   max_train_examples=args.max_train_examples)
    return 0


def add_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "quickstart", cmd_quickstart,
                    help="the main job: fine-tune the default teacher, compress it, compare them "
                         "(about 10 min on 2 CPU cores)",
                    description="Fine-tune the packaged teacher on a task, run a short `kdbert compress` (the fastest "
                                "student that keeps its score, found on this machine), bench both, and print a "
                                "teacher-vs-student table. Rerun to continue an interrupted run.")
    add_task_arguments(p, required=False)
    p.set_defaults(task="sst2")
    p.add_argument("--output-dir", default="runs/quickstart", help="where the teacher, the search and summary go")
    p.add_argument("--budget", choices=["short", "full"], default="short",
                   help="short: a 16000-row subset, one epoch for the teacher; full: per-task defaults")
    p.add_argument("--target-speedup", type=float, default=4.0,
                   help="students at least this many times faster than the int8 teacher are distilled")
    p.add_argument("--budget-minutes", type=float, default=6.0, help="wall time for distilling the candidates")
    p.add_argument("--first-steps", type=int, default=100, help="steps per candidate in the search's first round")
    p.add_argument("--intermediate-share", type=float, default=0.0,
                   help="share of a BERT-style candidate's steps on TinyBERT's intermediate stage (0: prediction only)")
    p.add_argument("--candidates", help="only these candidates (comma-separated, e.g. bert-2x256; default: all)")
    p.add_argument("--word-vectors", help="GloVe or word2vec text file for the BiLSTM candidates (default: random)")
    p.add_argument("--model", default="default", help="teacher to fine-tune (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--max-train-examples", type=int, help="training rows (overrides the budget's subset)")
    p.add_argument("--seed", type=int, default=42, help="random seed")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
