"""Recorded `kdbert compress` winners read again against the paired noise margin.

    OMP_NUM_THREADS=1 KDBERT_MIXED_PRECISION=bf16 python benchmarks/paired_margin.py \
        --search runs/compress-mrpc-x8-mpnet-pair --key mrpc/x8-mpnet-trust-pair

The search's shipped graph (``<search>/winner``) and its teacher (the report's) are scored on the
held-out rows that decide, as the search split them (the teacher's ``held_out.json``); the
shortfall from ``min_kept`` of the teacher's score is read against the margin the search used (the
two bootstrap standard errors added, ``sqrt(se_student^2 + (min_kept se_teacher)^2)``) and against
the paired one (both scored on the same resamples, :meth:`kdbert.compress.schedule.Goal.decide_margin`).
Records both in ``benchmarks/results/paired_margin.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.compress.schedule import Goal
from kdbert.compress.ship import decide_score
from kdbert.compress.speed import RUNTIMES
from kdbert.compress.teacher import checked_teacher, held_out_task
from kdbert.data.held_out import DECIDE_SHARE
from kdbert.data.load import TaskOptions, load_task
from kdbert.families.registry import family_of_folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", required=True, help="a finished compress folder (its winner/ kept)")
    parser.add_argument("--key", required=True, help="the search's key in compress.json")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    search = Path(args.search)
    report = json.loads((search / "compress_report.json").read_text())
    teacher_dir = report["teacher"]
    task, _ = held_out_task(teacher_dir, TaskOptions(task=report["task"], data_dir=args.data_dir),
                            trained_on_all=bool(report.get("teacher_saw_held_out_rows")))
    data = load_task(replace(task, decide_share=task.decide_share or DECIDE_SHARE))
    model, tokenizer = family_of_folder(teacher_dir).load(Path(teacher_dir), data.spec)
    teacher = checked_teacher((teacher_dir, model, tokenizer), data)
    references = np.array([row.label for row in data.decide])
    min_kept = report["target"]["min_kept"]
    goal = Goal(teacher.metrics["selection_score"], min_kept, {}, teacher.metrics["decide_score"],
                teacher.metrics["decide_se"], teacher_decide_predictions=tuple(teacher.decide_predictions.tolist()))
    scored, predictions = decide_score(search / "winner", RUNTIMES[report["runtime"]], data, goal)
    score, error = scored["decide_score"], scored["decide_se"]
    independent = goal.decide_margin(error)[0]
    paired = goal.decide_margin(error, scored["decide_paired_se"])[0]
    row = {"winner": report["winner"]["candidate"], "decide_rows": len(references), "teacher_decide": goal.teacher_decide,
           "shipped_decide": score, "kept": goal.kept(score), "shortfall": goal.line() - score,
           "margin_independent": independent, "keeps_independent": goal.keeps_within(score, independent),
           "margin_paired": paired, "keeps_paired": goal.keeps_within(score, paired),
           "agreement": float(np.mean(predictions == teacher.decide_predictions))
           if not data.spec.is_regression else None,
           "command": f"OMP_NUM_THREADS=1 KDBERT_MIXED_PRECISION=bf16 python benchmarks/paired_margin.py "
                      f"--search {args.search} --key {args.key}"}
    save_result("paired_margin", args.key, {**machine_info(), **row})
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
