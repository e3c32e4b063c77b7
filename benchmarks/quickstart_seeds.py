"""The main job's compress step over several seeds, on one recorded teacher.

    python benchmarks/bench_quickstart.py                          # once: runs/quickstart/teacher
    python benchmarks/quickstart_seeds.py --key sst2/bf16 --seeds 48 45 46

Each seed runs ``kdbert quickstart --seed S`` into ``<runs>/quickstart-seeds/<key>/seed<S>`` with a copy
of the recorded teacher in its ``teacher/`` (so the fine-tuning is skipped and every seed distils the
same teacher), one seed after another, alone on the machine; ``--timing-threads``, ``--unlabelled`` and
``--kd-labels`` go to each quickstart as they are, and each seed keeps the teacher's stored labels in its own folder
(``--logits-cache``), so that every seed labels its rows as a user's first search of a new teacher
does (until 2026-12-06 the seeds shared the user's store). A seed whose folder holds a finished
run (its ``summary.json``) is recorded, not run again. Records each seed's winner, its steps, its speed
over the int8 teacher and what it keeps of it in int8 on dev and on the rows that decide, their
mean and standard deviation, in ``benchmarks/results/quickstart_seeds.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import common
from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

if common.FLOAT32_PINNED:  # recorded as users get it: kdbert's default precision
    os.environ.pop("KDBERT_MIXED_PRECISION")

from kdbert.cli import main as kdbert_main  # noqa: E402 (after the precision is settled)


def seed_record(folder: Path) -> dict:
    """What a finished seed's folder says: winner, steps, speedup (and with each model at its fastest
    thread count, where the report has it) and kept shares (int8, percent), the seconds compress spent
    and its search's; where the report measured it (since 2026-12-06), the gap between the shipped
    graph's kept share on dev and on the rows that decide (both over the PyTorch teacher) and its
    standard error, in points."""
    summary = json.loads((folder / "summary.json").read_text())
    report = json.loads((folder / "compress" / "compress_report.json").read_text())
    shipped = report["shipped"]
    gap = ({"gap": 100 * (shipped["kept_dev"] - shipped["kept_decide"]), "gap_se": 100 * shipped["gap_se"]}
           if "gap_se" in shipped else {})
    return {**gap, "winner": summary["winner"], "steps": report["winner"]["steps"],
            "speedup": summary["int8_speedup_vs_int8_teacher"], "kept_dev": summary["int8_retained_percent"],
            "kept_decide": summary["int8_kept_decide_percent"],
            "speedup_each_at_its_fastest": (report["shipped"].get("each_at_its_fastest") or {}).get("speedup"),
            "search_seconds": report["budget"]["phase_seconds"]["search"], "seconds": report["budget"]["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[48, 45, 46])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--teacher", default=run_folder("quickstart/teacher"), help="a finished quickstart teacher")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--timing-threads", type=int, help="kdbert quickstart --timing-threads (default: its own)")
    parser.add_argument("--unlabelled", help="kdbert quickstart --unlabelled: more rows without labels, labelled by "
                        "the teacher (a .jsonl of the task's text column(s))")
    parser.add_argument("--kd-labels", help="kdbert quickstart --kd-labels (default: its own)")
    args = parser.parse_args()
    passed = ["--timing-threads", str(args.timing_threads)] if args.timing_threads else []
    passed += ["--kd-labels", args.kd_labels] if args.kd_labels else []
    passed += ["--unlabelled", args.unlabelled] if args.unlabelled else []
    root = Path(run_folder("quickstart-seeds")) / args.key
    seeds = {}
    for seed in args.seeds:
        folder = root / f"seed{seed}"
        if not (folder / "summary.json").exists():
            if not (folder / "teacher").exists():
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copytree(args.teacher, folder / "teacher.tmp", dirs_exist_ok=True)
                (folder / "teacher.tmp").rename(folder / "teacher")
            started = time.time()
            if kdbert_main(["quickstart", "--task", args.task, "--data-dir", args.data_dir, "--output-dir",
                            str(folder), "--seed", str(seed), "--no-progress", "--logits-cache",
                            str(folder / "teacher-logits"), *passed]) != 0:
                sys.exit(f"quickstart seed {seed} failed")
            print(f"seed {seed}: {(time.time() - started) / 60:.1f} min")
        seeds[seed] = seed_record(folder)
    mean = {field: statistics.mean(r[field] for r in seeds.values())
            for field in ("kept_dev", "kept_decide", "speedup")}
    sd = {field: statistics.stdev(r[field] for r in seeds.values()) if len(seeds) > 1 else None
          for field in ("kept_dev", "kept_decide")}
    command = (f"python benchmarks/quickstart_seeds.py --key {args.key} --seeds {' '.join(map(str, args.seeds))}"
               + "".join(f" {flag}" for flag in passed))
    save_result("quickstart_seeds", args.key, {**machine_info(), "task": args.task, "teacher": args.teacher,
                                               "seeds": seeds, "mean": mean, "sd": sd, "command": command})
    print(json.dumps({"seeds": seeds, "mean": mean, "sd": sd}, indent=1))


if __name__ == "__main__":
    main()
