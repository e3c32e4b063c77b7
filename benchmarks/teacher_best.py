"""The benchmark teacher of each GLUE task: the best of its tuning runs on its held-out rows.

    python benchmarks/teacher_best.py                 # choose, record, link runs/teacher-<task>

Reads the fine-tuning runs ``teacher_glue.py --budget full --held-out-fraction 0.1 --learning-rate
LR --epochs E`` recorded in ``results/teacher_glue.json`` (each folder holds the ``held_out.json``
that ``kdbert compress`` reads, so the search holds out the rows the teacher never trained on), and
per task keeps the run with the best score on those held-out rows (``selection_score``; a tie, which
RTE's 125 rows give, goes to the lower loss on the same rows; dev only reports). Records the choice,
every run compared, and the published dev figure of a fine-tuned MiniLM-L6-H384 (microsoft/unilm,
minilm/README.md: a general MiniLM, not the sentence-encoder all-MiniLM-L6-v2 our teacher starts
from) in ``results/teacher_best.json``, and points
``runs/teacher-<task>`` (``bench_compress.py``'s default teacher) at the chosen folder; where that folder
is not on this machine, the choice stays the record's and the command that builds it again is printed.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from common import load_results, machine_info, save_result
from paths import run_folder

# MiniLM-L6xH384 fine-tuned, GLUE dev (microsoft/unilm minilm/README.md); STS-B is not reported there
PUBLISHED_MINILM_L6 = {"sst2": 91.5, "cola": 47.5, "rte": 68.8, "mrpc": 88.9}
TUNING = ("epochs", "held_out_fraction", "learning_rate")  # teacher_glue.py's options that name a tuning run


def tuning_runs(records: dict, task: str) -> dict:
    """The task's recorded runs that held rows out (``--budget full``, tuned), whether or not their
    folders are still on this machine: the choice is the record's. Scores on held-out rows compare only
    over the same rows: where some runs record the rule that drew theirs (``held_out_rule``, recorded
    since 2026-12-02), the runs of the rule most of them record (the latest build's on a tie) compete;
    the others, from before, only where none records one."""
    runs = {key: run for key, run in records.items()
            if key.startswith(f"{task}/full-") and run.get("overrides", {}).get("held_out_fraction")}
    rules = [run["held_out_rule"] for run in sorted(runs.values(), key=lambda r: r.get("date", ""))
             if "held_out_rule" in run]
    if not rules:
        return runs
    rule = max(reversed(rules), key=rules.count)
    return {key: run for key, run in runs.items() if run.get("held_out_rule") == rule}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=["sst2", "cola", "mrpc", "stsb", "rte"])
    parser.add_argument("--runs-dir", default=run_folder())
    args = parser.parse_args()
    records = load_results("teacher_glue")
    for task in args.tasks:
        runs = tuning_runs(records, task)
        if not runs:
            print(f"{task}: no tuning run with recorded held-out rows yet (teacher_glue.py --budget full "
                  "--held-out-fraction 0.1 --learning-rate LR --epochs E)")
            continue
        key, best = max(runs.items(), key=lambda item: (item[1]["metrics"]["selection_score"],
                                                        -item[1]["metrics"].get("selection_loss", 0.0)))
        link = Path(args.runs_dir) / f"teacher-{task}"
        linked = (Path(best["output_dir"]) / "held_out.json").is_file()
        if not linked:
            print(f"{task}: the chosen run's folder {best['output_dir']} is not on this machine; rebuild it with "
                  f"python benchmarks/teacher_glue.py --budget full --tasks {task} --build-missing "
                  + " ".join(f"--{k.replace('_', '-')} {best['overrides'][k]:g}" for k in TUNING if k in best["overrides"]))
        elif link.is_symlink() or not link.exists():
            link.unlink(missing_ok=True)
            os.symlink(Path(best["output_dir"]).resolve(), link)
        compared = {k: {"held_out": r["metrics"]["selection_score"], "held_out_se": r["metrics"].get("selection_se"),
                        **({"decide": r["metrics"]["decide_score"], "decide_se": r["metrics"]["decide_se"]}
                           if "decide_score" in r["metrics"] else {}),  # rows its checkpoint was not picked on
                        "dev": r["metrics"]["score"], **r["hyperparameters"], "train_seconds": r["train_seconds"],
                        **({"pooling": r["pooling"]} if "pooling" in r else {})}
                    for k, r in runs.items()}
        save_result("teacher_best", task, {**machine_info(), "command": "python benchmarks/teacher_best.py",
                                           "chosen": key, "folder": best["output_dir"], "runs": compared,
                                           "published_minilm_l6_dev": PUBLISHED_MINILM_L6.get(task)})
        print(f"{task}: {key} (held-out {best['metrics']['selection_score']:.2f}, dev {best['metrics']['score']:.2f}"
              f"; published MiniLM-L6 dev {PUBLISHED_MINILM_L6.get(task, '-')}) of {len(runs)} run(s)"
              + (f" -> {link}" if linked else ""))


if __name__ == "__main__":
    main()
