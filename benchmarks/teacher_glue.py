"""Fine-tune the default teacher on GLUE tasks and record dev metrics and wall time.

    python benchmarks/teacher_glue.py --data-dir ../shared/data/glue_data --budget cpu
    python benchmarks/teacher_glue.py --tasks rte --rerun     # a recorded figure again, compared

Each task's run goes to ``runs/teacher-<task>`` (resumable: an interrupted task continues from
its last checkpoint) and its result to ``benchmarks/results/teacher_glue.json``;
``benchmarks/report.py`` turns results into BENCHMARKS.md. A task whose result is recorded is
skipped, so on a fresh clone the command above only lists the recorded figures; ``--rerun``
fine-tunes those tasks again into ``runs/rerun/teacher-<task>`` with the recorded settings
(epochs, learning rate, batch size, sequence length: not today's defaults),
compares each dev score with the recorded one (:func:`common.compare_rerun`; one seed, so the
noise allowed is ``--tolerance``) and records the comparison in ``results/reruns.json``.
``--build-missing`` fine-tunes a recorded task whose folder is missing from ``--runs-dir`` again
into it, with the recorded settings, and records the teacher built (the earlier build's figures
kept under ``earlier_builds``): a driver on a fresh machine gets the teacher its later steps read,
and the record says what that teacher scores. A folder built so but not recorded is read back.

Budgets: ``full`` uses kdbert's per-task defaults; ``cpu`` fits a 2-core machine (SST-2 on a
20k-row subset for one epoch, 3 epochs elsewhere) and is stated next to every figure.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import compare_rerun, load_results, machine_info, save_result
from glue_inputs import BUDGETS, fine_tune, recorded_settings, teacher_dir, teacher_key
from paths import GLUE_DIR, run_folder


def log_seconds(folder: Path) -> float:
    """A finished run's wall time from its ``log.jsonl``: the first record's time stamp to the last's
    (its first logging interval and the loading before it left out)."""
    times = [json.loads(line)["time"] for line in (folder / "log.jsonl").read_text().splitlines() if line.strip()]
    return round(times[-1] - times[0], 1)


def build_parser() -> argparse.ArgumentParser:
    """The script's options (the recorded commands in ``results/teacher_glue.json`` parse with them)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="cpu")
    parser.add_argument("--tasks", nargs="*", help="subset of the budget's tasks")
    parser.add_argument("--runs-dir", default=run_folder())
    parser.add_argument("--model", default="default")
    parser.add_argument("--learning-rate", type=float, help="override the task default (a tuning run)")
    parser.add_argument("--epochs", type=float, help="override the budget's epochs (a tuning run)")
    parser.add_argument("--held-out-fraction", type=float,
                        help="keep this share of training rows out (the rows `kdbert compress` picks on)")
    parser.add_argument("--rerun", action="store_true",
                        help="fine-tune recorded tasks again (into RUNS_DIR/rerun/) and compare with the record")
    parser.add_argument("--tolerance", type=float, default=1.0,
                        help="--rerun: largest score difference counted as reproduced (points)")
    parser.add_argument("--build-missing", action="store_true",
                        help="fine-tune a recorded task whose folder in RUNS_DIR is missing again, with the recorded "
                             "settings, and record it (the earlier build's figures kept under earlier_builds)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    tuning = {k: v for k, v in (("learning_rate", args.learning_rate), ("epochs", args.epochs),
                                ("held_out_fraction", args.held_out_fraction)) if v is not None}
    done = load_results("teacher_glue")
    for task in BUDGETS[args.budget]:
        if args.tasks and task not in args.tasks:
            continue
        key = teacher_key(task, args.budget, tuning)
        if args.rerun:
            if key not in done:
                print(f"{key}: nothing recorded to rerun")
                continue
            out = Path(args.runs_dir) / "rerun" / Path(done[key]["output_dir"]).name
            result = fine_tune(task, args.budget, recorded_settings(done[key]), args.data_dir, out, model=args.model)
            verdict = compare_rerun(done[key]["metrics"]["score"], [], result["metrics"]["score"], args.tolerance)
            save_result("reruns", f"teacher_glue/{key}", {**verdict, "rerun_dir": str(out), **machine_info()})
            print(f"{key}: {verdict['summary']}")
            continue
        if key in done:
            out = teacher_dir(task, tuning, args.runs_dir)
            built = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else None
            if args.build_missing and built != done[key]["metrics"]:
                # built again (its folder was missing), or built before and not recorded: a finished run is read back
                result = fine_tune(task, args.budget, recorded_settings(done[key]), args.data_dir, out,
                                   model=args.model)
                if built is not None:  # read back: its training time is its log's, not this call's
                    result["train_seconds"] = log_seconds(out)
                earlier = [*done[key].get("earlier_builds", []),
                           {k: done[key][k] for k in ("date", "metrics", "train_seconds", "machine") if k in done[key]}]
                save_result("teacher_glue", key, {**result, "earlier_builds": earlier})
                print(f"{key}: its folder {out} was missing, built again ({result['metrics']}); recorded, the earlier "
                      "build's figures kept under earlier_builds")
            else:
                print(f"{key}: recorded ({done[key]['metrics']}); --rerun fine-tunes it again and compares")
            continue
        result = fine_tune(task, args.budget, tuning, args.data_dir, runs_dir=args.runs_dir, model=args.model)
        save_result("teacher_glue", key, result)
        print(f"{key}: {result['metrics']} in {result['train_seconds']:.0f}s (resumed: {result['resumed']})")


if __name__ == "__main__":
    main()
