"""Time the main job (`kdbert quickstart`) and record its teacher-vs-student table.

    python benchmarks/bench_quickstart.py            # runs it into runs/quickstart (skips finished steps)
    python benchmarks/bench_quickstart.py --key sst2-amx   # the same, recorded apart (another CPU kind)

``--record-only`` records a finished run; its wall time is then the span between the first and
the last file the run wrote. Results: ``benchmarks/results/quickstart.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import common
from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

if common.FLOAT32_PINNED:  # the main job is recorded as users get it: kdbert's default precision
    os.environ.pop("KDBERT_MIXED_PRECISION")

from kdbert.cli import main as kdbert_main  # noqa: E402 (after the precision is settled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--output-dir", default=run_folder("quickstart"))
    parser.add_argument("--record-only", action="store_true")
    parser.add_argument("--key", help="the result's key (default: the task); e.g. sst2-amx for another CPU kind")
    args = parser.parse_args()
    out = Path(args.output_dir)
    command = ["quickstart", "--task", args.task, "--data-dir", args.data_dir, "--output-dir", str(out), "--no-progress"]
    if args.record_only:
        files = [p.stat().st_mtime for p in out.rglob("*") if p.is_file()]
        seconds = max(files) - min(files)
    else:
        started = time.time()
        if kdbert_main(command) != 0:
            sys.exit("quickstart failed")
        seconds = time.time() - started
    summary = json.loads((out / "summary.json").read_text())
    report = json.loads((out / "compress" / "compress_report.json").read_text())
    shipped = report["shipped"]
    kept = {key: shipped.get(key) for key in ("kept_dev", "kept_decide", "decide_score", "decide_se", "margin", "keeps",
                                              "checks", "kept_dev_se", "kept_decide_se", "gap_se") if key in shipped}
    save_result("quickstart", args.key or args.task, {**summary, "wall_seconds": round(seconds), "command": "kdbert " + " ".join(command),
                                          "compress": {**kept, "winner": report["winner"]["candidate"],
                                                       "held_out_rows": report["held_out_rows"],
                                                       "decide_rows": report.get("decide_rows"),
                                                       "teacher_scores": report["teacher_scores"]},
                                          **machine_info()})
    print(f"quickstart {args.task}: {seconds / 60:.1f} min, student keeps {summary['retained_percent']:.1f}%")


if __name__ == "__main__":
    main()
