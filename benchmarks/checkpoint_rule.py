"""Which checkpoint a run keeps: the highest score on the rows that pick, or the latest within a
standard error of it (:func:`kdbert.core.evaluate.replaces_checkpoint`), replayed on the evaluations
that recorded `kdbert compress` searches logged.

    python benchmarks/checkpoint_rule.py --key sst2/main-job runs/qs-base-48/compress runs/qs-base-45/compress

Every candidate run of each search (``<search>/runs/<candidate>/log.jsonl``, each evaluation with its
scores on dev, on the rows that pick and on those that decide) is replayed under both rules; for
the runs where they keep different checkpoints, the dev and deciding scores of each rule's choice
are compared (a paired difference per run, its mean and standard error). Only the choice is
replayed: a search run under one rule promotes on that rule's scores, so the runs themselves are
those the search trained. Records in ``benchmarks/results/checkpoint_rule.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common import machine_info, save_result

from kdbert.core.evaluate import replaces_checkpoint, selection_key


def evaluations(log: Path) -> list[dict]:
    """The run's evaluations in step order, one per step (a step evaluated again on a resume: the last)."""
    by_step = {}
    for line in log.read_text().splitlines():
        record = json.loads(line)
        if "eval" in record:
            by_step[record["step"]] = {**record["eval"], "step": record["step"]}
    return [by_step[step] for step in sorted(by_step)]


def highest(history: list[dict]) -> dict:
    """The old rule: the highest by :func:`selection_key` (the first of equals)."""
    kept = history[0]
    for metrics in history[1:]:
        if selection_key(metrics) > selection_key(kept):
            kept = metrics
    return kept


def latest_within_noise(history: list[dict]) -> dict:
    """The trainer's rule, replayed evaluation by evaluation."""
    kept = top = None
    for metrics in history:
        if top is None or selection_key(metrics) > selection_key(top):
            top = metrics
        if replaces_checkpoint(metrics, kept, top):
            kept = metrics
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("searches", nargs="+", help="finished compress folders (their runs/ kept)")
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    runs = []
    for search in map(Path, args.searches):
        for log in sorted(search.glob("runs/*/log.jsonl")):
            history = evaluations(log)
            if len(history) < 2 or "decide_score" not in history[0]:
                continue
            old, new = highest(history), latest_within_noise(history)
            runs.append({"search": str(search), "candidate": log.parent.name, "evaluations": len(history),
                         "steps": history[-1]["step"],
                         **{f"{rule}_{field}": metrics[name] for rule, metrics in (("highest", old), ("latest", new))
                            for field, name in (("step", "step"), ("pick", "selection_score"), ("dev", "score"),
                                                ("decide", "decide_score"))}})
    differ = [run for run in runs if run["highest_step"] != run["latest_step"]]
    summary = {"runs": len(runs), "runs_that_differ": len(differ)}
    for field in ("dev", "decide", "pick"):
        gains = np.array([run[f"latest_{field}"] - run[f"highest_{field}"] for run in differ])
        summary[f"{field}_gain"] = float(gains.mean()) if len(gains) else 0.0
        summary[f"{field}_gain_se"] = float(gains.std(ddof=1) / np.sqrt(len(gains))) if len(gains) > 1 else None
    command = "python benchmarks/checkpoint_rule.py --key " + args.key + " " + " ".join(args.searches)
    save_result("checkpoint_rule", args.key, {**machine_info(), **summary, "per_run": runs, "command": command})
    for run in differ:
        print(f"{run['search']} {run['candidate']}: step {run['highest_step']} -> {run['latest_step']}, "
              f"dev {run['highest_dev']:.2f} -> {run['latest_dev']:.2f}, "
              f"decide {run['highest_decide']:.2f} -> {run['latest_decide']:.2f}")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
