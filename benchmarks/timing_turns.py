"""How steady a student's speedup over its teacher reads, by the rows a model is timed on in one turn.

    python benchmarks/timing_turns.py --teacher T/model.int8.onnx --student S/model.int8.onnx --passes 8

Both exports are timed on SST-2's dev rows at batch 1 (``--rows``, the search's 200) by
:func:`kdbert.deploy.task_rows.time_in_turns`, the models taking turns of ``--turn-rows`` rows each
(``--rows`` itself: each model over every row, then the other, as ``kdbert compress`` timed before
2026-12-01; 10: its turns since; 1: row by row), one pass of each turn size in turn, ``--passes``
times. Each pass gives each model's median over rows and one speedup (the teacher's over the
student's); their spread over passes is what a search reads from one timing of three passes.
Results: ``benchmarks/results/timing_turns.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.compress.speed import SpeedSettings, timed_model
from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.task_rows import time_in_turns


def spread(speedups: list[float]) -> dict:
    """The passes' speedups and their spread."""
    return {"speedups": [round(s, 3) for s in speedups], "median": statistics.median(speedups),
            "min": min(speedups), "max": max(speedups), "stdev": statistics.stdev(speedups)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, help="the teacher's int8 export (model.int8.onnx)")
    parser.add_argument("--student", required=True, help="the student's int8 export")
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--turn-rows", type=int, nargs="+", default=[200, 10, 1])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--key", default="sst2")
    args = parser.parse_args()
    settings = SpeedSettings("onnx-int8", args.rows, args.threads)
    data = load_task(TaskOptions("sst2", data_dir=args.data_dir))
    timed = {"teacher": timed_model(Path(args.teacher), data, settings),
             "student": timed_model(Path(args.student), data, settings)}
    passes: dict[int, list[dict]] = {rows: [] for rows in args.turn_rows}
    for _ in range(args.passes):
        for rows in args.turn_rows:
            passes[rows].append(time_in_turns(timed, rounds=1, rows_per_turn=rows)["rounds"][0])
    result = {**machine_info(), "teacher": args.teacher, "student": args.student, "rows": args.rows,
              "threads": args.threads, "passes": args.passes,
              "command": f"python benchmarks/timing_turns.py --teacher {args.teacher} --student {args.student} "
                         f"--passes {args.passes}",
              "turns": {str(rows): {"teacher_ms": statistics.median(p["teacher"] for p in runs),
                                    "student_ms": statistics.median(p["student"] for p in runs),
                                    **spread([p["teacher"] / p["student"] for p in runs])}
                        for rows, runs in passes.items()}}
    for rows, row in result["turns"].items():
        print(f"turns of {rows:>3} rows: teacher {row['teacher_ms']:.2f} ms, student {row['student_ms']:.2f} ms, "
              f"speedup median {row['median']:.2f}x, {row['min']:.2f}-{row['max']:.2f}x, stdev {row['stdev']:.2f}")
    save_result("timing_turns", args.key, result)


if __name__ == "__main__":
    main()
