"""Distil the fine-tuned teacher into students with every method and record dev scores.

    python benchmarks/distill_glue.py --task sst2 --budget cpu --variants kd pkd-skip --seeds 42

Needs the teacher from ``benchmarks/teacher_glue.py`` (``runs/teacher-<task>``). Variants:

- TinyBERT issue (student ``tinybert4``, 4 layers x 312): ``tinybert4-finetune`` (no
  distillation: gold labels only), ``tinybert-task`` (task distillation only),
  ``tinybert-general-task`` (from the general student of ``--general-student``),
  ``tinybert-general-task-aug`` (plus ``--aug-file``, the task's train_aug.tsv). Beyond the paper:
  ``tinybert4-ws-finetune`` and ``tinybert-ws-task``, the same student initialised by weight
  selection from the teacher (``--student-init teacher-weights``) instead of randomly, and
  ``tinybert-ws-general-task(-aug)`` from the general student distilled from that initialisation
  (``--general-ws-student``). The augmented variants fit STS-B's prediction stage to the
  teacher's scores (``--regression-target teacher``): an augmented row carries the gold score of
  the sentence it came from. ``tinybert-ws-general-task-aug-gold`` keeps the paper's gold targets;
  ``tinybert-ws-general-task-aug-x4`` gets 4x the steps on the augmented file (at the cpu budget
  the other augmented variants get the steps of the runs on the original rows).
- PKD/KD issue (3 layers x 384, initialised from teacher layers 1-3): ``l3-finetune``, ``kd``,
  ``pkd-skip``, ``pkd-last``, ``tinybert-l3`` (TinyBERT task distillation into that student); and ``distilbert-d`` (a DistilBERT student initialised from teacher
  layers 0, 2, 4, distilled while fine-tuning), ``distilbert-general-d`` (from ``--distilbert-general``).

At the cpu budget TinyBERT's prediction stage runs at 1e-4, the rate of the fine-tuning baseline, not the
paper's 3e-5 (tuned for BERT-base-sized general students; at 3e-5 a 4000-row, 2-epoch run stayed
at chance on SST-2).

Budgets: ``cpu`` = first ``--max-train-examples`` rows (default 4000), 2 epochs per stage,
optionally one ``--learning-rate`` for every stage. CoLA runs use all 8551 rows at 1e-4 (at its
fine-tuning default of 3e-5 on 4000 rows every 3-layer student predicted one class, MCC 0);
STS-B runs use all 5749 rows for 3 epochs (at 4000 rows x 2 epochs the regression had not
converged: dev Pearson 10 for one seed, 52 for another);
``paper`` = the methods' own per-task defaults on the whole training set (GPU-sized).
Results: ``benchmarks/results/distill.json``; each run resumes if interrupted.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import load_results, machine_info, save_result  # noqa: E402

from augment_glue import aug_file  # noqa: E402

from kdbert.augment import task_rows  # noqa: E402
from kdbert.data.load import TaskOptions  # noqa: E402
from kdbert.distill import distill_task  # noqa: E402

VARIANTS = {
    "tinybert4-finetune": {"method": "tinybert", "student": "tinybert4", "skip_intermediate": True,
                           "no_prediction_loss": True, "learning_rate": 1e-4},
    "tinybert-task": {"method": "tinybert", "student": "tinybert4", "learning_rate": 1e-4},
    "tinybert-general-task": {"method": "tinybert", "student": "{general_student}", "learning_rate": 1e-4},
    "tinybert-general-task-aug": {"method": "tinybert", "student": "{general_student}", "train_file": "{aug_file}",
                                  "learning_rate": 1e-4, "regression_target": "teacher"},
    "tinybert4-ws-finetune": {"method": "tinybert", "student": "tinybert4", "student_init": "teacher-weights",
                              "skip_intermediate": True, "no_prediction_loss": True, "learning_rate": 1e-4},
    "tinybert-ws-task": {"method": "tinybert", "student": "tinybert4", "student_init": "teacher-weights",
                         "learning_rate": 1e-4},
    "tinybert-ws-general-task": {"method": "tinybert", "student": "{general_ws_student}", "learning_rate": 1e-4},
    "tinybert-ws-general-task-aug": {"method": "tinybert", "student": "{general_ws_student}",
                                     "train_file": "{aug_file}", "learning_rate": 1e-4, "regression_target": "teacher"},
    "tinybert-ws-general-task-aug-gold": {"method": "tinybert", "student": "{general_ws_student}",
                                          "train_file": "{aug_file}", "learning_rate": 1e-4},
    "tinybert-ws-general-task-aug-x4": {"method": "tinybert", "student": "{general_ws_student}",
                                        "train_file": "{aug_file}", "learning_rate": 1e-4,
                                        "regression_target": "teacher", "aug_step_factor": 4},
    "tinybert-l3": {"method": "tinybert", "student_layers": "3", "learning_rate": 1e-4},
    "l3-finetune": {"method": "kd", "student_layers": "3", "alpha": 0.0},
    "kd": {"method": "kd", "student_layers": "3"},
    "pkd-skip": {"method": "pkd", "student_layers": "3", "layer_map": "skip"},
    "pkd-last": {"method": "pkd", "student_layers": "3", "layer_map": "last"},
    "distilbert-d": {"method": "distilbert", "student": "{distilbert_student}"},
    "distilbert-general-d": {"method": "distilbert", "student": "{distilbert_general}"},
}


BATCH_SIZE = 32  # kdbert's task-distillation default


def equal_steps(epochs: float, rows: int, factor: float = 1) -> int:
    """Optimiser steps per stage of ``epochs`` over ``rows`` original rows (the last batch of an
    epoch may be partial), times ``factor``: the budget an augmented run gets at the cpu budget.

    (Runs recorded before 2026-11-23 used ``ceil(epochs * max_train_examples / 32)``, which for
    MRPC and RTE, with fewer rows than ``--max-train-examples``, gave the augmented runs 250
    steps against 230 and 156.)"""
    return math.ceil(factor * epochs * math.ceil(rows / BATCH_SIZE))


def original_rows(args) -> int:
    """Rows of the task's own training file."""
    return len(task_rows(TaskOptions(args.task, data_dir=args.data_dir))[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--data-dir", default="../shared/data/glue_data")
    parser.add_argument("--budget", choices=["cpu", "paper"], default="cpu")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument("--max-train-examples", type=int, default=4000)
    parser.add_argument("--epochs", type=float, default=2.0, help="cpu budget: epochs per stage")
    parser.add_argument("--learning-rate", type=float,
                        help="cpu budget: learning rate of every stage (default: the method's per-task default)")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--general-student", default="runs/general-tinybert4")
    parser.add_argument("--general-ws-student", default="runs/general-tinybert4-ws")
    parser.add_argument("--distilbert-student", default="runs/distilbert-init")
    parser.add_argument("--distilbert-general", default="runs/general-distilbert")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each finished run's checkpoints/ (resume state; deleted by default)")
    parser.add_argument("--aug-file", help="augmented training file (default: the file of benchmarks/augment_glue.py "
                                           "--rows AUG_ROWS, runs/aug-<task>[-all]/train_aug.tsv)")
    parser.add_argument("--aug-rows", choices=["cpu", "all"], default="cpu",
                        help="which augmented file the *-aug variants read by default: cpu = built from the first "
                             "rows (the rows recorded on 2026-11-22), all = from the whole training set")
    args = parser.parse_args()
    teacher = Path(args.runs_dir) / f"teacher-{args.task}"
    if not (teacher / "metrics.json").exists():
        sys.exit(f"no fine-tuned teacher at {teacher}: run benchmarks/teacher_glue.py --tasks {args.task} first")
    paths = {"general_student": args.general_student, "general_ws_student": args.general_ws_student,
             "distilbert_student": args.distilbert_student,
             "distilbert_general": args.distilbert_general,
             "aug_file": args.aug_file or str(aug_file(args.runs_dir, args.task, args.aug_rows))}
    done = load_results("distill")
    for variant in args.variants:
        for seed in args.seeds:
            key = f"{args.task}/{variant}/{args.budget}/seed{seed}"
            if key in done:
                print(f"{key}: done already ({done[key]['metrics']['score']:.2f})")
                continue
            options = {k: v.format(**paths) if isinstance(v, str) else v for k, v in VARIANTS[variant].items()}
            train_file = options.pop("train_file", None)
            aug_step_factor = options.pop("aug_step_factor", 1)
            options.update(teacher=str(teacher), seed=seed, no_progress=True)
            if args.budget == "cpu":
                options.update(max_train_examples=args.max_train_examples, epochs=args.epochs)
                if args.learning_rate is not None:
                    options["learning_rate"] = args.learning_rate
                if options["method"] == "tinybert" and not options.get("skip_intermediate"):
                    options["intermediate_epochs"] = args.epochs
            else:  # the paper's budget: the method's own per-task defaults, learning rate included
                options.pop("learning_rate", None)
            if train_file and args.budget == "cpu":
                # spend the steps of the run on the original rows (times the variant's aug_step_factor)
                steps = equal_steps(args.epochs, min(args.max_train_examples, original_rows(args)), aug_step_factor)
                options.update(max_train_examples=None, max_steps=steps, intermediate_max_steps=steps)
                options.pop("intermediate_epochs", None)
                options.pop("epochs", None)
            suffix = "" if args.budget == "cpu" else f"-{args.budget}"
            out = Path(args.runs_dir) / f"distill-{args.task}-{variant}{suffix}-s{seed}"
            task = TaskOptions(args.task, data_dir=args.data_dir, train_file=train_file)
            report = distill_task(task, options, str(out), resume=(out / "run_config.json").exists())
            result = {"task": args.task, "variant": variant, "seed": seed, "budget": args.budget,
                      "metrics": report["dev_metrics"], "wall_seconds": report["wall_seconds"],
                      "output_dir": str(out), "options": {k: v for k, v in options.items() if k != "no_progress"},
                      "command": f"python benchmarks/distill_glue.py --task {args.task} --budget {args.budget} "
                                 f"--variants {variant} --seeds {seed}", **machine_info()}
            save_result("distill", key, result)
            if not args.keep_checkpoints:  # resume state of a finished run: ~400 MB each, 50 GB a table
                shutil.rmtree(out / "checkpoints", ignore_errors=True)
            print(f"{key}: {report['dev_metrics']} in {report['wall_seconds']:.0f}s")


if __name__ == "__main__":
    main()
