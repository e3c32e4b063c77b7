"""Run `kdbert compress` on a GLUE task with the packaged teacher fine-tuned on it, and record its report.

    OMP_NUM_THREADS=1 python benchmarks/bench_compress.py --task sst2 --target-speedup 4 \
        --candidates bert-1x128,bert-1x256,... --threads 1 --budget-minutes 25

A rerun with the same output folder continues the search (timings and finished runs are reused).
Results: ``benchmarks/results/compress.json`` under ``<task>/x<target>``.
"""

from __future__ import annotations

import argparse
import time

from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.compress.pipeline import CompressConfig, compress
from kdbert.data.load import TaskOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--teacher", default=run_folder("teacher-{task}"))
    parser.add_argument("--target-speedup", type=float, default=4.0)
    parser.add_argument("--candidates", help="comma-separated candidate names (default: every family's)")
    parser.add_argument("--threads", type=int, default=1, help="threads of the timed runtime")
    parser.add_argument("--budget-minutes", type=float, default=25.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--first-steps", type=int, default=300)
    parser.add_argument("--output-dir", default=run_folder("compress-{task}"))
    args = parser.parse_args()
    teacher, out = args.teacher.format(task=args.task), args.output_dir.format(task=args.task)
    config = CompressConfig(teacher=teacher, target_speedup=args.target_speedup, candidates=args.candidates,
                            threads=args.threads, budget_minutes=args.budget_minutes, rounds=args.rounds,
                            first_steps=args.first_steps)
    started = time.time()
    report = compress(TaskOptions(args.task, data_dir=args.data_dir), config, out)
    command = (f"OMP_NUM_THREADS=1 python benchmarks/bench_compress.py --task {args.task} --target-speedup "
               f"{args.target_speedup:g} --threads {args.threads} --budget-minutes {args.budget_minutes:g} "
               f"--rounds {args.rounds} --first-steps {args.first_steps}"
               + (f" --candidates {args.candidates}" if args.candidates else ""))
    save_result("compress", f"{args.task}/x{args.target_speedup:g}",
                {**machine_info(), "command": command, "seconds_this_call": round(time.time() - started, 1),
                 **{key: report[key] for key in ("task", "runtime", "target", "held_out_rows", "speed", "search",
                                                 "winner", "teacher_scores", "shipped")}})
    print(open(f"{out}/compress_report.md").read())


if __name__ == "__main__":
    main()
