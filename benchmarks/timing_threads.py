"""The teacher and candidate shapes timed at each ONNX Runtime thread count, in turns, at batch 1.

    python benchmarks/timing_threads.py --teacher runs/quickstart/compress/teacher-onnx --passes 3

``kdbert compress`` times every graph at ``--timing-threads`` (default ``--threads``, else every
core). At batch 1 on a few dozen tokens a second thread may not pay for itself: this builds
``--candidates`` (random weights, exported as ``compress`` times them: ONNX int8; the packaged
pre-trained students among them by name, ``pretrained-minilm-l4``) against the teacher's export
and, ``--passes`` times, times all of them in turns with the teacher
(:func:`kdbert.compress.speed.time_in_turns_with_teacher`) at each of ``--threads`` (the order
alternating between passes), on ``--rows`` dev rows of ``--task`` (SST-2). Records each model's
latency and each candidate's speedup per thread count (medians over the passes), and the speedup of
each at its own fastest count over the teacher at its own: ``benchmarks/results/timing_threads.json``
under ``--key``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from common import machine_info, random_weight_exports, save_result
from paths import GLUE_DIR

from kdbert.compress.speed import SpeedSettings, time_in_turns_with_teacher
from kdbert.data.load import TaskOptions
from kdbert.deploy.onnx_runtime import INT8_FILE

SHAPES = ["bert-1x384", "bert-2x256-ffn512", "bert-2x256", "bert-2x384-ffn192", "bert-3x256-ffn512",
          "bert-2x384-ffn768", "bert-2x384"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, help="the teacher's export folder (a search's teacher-onnx)")
    parser.add_argument("--teacher-folder", default="runs/quickstart/teacher", help="the teacher's model folder")
    parser.add_argument("--candidates", nargs="+", default=SHAPES)
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}))
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--task", default="sst2", help="the GLUE task whose dev rows are timed")
    parser.add_argument("--key", default="sst2-main-job")
    args = parser.parse_args()
    task = TaskOptions(args.task, data_dir=args.data_dir)
    teacher_file = Path(args.teacher) / INT8_FILE
    passes = []
    with tempfile.TemporaryDirectory() as tmp:
        files = random_weight_exports(args.teacher_folder, task, args.candidates, tmp)
        for index in range(args.passes):
            order = args.threads if index % 2 == 0 else args.threads[::-1]
            timed = {threads: time_in_turns_with_teacher(teacher_file, files, task,
                                                         SpeedSettings("onnx-int8", args.rows, threads))
                     for threads in order}
            passes.append({str(threads): {"latency_real_p50_ms": row["latency_real_p50_ms"], "speedup": row["speedup"]}
                           for threads, row in sorted(timed.items())})
            print(passes[-1], flush=True)
    models = ["teacher", *files]
    latency = {str(t): {m: statistics.median(p[str(t)]["latency_real_p50_ms"][m] for p in passes) for m in models}
               for t in args.threads}
    speedup = {str(t): {m: statistics.median(p[str(t)]["speedup"][m] for p in passes) for m in files}
               for t in args.threads}
    fastest = {m: min(args.threads, key=lambda t: latency[str(t)][m]) for m in models}
    own_fastest = {m: latency[str(fastest["teacher"])]["teacher"] / latency[str(fastest[m])][m] for m in files}
    command = (f"python benchmarks/timing_threads.py --teacher {args.teacher} --teacher-folder {args.teacher_folder} "
               + ("" if args.candidates == SHAPES else f"--candidates {' '.join(args.candidates)} ")
               + ("" if args.task == "sst2" else f"--task {args.task} ")
               + f"--passes {args.passes} --key {args.key}")
    save_result("timing_threads", args.key, {
        **machine_info(), "teacher": args.teacher, "task": args.task, "rows": args.rows, "threads": args.threads,
        "passes": passes, "latency_real_p50_ms": latency, "speedup": speedup, "fastest_threads": fastest,
        "speedup_each_at_its_fastest": own_fastest, "command": command})
    for m in models:
        cells = ", ".join(f"{t} thread(s) {latency[str(t)][m]:.3f} ms"
                          + (f" ({speedup[str(t)][m]:.2f}x)" if m in speedup[str(t)] else "") for t in args.threads)
        print(f"{m}: {cells}" + (f"; each at its fastest {own_fastest[m]:.2f}x" if m in own_fastest else ""))


if __name__ == "__main__":
    main()
