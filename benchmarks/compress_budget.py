"""Does `kdbert compress --budget-minutes M` end within M minutes plus 10%? Runs the command as a user
would, one budget after another into fresh folders, and records its wall time, exit code, its last
line (the error when it refused) and the report's seconds per phase.

    python benchmarks/compress_budget.py --teacher runs/quickstart/teacher --budgets 2,3,4

The teacher is the quickstart's (run the quickstart first); the search distils on its 16,000
training rows. Results: ``benchmarks/results/compress_budget.json`` under ``<task>/<M>min``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.deploy.int8_kernels import cpu_int8_facts

TOLERANCE = 1.10  # the budget's promise: M minutes plus 10%


def run_once(teacher: str, task: str, data_dir: str, minutes: float, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    command = ["kdbert", "compress", "--teacher", teacher, "--task", task, "--data-dir", data_dir,
               "--budget-minutes", f"{minutes:g}", "--target-speedup", "4", "--max-train-examples", "16000",
               "--output-dir", str(out), "--no-progress"]
    started = time.time()
    done = subprocess.run([str(Path(sys.executable).with_name("kdbert")), *command[1:]], capture_output=True, text=True)
    seconds = time.time() - started
    lines = (done.stdout + done.stderr).strip().splitlines()
    report_file = out / "compress_report.json"
    report = json.loads(report_file.read_text()) if report_file.is_file() else None
    return {"command": " ".join(command), "exit_code": done.returncode, "wall_seconds": round(seconds, 1),
            "within_budget": seconds <= TOLERANCE * 60 * minutes, "last_line": lines[-1] if lines else "",
            "left_files": out.exists() and done.returncode != 0,
            "phase_seconds": report["budget"]["phase_seconds"] if report else None,
            "winner": report["winner"]["candidate"] if report else None,
            "dev_score": report["shipped"]["dev_score"] if report else None,
            "candidates_trained": len(report["search"]["rounds"][0]) if report else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", default=run_folder("quickstart/teacher"))
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--budgets", default="2,3,4", help="minutes, comma-separated")
    args = parser.parse_args()
    for minutes in (float(m) for m in args.budgets.split(",")):
        row = run_once(args.teacher, args.task, args.data_dir, minutes, Path(run_folder(f"compress_budget/{minutes:g}")))
        save_result("compress_budget", f"{args.task}/{minutes:g}min", {**row, "budget_minutes": minutes,
                                                                      "cpu": cpu_int8_facts(), **machine_info()})
        print(f"{minutes:g} min: exit {row['exit_code']}, {row['wall_seconds']:.0f} s "
              f"({'within' if row['within_budget'] else 'PAST'} the budget + 10%): {row['last_line'][:160]}")


if __name__ == "__main__":
    main()
