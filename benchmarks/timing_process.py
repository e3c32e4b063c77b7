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
milliseconds) on both sides and the means. With ``--at-admission`` the candidates timed near the line
before the search (the timing in turns that admits them) are timed the same way, ``--pairs`` times on
each side, before the admitting timing itself runs in this process: whether the admission reads the
speedups the fresh process reads at the ship check. The search's own results (kept shares) are not
recorded (the winner's are, with every candidate's admitted speedup and the ship risks): the extra
timings take the timing's and the finishing's time. Results:
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
    parser.add_argument("--at-admission", action="store_true",
                        help="also time the candidates near the line on both sides where they are admitted")
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
    admitted = []
    if args.at_admission:
        processes = []
        started = TimingProcess.__init__
        admit = speed.retimed_in_turns
        in_turns = speed.time_in_turns_with_teacher

        def keep_process(self):
            started(self)
            processes.append(self)

        def both_at_admission(teacher_file, files, task, settings, rows, clock):
            here, fresh = [], []
            for _ in range(args.pairs):
                here.append(in_turns(teacher_file, files, task, settings))
                fresh.append(processes[-1].call(in_turns, teacher_file, files, task, settings))
            for name in files:
                sides = {side: [{"speedup": t["speedup"][name], "teacher_ms": t["latency_real_p50_ms"]["teacher"],
                                 "student_ms": t["latency_real_p50_ms"][name]} for t in timings]
                         for side, timings in (("searching_process", here), ("fresh_process", fresh))}
                admitted.append({"graph": name, **sides, "mean": {side: means(v) for side, v in sides.items()}})
            return admit(teacher_file, files, task, settings, rows, clock)

        TimingProcess.__init__ = keep_process
        speed.retimed_in_turns = both_at_admission
    if kdbert_main(["quickstart", "--task", args.task, "--data-dir", args.data_dir, "--output-dir", str(folder),
                    "--seed", str(args.seed), "--no-progress"]) != 0:
        sys.exit("quickstart failed")
    summary = json.loads((folder / "summary.json").read_text())
    report = json.loads((folder / "compress" / "compress_report.json").read_text())
    shipped = {"winner": summary["winner"], "kept_dev": summary["int8_retained_percent"],
               "kept_decide": summary["int8_kept_decide_percent"],
               "admitted": {name: row["speedup"] for name, row in report["speed"]["candidates"].items()},
               "ship_risk": report.get("ship_risk", {})}
    command = (f"python benchmarks/timing_process.py --key {args.key} --seed {args.seed} --pairs {args.pairs} "
               f"--teacher {args.teacher}" + (" --at-admission" if args.at_admission else ""))
    save_result("timing_process", args.key, {**machine_info(), "task": args.task, "teacher": args.teacher,
                                             "seed": args.seed, "graphs": graphs, "shipped": shipped,
                                             **({"admission": admitted} if args.at_admission else {}),
                                             "command": command})
    print(json.dumps({"admission": admitted, "ship_check": graphs}, indent=1))
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
