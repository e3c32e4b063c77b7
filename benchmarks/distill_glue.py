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
  the other augmented variants get the steps of the runs on the original rows), and
  ``tinybert-ws-general-task-x2`` 2x the epochs of every stage on the original rows.
- PKD/KD issue (3 layers x 384, initialised from teacher layers 1-3): ``l3-finetune``, ``kd``,
  ``pkd-skip``, ``pkd-last``, ``tinybert-l3`` (TinyBERT task distillation into that student); and ``distilbert-d`` (a DistilBERT student initialised from teacher
  layers 0, 2, 4, distilled while fine-tuning), ``distilbert-general-d`` (from ``--distilbert-general``).
- MobileBERT issue (student ``mobilebert-matched``: 6 layers, inter-block 384, 12 heads, general-distilled
  by ``benchmarks/mobilebert_ablation.py``; ``--mobilebert-general``, default
  ``runs/mb-progressive-s42``): ``mobilebert-task`` (``--method mobilebert`` with logit KD from the
  fine-tuned teacher: loss = 0.5 * CE(z_s, y) + 0.5 * T^2 * KL(softmax(z_t / T) || softmax(z_s / T)),
  T = 2, the README's setting; STS-B: 0.5 * MSE to the gold score + 0.5 * MSE to the teacher's;
  everything else the method's defaults) and ``mobilebert-finetune`` (the same student on gold
  labels only, alpha 0: the no-distillation baseline). ``mobilebert-long-task`` and
  ``mobilebert-long-finetune`` are the same two from the longer CPU-budget general student of
  ``--mobilebert-long-general`` (default ``runs/mb-cpu/mb-progressive-s42``: 6 x 150 layer-wise steps + 300
  pre-training-distillation steps of 32 sequences, ``mobilebert_ablation.py --name cpu-long``).
  ``mobilebert-fitted-task`` and ``mobilebert-fitted-finetune`` are the same two from a student of that
  budget whose embedding layer starts fitted to the teacher's (``--mobilebert-fitted-general``, default
  ``runs/mb-fit/mb-progressive-s42``, ``mobilebert_ablation.py --name cpu-long-fitted``, float32); the
  ``long`` students started with a random 128-d word table.

At the cpu budget TinyBERT's prediction stage runs at 1e-4, the rate of the fine-tuning baseline, not the
paper's 3e-5 (tuned for BERT-base-sized general students; at 3e-5 a 4000-row, 2-epoch run stayed
at chance on SST-2).

Budgets: ``cpu`` = first ``--max-train-examples`` rows (default 4000), 2 epochs per stage,
optionally one ``--learning-rate`` for every stage. CoLA runs use all 8551 rows at 1e-4 (at its
fine-tuning default of 3e-5 on 4000 rows every 3-layer student predicted one class, MCC 0);
STS-B runs use all 5749 rows for 3 epochs (at 4000 rows x 2 epochs the regression had not
converged: dev Pearson 10 for one seed, 52 for another);
``paper`` = each method's per-task defaults on the whole training set (GPU-sized): for TinyBERT
the paper's settings (``recipes/tinybert/<task>.yaml``); for KD, PKD and DistilBERT kdbert's own
fine-tuning defaults (``kdbert.methods.finetune.TASK_DEFAULTS``), not those papers' budgets.
Results: ``benchmarks/results/distill.json``; each run resumes if interrupted.

A recorded key is skipped, so on a fresh clone the command printed beside a figure only lists
it. ``--rerun`` runs it again from its recorded options into ``runs/rerun/``, first building
what it needs at the recorded paths (the teacher, ``runs/general-tinybert4[-ws]``,
``runs/mlm-k2`` and the augmented file; not DistilBERT's students), and says whether the dev
score reproduces within the std of the recorded seeds of that figure (``--tolerance`` for a
one-seed figure); ``results/reruns.json`` keeps the comparison:

    python benchmarks/distill_glue.py --task rte --variants tinybert-ws-task --seeds 42 --rerun
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

import yaml

from common import compare_rerun, load_results, machine_info, save_result
from glue_inputs import aug_file, build_augmented, fine_tune, general_argv, recorded_settings
from paths import CORPUS, GLUE_DIR, run_folder

from kdbert.cli.augment import task_rows
from kdbert.data.load import TaskOptions
from kdbert.cli import main as kdbert_main
from kdbert.methods.front import distill_task
from kdbert.methods.mlm_head import fit_mlm_head
from kdbert.core.loading import default_model_path

VARIANTS = yaml.safe_load((Path(__file__).parent / "distill_variants.yaml").read_text())
"""Each variant's options (benchmarks/distill_variants.yaml)."""


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


GENERAL_RUNS = {"general-tinybert4": "tinybert", "general-tinybert4-ws": "tinybert-ws"}


def dependencies(record: dict, runs_dir: str = run_folder()) -> list[tuple[str, str]]:
    """What a recorded run needs, as ``(kind, path)``: ``teacher``, ``general`` (a general
    student of ``general_distill.py``), ``mlm`` (``runs/mlm-k2``) and ``aug`` (the augmented file),
    in build order. A student that is a preset name needs nothing; one this script cannot build
    (DistilBERT's, whose build command was not recorded; a MobileBERT general student, which
    ``benchmarks/mobilebert_ablation.py`` builds) is ``("unbuildable", path)``."""
    options = record["options"]
    needs = [("teacher", options["teacher"])]
    student = options.get("student")
    if student and ("/" in student or Path(student).exists()):
        needs.append(("general", student) if Path(student).name in GENERAL_RUNS else ("unbuildable", student))
    if "train_file" in VARIANTS[record["variant"].split("+")[0]]:
        needs += [("mlm", f"{runs_dir}/mlm-k2"),
                  ("aug", record.get("train_file") or str(aug_file(runs_dir, record["task"], "cpu")))]
    return needs


def build(kind: str, path: str, record: dict, args) -> None:
    """Build one dependency of ``record`` at ``path`` unless it is there (see :func:`dependencies`).

    The results files are left as recorded: a rebuilt teacher, general student, MLM head or
    augmented file is an input of the rerun, not a new figure."""
    target = Path(path)
    if kind == "teacher" and not (target / "metrics.json").exists():
        teacher = load_results("teacher_glue").get(f"{record['task']}/cpu")
        print(f"building the teacher {target} (teacher_glue.py, budget cpu, recorded settings)")
        fine_tune(record["task"], "cpu", recorded_settings(teacher) if teacher else None, args.data_dir, out=target)
    elif kind == "general" and not (target / "general_report.json").exists():
        print(f"building the general student {target} (general_distill.py)")
        argv = general_argv(GENERAL_RUNS[target.name], args.corpus, str(target.parent))
        if kdbert_main(argv + (["--resume"] if (target / "run_config.json").exists() else [])) != 0:
            sys.exit(f"general distillation into {target} failed")
    elif kind == "mlm" and not (target / "config.json").exists():
        print(f"building the MLM head {target} (bench_mlm_head.py --unfreeze 2)")
        fit_mlm_head({"encoder": default_model_path(), "corpus": args.corpus, "unfreeze_top_layers": 2, "steps": 300,
                      "learning_rate": 1e-3, "no_progress": True}, target)
    elif kind == "aug" and not target.exists():
        print(f"building the augmented file {target} (augment_glue.py --rows cpu)")
        build_augmented(record["task"], "cpu", args.data_dir, f"{args.runs_dir}/mlm-k2", args.runs_dir, record=False)
    elif kind == "unbuildable" and not target.exists():
        builder = "mobilebert_ablation.py" if target.name.startswith("mb-") else "general_distill.py"
        sys.exit(f"{target} is missing and this script cannot build it: build it as benchmarks/{builder} "
                 "describes, then rerun")


def rerun(key: str, done: dict, args) -> dict:
    """Run the recorded ``key`` again with its recorded options into ``<runs>/rerun/``, building
    what it needs first, and compare its dev score with the record (:func:`common.compare_rerun`)."""
    record = done[key]
    for kind, path in dependencies(record, args.runs_dir):
        build(kind, path, record, args)
    train_file = dict(dependencies(record, args.runs_dir)).get("aug")
    out = Path(args.runs_dir) / "rerun" / Path(record["output_dir"]).name
    task = TaskOptions(record["task"], data_dir=args.data_dir, train_file=train_file)
    # runs recorded before the mixed_precision option was recorded ran in float32
    report = distill_task(task, {"mixed_precision": "no", **record["options"], "no_progress": True}, str(out),
                          resume=(out / "run_config.json").exists())
    seeds = [r["metrics"]["score"] for r in done.values()
             if (r["task"], r["variant"], r["budget"]) == (record["task"], record["variant"], record["budget"])]
    verdict = compare_rerun(record["metrics"]["score"], seeds, report["dev_metrics"]["score"], args.tolerance)
    save_result("reruns", f"distill/{key}", {**verdict, "rerun_dir": str(out), **machine_info()})
    return verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--budget", choices=["cpu", "paper"], default="cpu")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument("--max-train-examples", type=int, default=4000)
    parser.add_argument("--epochs", type=float, default=2.0, help="cpu budget: epochs per stage")
    parser.add_argument("--learning-rate", type=float,
                        help="cpu budget: learning rate of every stage (default: the method's per-task default)")
    parser.add_argument("--runs-dir", default=run_folder())
    parser.add_argument("--general-student", default=run_folder("general-tinybert4"))
    parser.add_argument("--general-ws-student", default=run_folder("general-tinybert4-ws"))
    parser.add_argument("--distilbert-student", default=run_folder("distilbert-init"))
    parser.add_argument("--distilbert-general", default=run_folder("general-distilbert"))
    parser.add_argument("--mobilebert-general", default=run_folder("mb-progressive-s42"),
                        help="general-distilled mobilebert-matched student of the mobilebert-* variants "
                             "(benchmarks/mobilebert_ablation.py writes it)")
    parser.add_argument("--mobilebert-fitted-general", default=run_folder("mb-fit/mb-progressive-s42"),
                        help="the cpu-long general student whose embedding layer was fitted to the teacher's (the "
                             "mobilebert-fitted-* variants; mobilebert_ablation.py --name cpu-long-fitted writes it)")
    parser.add_argument("--mobilebert-long-general", default=run_folder("mb-cpu/mb-progressive-s42"),
                        help="the longer general-distilled mobilebert-matched student of the mobilebert-long-* "
                             "variants (benchmarks/mobilebert_ablation.py --name cpu-long writes it)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each finished run's checkpoints/ (resume state; deleted by default)")
    parser.add_argument("--aug-file", help="augmented training file (default: the file of benchmarks/augment_glue.py "
                                           "--rows AUG_ROWS, runs/aug-<task>[-all]/train_aug.tsv)")
    parser.add_argument("--aug-rows", choices=["cpu", "all"], default="cpu",
                        help="which augmented file the *-aug variants read by default: cpu = built from the first "
                             "rows (the rows recorded on 2026-11-22), all = from the whole training set")
    parser.add_argument("--rerun", action="store_true",
                        help="run recorded keys again with their recorded options (into RUNS_DIR/rerun/), building "
                             "the teacher, general student, MLM head and augmented file they need, and say whether "
                             "the dev score reproduces within the recorded seeds' std (or --tolerance)")
    parser.add_argument("--tolerance", type=float, default=1.0,
                        help="--rerun of a figure with one recorded seed: largest difference counted as reproduced")
    parser.add_argument("--corpus", default=CORPUS, help="--rerun: corpus for a general student or MLM head to build")
    parser.add_argument("--mixed-precision", choices=["no", "bf16"], default="no",
                        help="autocast precision of the runs; bf16 runs are recorded under VARIANT+bf16")
    args = parser.parse_args()
    done = load_results("distill")
    if args.rerun:
        for variant in args.variants:
            for seed in args.seeds:
                key = f"{args.task}/{variant}/{args.budget}/seed{seed}"
                if key in done:
                    print(f"{key}: {rerun(key, done, args)['summary']}")
                elif len(args.variants) == 1:
                    print(f"{key}: nothing recorded to rerun")
        return
    teacher = Path(args.runs_dir) / f"teacher-{args.task}"
    paths = {"general_student": args.general_student, "general_ws_student": args.general_ws_student,
             "distilbert_student": args.distilbert_student,
             "distilbert_general": args.distilbert_general, "mobilebert_general": args.mobilebert_general,
             "mobilebert_long_general": args.mobilebert_long_general,
             "mobilebert_fitted_general": args.mobilebert_fitted_general,
             "aug_file": args.aug_file or str(aug_file(args.runs_dir, args.task, args.aug_rows))}
    precision_suffix = "" if args.mixed_precision == "no" else f"+{args.mixed_precision}"
    for variant in args.variants:
        for seed in args.seeds:
            key = f"{args.task}/{variant}{precision_suffix}/{args.budget}/seed{seed}"
            if key in done:
                print(f"{key}: recorded ({done[key]['metrics']['score']:.2f}); --rerun runs it again and compares")
                continue
            if not (teacher / "metrics.json").exists():
                sys.exit(f"no fine-tuned teacher at {teacher}: run benchmarks/teacher_glue.py --tasks {args.task} "
                         "first (or --rerun a recorded key, which builds it)")
            options = {k: v.format(**paths) if isinstance(v, str) else v for k, v in VARIANTS[variant].items()}
            train_file = options.pop("train_file", None)
            aug_step_factor = options.pop("aug_step_factor", 1)
            epoch_factor = options.pop("epoch_factor", 1)
            options.update(teacher=str(teacher), seed=seed, no_progress=True, mixed_precision=args.mixed_precision)
            if args.budget == "cpu":
                options.update(max_train_examples=args.max_train_examples, epochs=args.epochs * epoch_factor)
                if args.learning_rate is not None:
                    options["learning_rate"] = args.learning_rate
                if options["method"] == "tinybert" and not options.get("skip_intermediate"):
                    options["intermediate_epochs"] = args.epochs * epoch_factor
            else:  # the methods' per-task defaults (TinyBERT: the paper's; others: kdbert finetune's)
                options.pop("learning_rate", None)
            if train_file and args.budget == "cpu":
                # spend the steps of the run on the original rows (times the variant's aug_step_factor)
                steps = equal_steps(args.epochs, min(args.max_train_examples, original_rows(args)), aug_step_factor)
                options.update(max_train_examples=None, max_steps=steps, intermediate_max_steps=steps)
                options.pop("intermediate_epochs", None)
                options.pop("epochs", None)
            suffix = ("" if args.budget == "cpu" else f"-{args.budget}") + precision_suffix.replace("+", "-")
            out = Path(args.runs_dir) / f"distill-{args.task}-{variant}{suffix}-s{seed}"
            task = TaskOptions(args.task, data_dir=args.data_dir, train_file=train_file)
            report = distill_task(task, options, str(out), resume=(out / "run_config.json").exists())
            budget_args = "".join(f" --{name} {value:g}" for name, value, default in (
                ("max-train-examples", args.max_train_examples, 4000), ("epochs", args.epochs, 2.0),
                ("learning-rate", args.learning_rate, None)) if value is not None and value != default)
            result = {"task": args.task, "variant": variant + precision_suffix, "seed": seed, "budget": args.budget,
                      "metrics": report["dev_metrics"], "wall_seconds": report["wall_seconds"],
                      "output_dir": str(out), "options": {k: v for k, v in options.items() if k != "no_progress"},
                      "train_file": train_file,
                      "command": f"python benchmarks/distill_glue.py --task {args.task} --budget {args.budget} "
                                 f"--variants {variant} --seeds {seed}{budget_args}"
                                 + (f" --aug-rows {args.aug_rows}" if train_file and args.aug_rows != "cpu" else "")
                                 + (f" --mixed-precision {args.mixed_precision}" if precision_suffix else ""),
                      **machine_info()}
            save_result("distill", key, result)
            if not args.keep_checkpoints:  # resume state of a finished run: ~400 MB each, 50 GB a table
                shutil.rmtree(out / "checkpoints", ignore_errors=True)
            print(f"{key}: {report['dev_metrics']} in {report['wall_seconds']:.0f}s")


if __name__ == "__main__":
    main()
