"""What the finishing's spare time buys: the search's winner against the same winner trained on in the
time the finishing had left (``kdbert compress``, :mod:`kdbert.compress.spare`), on the same run.

    python benchmarks/spare_time.py --teacher runs/qs-ceiling3/teacher --task sst2 \
        --candidates bert-2x384-ffn192 --budget-minutes 6 --seeds 1 2 3

Each seed runs ``kdbert compress`` (its defaults but the options given) into
``runs/spare-<task>-<minutes>min-s<seed>`` (a finished one is read again). Where the spare time
trained the winner on, the search's own run is exported too, with the int8 method the shipped graph
used, and scored on dev, so that both graphs of one search are compared on dev and on the rows that
decide (the first check's score, and the trained-on one's). Records the steps, seconds, scores and
kept shares (over the PyTorch teacher's, as the report states them) of both, and which shipped, in
``benchmarks/results/spare_time.json`` under ``<task>/<candidates>/<minutes>min/seed<seed>``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR


def search(args, seed: int) -> Path:
    """The compress run of ``seed`` (run here unless its report is there); its folder."""
    from kdbert.cli import main

    out = Path(args.runs) / f"spare-{args.task}-{args.budget_minutes:g}min-s{seed}"
    if not (out / "compress_report.json").is_file():
        code = main(["compress", "--teacher", args.teacher, "--task", args.task, "--data-dir", args.data_dir,
                     "--target-speedup", str(args.target_speedup), "--budget-minutes", str(args.budget_minutes),
                     "--candidates", args.candidates, "--seed", str(seed), "--output-dir", str(out)])
        if code != 0:
            raise SystemExit(f"compress exited {code} for seed {seed}")
    return out


def first_dev_score(report: dict, out: Path, args) -> float:
    """The dev score of the search's own winner exported as the trained-on one shipped."""
    from kdbert.data.load import TaskOptions
    from kdbert.deploy.export import export_model

    first = report["shipped"]["checks"][0]
    method = (report["shipped"].get("int8") or {}).get("method")
    exported = export_model(first["run"], out / "first-export", quantize="int8" if method else None,
                            task=TaskOptions(args.task, data_dir=args.data_dir), batch_size=1,
                            int8_method=method or "auto")
    return exported["dev_metrics"]["onnx_int8" if method else "onnx_fp32"]["score"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--candidates", required=True)
    parser.add_argument("--target-speedup", type=float, default=4.0)
    parser.add_argument("--budget-minutes", type=float, default=6.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--runs", default="runs")
    args = parser.parse_args()

    for seed in args.seeds:
        started = time.time()
        out = search(args, seed)
        report = json.loads((out / "compress_report.json").read_text())
        spare, shipped = report["spare_training"], report["shipped"]
        teacher_dev, teacher_decide = report["teacher_scores"]["dev"], report["teacher_scores"]["decide"]
        first = shipped["checks"][0]
        row = {"spare": spare, "seconds": round(time.time() - started, 1),
               "budget_seconds": report["budget"]["seconds"], "phase_seconds": report["budget"]["phase_seconds"],
               "finishing_reserve_seconds": report["budget"]["finishing_reserve_seconds"],
               "teacher_dev": teacher_dev, "teacher_decide": teacher_decide,
               "search_winner": {"candidate": first["candidate"], "decide_score": first["decide_score"],
                                 "kept_decide": first["decide_score"] / teacher_decide}}
        if spare.get("trained"):
            dev = first_dev_score(report, out, args) if spare["shipped"] else shipped["dev_score"]
            row["search_winner"].update(steps=spare["from_steps"], dev_score=dev, kept_dev=dev / teacher_dev)
            trained_on = shipped["checks"][-1] if len(shipped["checks"]) > 1 else None
            if trained_on is not None:
                row["trained_on"] = {"steps": spare["steps"], "decide_score": trained_on["decide_score"],
                                     "kept_decide": trained_on["decide_score"] / teacher_decide,
                                     **({"dev_score": shipped["dev_score"], "kept_dev": shipped["dev_score"] / teacher_dev}
                                        if spare["shipped"] else {})}
        else:
            row["search_winner"].update(steps=report["winner"]["steps"], dev_score=shipped["dev_score"],
                                        kept_dev=shipped["dev_score"] / teacher_dev)
        key = f"{args.task}/{args.candidates}/{args.budget_minutes:g}min/seed{seed}"
        save_result("spare_time", key, {**row, "command": "python benchmarks/spare_time.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in (("teacher", args.teacher), ("task", args.task),
                                                       ("candidates", args.candidates),
                                                       ("budget_minutes", args.budget_minutes))) + f" --seeds {seed}",
                                             **machine_info()})
        print(key, json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
