"""Fine-tune the default teacher on GLUE tasks and record dev metrics and wall time.

    python benchmarks/teacher_glue.py --data-dir ../shared/data/glue_data --budget cpu

Each task's run goes to ``runs/teacher-<task>`` (resumable: an interrupted task continues from
its last checkpoint, a finished task is skipped) and its result to
``benchmarks/results/teacher_glue.json``; ``benchmarks/report.py`` turns results into BENCHMARKS.md.

Budgets: ``full`` uses kdbert's per-task defaults; ``cpu`` fits a 2-core machine (SST-2 on a
20k-row subset for one epoch, 3 epochs elsewhere) and is stated next to every figure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import load_results, machine_info, save_result  # noqa: E402

from kdbert.data.load import TaskOptions  # noqa: E402
from kdbert.finetune import FinetuneConfig, finetune  # noqa: E402

BUDGETS = {
    "cpu": {"cola": {"epochs": 3}, "sst2": {"epochs": 1, "max_train_examples": 20000}, "mrpc": {"epochs": 3},
            "stsb": {"epochs": 3}, "rte": {"epochs": 3}},
    "full": {task: {} for task in ("cola", "sst2", "mrpc", "stsb", "rte", "qnli", "mnli", "qqp")},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data/glue_data")
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="cpu")
    parser.add_argument("--tasks", nargs="*", help="subset of the budget's tasks")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--model", default="default")
    parser.add_argument("--learning-rate", type=float, help="override the task default (a tuning run)")
    parser.add_argument("--epochs", type=float, help="override the budget's epochs (a tuning run)")
    args = parser.parse_args()
    tuning = {k: v for k, v in (("learning_rate", args.learning_rate), ("epochs", args.epochs)) if v is not None}
    done = load_results("teacher_glue")
    for task, overrides in BUDGETS[args.budget].items():
        if args.tasks and task not in args.tasks:
            continue
        overrides = {**overrides, **tuning}
        suffix = "".join(f"-{k}{v:g}" for k, v in sorted(tuning.items()))
        key = f"{task}/{args.budget}{suffix}"
        if key in done:
            print(f"{key}: done already ({done[key]['metrics']})")
            continue
        out = Path(args.runs_dir) / f"teacher-{task}{suffix}"
        config = FinetuneConfig(output_dir=str(out), model=args.model, progress=False, **overrides)
        resume = (out / "run_config.json").exists()
        report = finetune(TaskOptions(task, data_dir=args.data_dir), config, resume=resume)
        result = {"task": task, "budget": args.budget, "overrides": overrides, "tuning": bool(tuning), "metrics": report["best_metrics"],
                  "train_seconds": report["train_seconds"], "output_dir": str(out),
                  "command": f"python benchmarks/teacher_glue.py --budget {args.budget} --tasks {task}"
                             + "".join(f" --{k.replace('_', '-')} {v:g}" for k, v in sorted(tuning.items())),
                  "hyperparameters": {k: report["config"][k] for k in ("epochs", "learning_rate", "batch_size",
                                                                       "max_seq_len")},
                  **machine_info()}
        save_result("teacher_glue", key, result)
        print(f"{key}: {report['best_metrics']} in {report['train_seconds']:.0f}s (resumed: {resume})")


if __name__ == "__main__":
    main()
