"""The search engine before and after it moved to Optuna, at the same task, teacher, budget and
machine: candidates reached, the winner's steps, its held-out and dev scores, the shipped score.

The runs are ordinary ``bench_compress.py`` searches (the old engine from a checkout of commit
2056eea, the last with the hand-written successive halving, run with that checkout's ``src`` on
``PYTHONPATH``), each with one thread (``OMP_NUM_THREADS=1 --threads 1``), the old and the new one
at the same time, one core each; ``--workers 2`` runs alone on both cores:

    OMP_NUM_THREADS=1 python benchmarks/bench_compress.py --task sst2 --teacher T --budget-minutes 30 \\
        --threads 1 --output-dir runs/engine/sst2-new --key-suffix=-engine-new
    (cd old-checkout && PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/bench_compress.py ... \\
        --output-dir runs/engine/sst2-old --key-suffix=-engine-old)
    python benchmarks/compress_engines.py --task sst2 old=runs/engine/sst2-old new=runs/engine/sst2-new

Results: ``benchmarks/results/compress_engines.json`` under ``<task>/<label>``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import machine_info, save_result

from kdbert.deploy.int8_kernels import cpu_int8_facts


def _rows(report: dict) -> list[dict]:
    """Every finished run (old engine) or segment (new engine), as (candidate, steps, held-out, seconds)."""
    search = report["search"]
    if "segments" in search:
        return [{"candidate": r["candidate"], "steps": r["steps"], "held_out": r["score"], "seconds": r["seconds"],
                 "rung": r["rung"]} for r in search["segments"]]
    return [{"candidate": r["candidate"], "steps": r.get("trained_steps", r["steps"]), "held_out": r["selection_score"],
             "seconds": r["seconds"] + r.get("superseded_seconds", 0.0), "rung": index}
            for index, rows in enumerate(search["rounds"]) for r in rows]


def summary(report: dict) -> dict:
    """What the comparison records of one search."""
    rows = _rows(report)
    winner = report["winner"]
    kinds = {name.split("-", 1)[0] for name in report["speed"]["candidates"]
             if report["speed"]["candidates"][name]["speedup"] >= report["target"]["speedup"]}
    return {
        "candidates_meeting_target": sum(1 for row in report["speed"]["candidates"].values()
                                         if row["speedup"] >= report["target"]["speedup"]),
        "candidates_trained": sorted({row["candidate"] for row in rows}),
        "families_meeting_target": sorted(kinds),
        "families_reached_first_rung": sorted({row["candidate"].split("-", 1)[0] for row in rows if row["rung"] == 0}),
        "runs": len(rows),
        "steps_trained": sum(row["steps"] for row in rows) if "segments" not in report["search"] else
        sum(r["trained"] for r in report["search"]["segments"]),
        "winner": winner["candidate"], "winner_rule": winner["rule"],
        "winner_steps": winner.get("trained_steps", winner["steps"]),  # the old engine's: as far as it trained
        "winner_held_out": winner.get("score", winner.get("selection_score")),
        "winner_dev_pytorch": winner["dev_score"],
        "shipped_dev": report["shipped"]["dev_score"], "kept_dev": report["shipped"]["kept_dev"],
        "teacher_dev": report["teacher_scores"]["dev"], "teacher_held_out": report["teacher_scores"]["held_out"],
        "speedup": report["shipped"]["speedup"],
        "budget_seconds": (report.get("budget") or {}).get("seconds"),
        "phase_seconds": (report.get("budget") or {}).get("phase_seconds"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("runs", nargs="+", help="label=output folder of a finished search")
    args = parser.parse_args()
    for item in args.runs:
        label, folder = item.split("=", 1)
        report = json.loads((Path(folder) / "compress_report.json").read_text())
        result = {**machine_info(), "cpu": cpu_int8_facts(), "output_dir": folder, **summary(report)}
        save_result("compress_engines", f"{args.task}/{label}", result)
        print(label, json.dumps({k: result[k] for k in ("winner", "winner_steps", "winner_held_out",
                                                         "shipped_dev", "candidates_trained")}))


if __name__ == "__main__":
    main()
