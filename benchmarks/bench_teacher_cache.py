"""What the teacher-output cache (``--teacher-cache``) saves, per method.

    python benchmarks/bench_teacher_cache.py --task rte --teacher runs/teacher-rte --rows 500 --epochs 2

For each method, three short task distillations on the first ``--rows`` training rows: without a
cache (seed 42), with a cold cache (seed 42: the first epoch runs the teacher and stores its
outputs, later epochs are served) and with the warm cache of that run (seed 43, as a second
seed would). Methods: ``kd`` (logits), ``pkd`` ([CLS] states of the patient layers + logits,
``--teacher-cache-features``) and ``tinybert`` (intermediate stage with hidden states and
attention scores cached in bf16, then the prediction stage on logits). The students are teacher
layers (``0,2,4`` for TinyBERT, the first half for KD/PKD), so the teacher's share of the work
is what it is in the recorded PKD/KD runs.

Recorded per run: seconds of each stage's training without its evaluations (the trainer's
stage loop, timed here: forward, backward, optimiser steps and end-of-epoch checkpoints),
the seconds spent tracing the student and the teacher (``MatchLoss.traces``: where the cache
acts), evaluation seconds, the cache's report (rows served, hit rate, teacher
batches run and skipped, bytes written and on disk), and the load average before and after,
since other jobs may share the machine. Results: ``benchmarks/results/teacher_cache.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.data.load import TaskOptions
from kdbert.methods.front import distill_task
from kdbert.core.matching import MatchLoss
from kdbert.core.trainer import Trainer

METHODS = {
    "kd": {"method": "kd"},
    "pkd": {"method": "pkd", "teacher_cache_features": True},
    "tinybert": {"method": "tinybert", "student_layers": "0,2,4", "teacher_cache_features": True},
}

SECONDS: dict[str, float] = {}


def timed(name: str, method):
    """``method`` adding its wall time to ``SECONDS[key]`` (key: ``name`` or the stage's name)."""

    def wrapper(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            key = name if name else f"stage:{args[1].config.name}"
            SECONDS[key] = SECONDS.get(key, 0.0) + time.perf_counter() - start

    return wrapper


Trainer._run_stage = timed("", Trainer._run_stage)
Trainer._evaluate = timed("evaluate", Trainer._evaluate)
MatchLoss.traces = timed("forward", MatchLoss.traces)  # student + teacher traces, setup's included


def run(args, method: str, cache: Path | None, seed: int, out: Path) -> dict:
    options = {"teacher": args.teacher, "max_train_examples": args.rows, "epochs": args.epochs,
               "intermediate_epochs": args.epochs, "batch_size": args.batch_size, "seed": seed,
               "no_progress": True, **METHODS[method]}
    if method == "tinybert":
        options["learning_rate"] = 1e-4  # the benchmarks' CPU rate for TinyBERT's prediction stage
    else:
        options.pop("intermediate_epochs")
    if cache is None:
        options.pop("teacher_cache_features", None)
    else:
        options["teacher_cache"] = str(cache)
    SECONDS.clear()
    load_before = os.getloadavg()
    started = time.perf_counter()
    report = distill_task(TaskOptions(args.task, data_dir=args.data_dir), options, str(out), overwrite=True)
    wall = time.perf_counter() - started
    evaluate = SECONDS.pop("evaluate", 0.0)
    forward = SECONDS.pop("forward", 0.0)
    stages = {k.removeprefix("stage:"): v for k, v in SECONDS.items()}
    # each stage's loop includes its evaluations (only the last stage evaluates here)
    last = list(stages)[-1]
    stages[last] -= evaluate
    return {"seed": seed, "wall_seconds": round(wall, 1), "evaluate_seconds": round(evaluate, 1),
            "stage_train_seconds": {k: round(v, 1) for k, v in stages.items()},
            "seconds_per_epoch": {k: round(v / args.epochs, 1) for k, v in stages.items()},
            "forward_seconds": round(forward, 1),
            "dev_score": (report.get("dev_metrics") or {}).get("score"),
            "teacher_cache": report.get("teacher_cache"),
            "load_average": {"before": [round(x, 2) for x in load_before],
                             "after": [round(x, 2) for x in os.getloadavg()]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="rte")
    parser.add_argument("--teacher", default=None, help="fine-tuned teacher (default runs/teacher-<task>)")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--work-dir", default=None, help="runs and caches (default: a temporary folder, removed)")
    args = parser.parse_args()
    args.teacher = args.teacher or run_folder(f"teacher-{args.task}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="teacher-cache-"))
    try:
        for method in args.methods:
            cache = work / f"cache-{method}"
            shutil.rmtree(cache, ignore_errors=True)
            runs = {"no_cache": run(args, method, None, 42, work / f"{method}-none"),
                    "cold_cache": run(args, method, cache, 42, work / f"{method}-cold"),
                    "warm_cache": run(args, method, cache, 43, work / f"{method}-warm")}
            result = {"task": args.task, "method": method, "teacher": args.teacher, "rows": args.rows,
                      "epochs": args.epochs, "batch_size": args.batch_size, "runs": runs,
                      "cache_disk_bytes": runs["warm_cache"]["teacher_cache"]["disk_bytes"],
                      "features": bool(METHODS[method].get("teacher_cache_features")), **machine_info()}
            save_result("teacher_cache", f"{args.task}-{method}", result)
            for name, r in runs.items():
                cached = r["teacher_cache"] or {}
                print(f"{method:8s} {name:10s} per epoch {r['seconds_per_epoch']} s, hit rate {cached.get('hit_rate')}, "
                      f"disk {cached.get('disk_bytes', 0) / 1e6:.1f} MB, load {r['load_average']['before'][0]}")
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
