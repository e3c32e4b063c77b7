"""Rerun recorded rows with the current code and compare them with what was recorded.

    python benchmarks/rerun_check.py                 # the main job + the RTE KD row (3 seeds)
    python benchmarks/rerun_check.py --skip-quickstart --seeds 42
    python benchmarks/rerun_check.py --compare-logs NAME RUN_A RUN_B   # training logs step by step

A refactor of the training core must not move the published numbers. This reruns
``kdbert quickstart`` (as ``benchmarks/bench_quickstart.py``) and the KD row of the KD/PKD table on RTE
(as ``benchmarks/distill_glue.py --task rte --budget cpu --variants kd``) into ``runs/rerun/``,
and records recorded vs rerun dev scores in ``benchmarks/results/rerun.json``. Needs the RTE
teacher of ``benchmarks/teacher_glue.py`` (``runs/teacher-rte``). ``--compare-logs`` compares the
loss records of two runs' ``log.jsonl`` at the steps both logged (e.g. a run of this code against
one of the code before a change, stopped early), recording the largest difference;
``--record-quickstart-teacher`` records the teacher of an interrupted main-job rerun.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import load_results, machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.cli import main as kdbert_main
from kdbert.data.load import TaskOptions
from kdbert.methods.front import distill_task


CODE_COMMIT: list[str] = []  # --code-commit: the commit of the code that produced the runs, when not HEAD


def commit() -> str:
    if CODE_COMMIT:
        return CODE_COMMIT[0]
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def rerun_quickstart(data_dir: str, runs: Path) -> None:
    out = runs / "quickstart"
    started = time.time()
    if kdbert_main(["quickstart", "--task", "sst2", "--data-dir", data_dir, "--output-dir", str(out),
                    "--no-progress"]) != 0:
        sys.exit("quickstart failed")
    rows = json.loads((out / "summary.json").read_text())["rows"]
    recorded = load_results("quickstart")["sst2-float32"]["rows"]  # recorded before bf16 became the default
    result = {"recorded": {r["name"]: r["dev_score"] for r in recorded},
              "rerun": {r["name"]: r["dev_score"] for r in rows},
              "wall_seconds": round(time.time() - started), "commit": commit(), **machine_info()}
    save_result("rerun", "quickstart/sst2", result)
    print(f"quickstart: recorded {result['recorded']}, rerun {result['rerun']}")


def record_quickstart_teacher(runs: Path) -> None:
    """Record the rerun's fine-tuned teacher (the first step of the main job) once it has finished."""
    metrics = json.loads((runs / "quickstart" / "teacher" / "metrics.json").read_text())
    recorded = load_results("quickstart")["sst2-float32"]["rows"][0]
    result = {"recorded": {"teacher": recorded["dev_score"]}, "rerun": {"teacher": metrics["score"]},
              "commit": commit(), **machine_info()}
    save_result("rerun", "quickstart/sst2/teacher dev", result)
    print(f"quickstart teacher: recorded {recorded['dev_score']:.4f}, rerun {metrics['score']:.4f}")


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


def compare_logs(name: str, first: Path, second: Path, note: str | None = None) -> None:
    def losses(run: Path) -> dict:
        records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        return {(r["stage"], r["step"]): r for r in records if "loss" in r}

    a, b = losses(first), losses(second)
    common = sorted(set(a) & set(b), key=lambda k: (k[0] != "intermediate", k[1]))
    if not common:
        sys.exit(f"{first} and {second} logged no common step")
    skip = ("time", "stage", "step", "epoch")
    terms = sorted({k for key in common for k in a[key] if k not in skip})
    worst = max(abs(a[key][t] - b[key][t]) for key in common for t in a[key] if t not in skip)
    result = {"runs": [str(first), str(second)], "steps_compared": [list(k) for k in common], "terms": terms,
              "max_abs_difference": worst, "commit": commit(), **machine_info()}
    if note:
        result["note"] = note
    save_result("rerun", name, result)
    print(f"{name}: {len(common)} logged steps, largest difference {worst:g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--runs-dir", default=run_folder("rerun"))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--skip-quickstart", action="store_true")
    parser.add_argument("--compare-logs", nargs=3, metavar=("NAME", "RUN_A", "RUN_B"))
    parser.add_argument("--record-quickstart-teacher", action="store_true",
                        help="record the finished teacher of an interrupted quickstart rerun")
    parser.add_argument("--code-commit", help="commit of the code that produced the runs (default: HEAD)")
    parser.add_argument("--note", help="--compare-logs: a note recorded with the comparison")
    args = parser.parse_args()
    if args.code_commit:
        CODE_COMMIT.append(args.code_commit)
    if args.compare_logs:
        name, first, second = args.compare_logs
        compare_logs(name, Path(first), Path(second), args.note)
        return
    runs = Path(args.runs_dir)
    if args.record_quickstart_teacher:
        record_quickstart_teacher(runs)
        return
    if not args.skip_quickstart:
        rerun_quickstart(args.data_dir, runs)
    rerun_kd(args.data_dir, runs, args.seeds)


if __name__ == "__main__":
    main()
