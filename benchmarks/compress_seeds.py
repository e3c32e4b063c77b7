"""A recorded `kdbert compress` winner distilled again with other seeds: how much of its score is luck.

    OMP_NUM_THREADS=1 python benchmarks/compress_seeds.py --search runs/compress-sst2-x8-pred --key sst2/x8 \
        --seeds 43 44

The winner's last run in the search (its ``run_config.json`` holds every option, the task and its
held-out fraction) runs again with each seed into ``<search>/seeds/<seed>`` (a finished seed is
reused), with the same steps: where the search trained it in segments (``report["search"]
["segments"]``), paused and evaluated at the same steps, the best on held-out rows kept, as there.
Records, in ``benchmarks/results/compress_seeds.json`` under ``--key``
(the search's key in ``compress.json``), the held-out (picking and deciding) and dev (PyTorch) scores of every seed, the
search's own run included under its seed. The reruns read the teacher outputs the search stored.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import fields
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.data.load import TaskOptions
from kdbert.methods.front import distill_task

TASK_FIELDS = {field.name for field in fields(TaskOptions)}


def scores(report: dict) -> dict:
    """A run's score on the held-out rows that picked its checkpoint, on those that decide (searches
    that split them), and on dev."""
    metrics = report["dev_metrics"]
    return {"held_out": metrics.get("selection_score", metrics["score"]), "dev": metrics["score"],
            **({"decide": metrics["decide_score"]} if "decide_score" in metrics else {})}


def search_caches(search: Path, options: dict) -> dict:
    """The teacher outputs the search stored, as its runs read them, where a run's config does not
    record them: the teacher cache of a student started from the teacher, the stored logits of one
    of its own (the BiLSTM). A run that names its store of logits (``logits_cache``: the BiLSTM or a
    student of another tokenizer, since the shared store) reads it again. Without them every step
    would run the teacher again."""
    if options.get("logits_cache"):
        return {}
    if options.get("student"):
        return {"teacher_cache": str(search / "teacher-cache")} if (search / "teacher-cache").is_dir() else {}
    return {"logits_cache": str(search / "teacher-logits")} if (search / "teacher-logits").is_dir() else {}


def pauses(report: dict) -> list[int]:
    """The steps at which the search paused and evaluated the winner's run, in order (none: one run)."""
    search = report.get("search")
    segments = search.get("segments", []) if isinstance(search, dict) else []
    return sorted({segment["steps"] for segment in segments if segment["run"] == report["winner"]["run"]})


def rerun(run: Path, seed: int, out: Path, data_dir: str, search: Path, pause_steps: list[int]) -> dict:
    """``run`` again with ``seed`` into ``out`` (reused when finished), paused at ``pause_steps``; its
    held-out and dev scores."""
    done = json.loads((out / "distill_report.json").read_text()) if (out / "distill_report.json").is_file() else {}
    if done and done.get("paused_at_step") == (pause_steps or [None])[-1]:
        return scores(done)
    recorded = json.loads((run / "run_config.json").read_text())
    task = TaskOptions(**{**{k: v for k, v in recorded.items() if k in TASK_FIELDS and v is not None},
                          "data_dir": data_dir})
    options = {k: v for k, v in recorded.items() if k not in TASK_FIELDS and k != "command" and v is not None}
    options.update(search_caches(search, options), seed=seed, no_progress=True)
    report = None
    for index, step in enumerate(pause_steps or [None]):
        report = distill_task(task, options, str(out), resume=index > 0, overwrite=index == 0, pause_at_step=step)
    return scores(report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", required=True, help="a compress output folder with compress_report.json")
    parser.add_argument("--key", required=True, help="the search's key in compress.json, e.g. sst2/x8")
    parser.add_argument("--seeds", type=int, nargs="+", default=[43, 44])
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    search = Path(args.search)
    report = json.loads((search / "compress_report.json").read_text())
    winner = report["winner"]
    run = Path(winner["run"])
    own_seed = json.loads((run / "run_config.json").read_text())["seed"]
    started = time.time()
    runs = {own_seed: scores(json.loads((run / "distill_report.json").read_text()))}
    for seed in args.seeds:
        runs[seed] = rerun(run, seed, search / "seeds" / str(seed), args.data_dir, search, pauses(report))
        print(f"seed {seed}: {runs[seed]}")
    dev = [row["dev"] for row in runs.values()]
    save_result("compress_seeds", args.key, {
        **machine_info(), "candidate": winner["candidate"], "steps": winner["steps"], "run": str(run),
        "seeds": {str(seed): row for seed, row in sorted(runs.items())},
        "dev_mean": statistics.mean(dev), "dev_std": statistics.stdev(dev) if len(dev) > 1 else 0.0,
        "seconds_this_call": round(time.time() - started, 1),
        "command": f"OMP_NUM_THREADS=1 python benchmarks/compress_seeds.py --search {args.search} --key {args.key} "
                   f"--seeds {' '.join(map(str, args.seeds))}"})


if __name__ == "__main__":
    main()
