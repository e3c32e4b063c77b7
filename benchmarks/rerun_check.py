"""Rerun recorded rows with the current code and compare them with what was recorded.

    python benchmarks/rerun_check.py                 # the main job + the RTE KD row (3 seeds)
    python benchmarks/rerun_check.py --skip-quickstart --seeds 42

A refactor of the training core must not move the published numbers. This reruns
``kdbert quickstart`` (as ``benchmarks/quickstart.py``) and the KD row of the KD/PKD table on RTE
(as ``benchmarks/distill_glue.py --task rte --budget cpu --variants kd``) into ``runs/rerun/``,
and records recorded vs rerun dev scores in ``benchmarks/results/rerun.json``. Needs the RTE
teacher of ``benchmarks/teacher_glue.py`` (``runs/teacher-rte``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import load_results, machine_info, save_result  # noqa: E402

from kdbert.cli import main as kdbert_main  # noqa: E402
from kdbert.data.load import TaskOptions  # noqa: E402
from kdbert.distill import distill_task  # noqa: E402


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def rerun_quickstart(data_dir: str, runs: Path) -> None:
    out = runs / "quickstart"
    started = time.time()
    if kdbert_main(["quickstart", "--task", "sst2", "--data-dir", data_dir, "--output-dir", str(out),
                    "--no-progress"]) != 0:
        sys.exit("quickstart failed")
    rows = json.loads((out / "summary.json").read_text())["rows"]
    recorded = load_results("quickstart")["sst2"]["rows"]
    result = {"recorded": {r["name"]: r["dev_score"] for r in recorded},
              "rerun": {r["name"]: r["dev_score"] for r in rows},
              "wall_seconds": round(time.time() - started), "commit": commit(), **machine_info()}
    save_result("rerun", "quickstart/sst2", result)
    print(f"quickstart: recorded {result['recorded']}, rerun {result['rerun']}")


def rerun_kd(data_dir: str, runs: Path, seeds: list[int]) -> None:
    recorded = load_results("distill")
    for seed in seeds:
        key = f"rte/kd/cpu/seed{seed}"
        options = {"method": "kd", "student_layers": "3", "teacher": "runs/teacher-rte", "seed": seed,
                   "no_progress": True, "max_train_examples": 4000, "epochs": 2.0}
        assert {k: v for k, v in options.items() if k != "no_progress"} == recorded[key]["options"], key
        out = runs / f"distill-rte-kd-s{seed}"
        report = distill_task(TaskOptions("rte", data_dir=data_dir), options, str(out),
                              resume=(out / "run_config.json").exists())
        result = {"recorded": recorded[key]["metrics"], "rerun": report["dev_metrics"],
                  "wall_seconds": report["wall_seconds"], "commit": commit(), **machine_info()}
        save_result("rerun", key, result)
        print(f"{key}: recorded {result['recorded']['score']:.4f}, rerun {result['rerun']['score']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data/glue_data")
    parser.add_argument("--runs-dir", default="runs/rerun")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--skip-quickstart", action="store_true")
    args = parser.parse_args()
    runs = Path(args.runs_dir)
    if not args.skip_quickstart:
        rerun_quickstart(args.data_dir, runs)
    rerun_kd(args.data_dir, runs, args.seeds)


if __name__ == "__main__":
    main()
