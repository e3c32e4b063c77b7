"""The ship check's timing in turns in the process that searched, against the fresh process compress times in.

    python benchmarks/timing_process.py --key sst2-amx-seed45 --seed 45 --teacher runs/qs-amx-1205/teacher

Why: over six main-job searches the 2-layer winner's graph timed 0.80-0.94 of its admitted speedup
as shipped, and timed again alone in a fresh process it read 4.60x where its ship check had read
4.29x (``timing_trained.py``). This runs the main job (``kdbert quickstart --seed S`` with a copy of
the recorded teacher, into ``<runs>/timing-process/<key>``) and, at each graph the finishing times
as shipped, times it ``--pairs`` times in turns with the int8 teacher in this process, the one that
searched, each followed by a timing in compress's own fresh process
(:class:`kdbert.compress.timing_process.TimingProcess`); the check then decides on the last fresh
timing, as it would on its own. Records each graph's timings (speedup, teacher and student
milliseconds) on both sides and the means. The search's own results (kept shares) are not
recorded: the extra timings take the finishing's time. Results:
``benchmarks/results/timing_process.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import common
from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

if common.FLOAT32_PINNED:  # as users get it: kdbert's default precision
    os.environ.pop("KDBERT_MIXED_PRECISION")

from kdbert.cli import main as kdbert_main  # noqa: E402 (after the precision is settled)
from kdbert.compress import speed  # noqa: E402
from kdbert.compress.timing_process import TimingProcess  # noqa: E402


def timing_row(timed: dict) -> dict:
    return {"speedup": timed["speedup"]["student"], **{f"{name}_ms": timed["latency_real_p50_ms"][name]
                                                       for name in ("teacher", "student")}}


def means(rows: list[dict]) -> dict:
    return {field: statistics.mean(row[field] for row in rows) for field in ("speedup", "teacher_ms", "student_ms")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", required=True)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--pairs", type=int, default=3, help="timings on each side per graph")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--teacher", default=run_folder("quickstart/teacher"), help="a finished quickstart teacher")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    folder = Path(run_folder("timing-process")) / args.key
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(args.teacher, folder / "teacher")
    graphs = []
    fresh_timing = TimingProcess.time_against_teacher

    def both(process, teacher_file, student_file, task, settings):
        here, fresh = [], []
        for _ in range(args.pairs):
            here.append(timing_row(speed.time_against_teacher(teacher_file, student_file, task, settings)))
            timed = fresh_timing(process, teacher_file, student_file, task, settings)
            fresh.append(timing_row(timed))
        graphs.append({"graph": str(Path(student_file).relative_to(folder)), "searched_process": here,
                       "fresh_process": fresh, "mean": {"searched_process": means(here), "fresh_process": means(fresh)}})
        return timed

    TimingProcess.time_against_teacher = both
    if kdbert_main(["quickstart", "--task", args.task, "--data-dir", args.data_dir, "--output-dir", str(folder),
                    "--seed", str(args.seed), "--no-progress"]) != 0:
        sys.exit("quickstart failed")
    summary = json.loads((folder / "summary.json").read_text())
    shipped = {"winner": summary["winner"], "kept_dev": summary["int8_retained_percent"],
               "kept_decide": summary["int8_kept_decide_percent"]}
    command = (f"python benchmarks/timing_process.py --key {args.key} --seed {args.seed} --pairs {args.pairs} "
               f"--teacher {args.teacher}")
    save_result("timing_process", args.key, {**machine_info(), "task": args.task, "teacher": args.teacher,
                                             "seed": args.seed, "graphs": graphs, "shipped": shipped,
                                             "command": command})
    print(json.dumps(graphs, indent=1))
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
