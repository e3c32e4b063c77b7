"""Candidates near the speed line timed in turns with the teacher one at a time, or all together.

    python benchmarks/timing_together.py --teacher runs/quickstart/compress/teacher-onnx --passes 3

``kdbert compress`` times a candidate whose speedup alone lands near ``--target-speedup`` again in
turns with the teacher (:func:`kdbert.compress.speed.time_in_turns_with_teacher`). One at a time, each
such timing runs the teacher's turns again (on the main job, 4.3 ms a row against 0.6-1.5 for its
candidates); together, the teacher's turns are paid once. This builds ``--candidates`` (random
weights, exported as ``compress`` times them: ONNX int8) against the teacher's export and, ``--passes``
times, times them one at a time and then together, on SST-2's dev rows (``--rows``), recording each
way's speedups and seconds. Results: ``benchmarks/results/timing_together.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import machine_info, random_weight_exports, save_result
from paths import GLUE_DIR

from kdbert.compress.speed import SpeedSettings, time_against_teacher, time_in_turns_with_teacher
from kdbert.data.load import TaskOptions
from kdbert.deploy.onnx_runtime import INT8_FILE

MAIN_JOB = ["bert-1x384-ffn384", "bert-1x384-ffn768", "bert-2x384-ffn192", "bert-3x384-ffn192"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, help="the teacher's folder (a run's) and its export (teacher-onnx)")
    parser.add_argument("--teacher-folder", default="runs/quickstart/teacher", help="the teacher's model folder")
    parser.add_argument("--candidates", nargs="+", default=MAIN_JOB)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--key", default="sst2-main-job")
    args = parser.parse_args()
    settings = SpeedSettings("onnx-int8", args.rows, args.threads)
    task = TaskOptions("sst2", data_dir=args.data_dir)
    teacher_file = Path(args.teacher) / INT8_FILE
    with tempfile.TemporaryDirectory() as tmp:
        files = random_weight_exports(args.teacher_folder, task, args.candidates, tmp)
        passes = []
        for _ in range(args.passes):
            started = time.time()
            apart = {name: time_against_teacher(teacher_file, file, task, settings)["speedup"]["student"]
                     for name, file in files.items()}
            apart_seconds = time.time() - started
            started = time.time()
            together = time_in_turns_with_teacher(teacher_file, files, task, settings)["speedup"]
            passes.append({"apart": apart, "apart_seconds": apart_seconds, "together_seconds": time.time() - started,
                           "together": {name: together[name] for name in files}})
            print(passes[-1], flush=True)
    result = {**machine_info(), "teacher": args.teacher, "rows": args.rows, "threads": args.threads,
              "passes": passes,
              "command": f"python benchmarks/timing_together.py --teacher {args.teacher} --passes {args.passes}",
              "seconds": {way: statistics.median(p[f"{way}_seconds"] for p in passes) for way in ("apart", "together")},
              "speedups": {name: {way: statistics.median(p[way][name] for p in passes) for way in ("apart", "together")}
                           for name in files}}
    for name, row in result["speedups"].items():
        print(f"{name}: one at a time {row['apart']:.2f}x, together {row['together']:.2f}x")
    print(f"seconds: one at a time {result['seconds']['apart']:.1f}, together {result['seconds']['together']:.1f}")
    save_result("timing_together", args.key, result)


if __name__ == "__main__":
    main()
