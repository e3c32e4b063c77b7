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

Where the search's folder is gone, ``--from-ablation TASK/CANDIDATE/STEPS/VARIANT`` records the seeds
``recipe_ablation.py`` ran of the winner's start and recipe instead, provided one of them reproduces the
winner's score on the deciding rows (the same predictions there), so that they are the winner's run::

    python benchmarks/compress_seeds.py --key cola/x4-trust-near --from-ablation cola-near/bert-2x384/1200/teacher-head
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import fields
from pathlib import Path

from common import FLOAT32_PINNED, load_results, machine_info, save_result
from paths import GLUE_DIR

from kdbert.compress.spare import SPARE_SUFFIX
from kdbert.core.hardware import resolve_precision
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
    """The steps at which the search paused and evaluated the winner's run, in order (none: one run); a
    winner trained on in the finishing's spare time (``<run>.spare``) pauses where the search's run did,
    then at its own last step."""
    search = report.get("search")
    segments = search.get("segments", []) if isinstance(search, dict) else []
    winner = report["winner"]
    run = winner["run"].removesuffix(SPARE_SUFFIX)
    steps = {segment["steps"] for segment in segments if segment["run"] == run}
    if run != winner["run"]:
        steps.add(winner["steps"])
    return sorted(steps)


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


def from_ablation(key: str, prefix: str) -> dict:
    """The record of ``recipe_ablation.py``'s runs under ``prefix`` (``TASK/CANDIDATE/STEPS/VARIANT``) as
    the seeds of the search ``key``'s winner; refused unless the candidate is the winner's, the runs no
    longer than the winner's (its checkpoint may be an earlier step's: ``STEPS`` may carry recipe_ablation's
    ``-first<N>``) and one run's deciding score is the winner's (to 1e-9)."""
    winner = load_results("compress")[key]["winner"]
    _, candidate, steps, _ = prefix.split("/")
    runs = {k.rsplit("/seed", 1)[1]: r for k, r in load_results("recipe_ablation").items()
            if k.rsplit("/", 1)[0] == prefix}
    steps = int(steps.split("-")[0])
    if candidate != winner["candidate"] or steps > winner["steps"] or not runs:
        raise SystemExit(f"--from-ablation {prefix}: not the winner of {key} ({winner['candidate']} at "
                         f"{winner['steps']} steps) or no runs recorded")
    if not any(abs(r["decide"] - winner["decide_score"]) < 1e-9 for r in runs.values()):
        raise SystemExit(f"--from-ablation {prefix}: no run reproduces the winner's deciding score "
                         f"{winner['decide_score']:.4f}; rerun the search's folder with --search")
    dev = [r["dev"] for r in runs.values()]
    first = next(iter(runs.values()))
    return {"date": first["date"], "machine": first["machine"], "torch": first.get("torch"),
            "candidate": candidate, "steps": steps, "run": winner["run"],
            "seeds": {seed: {"held_out": r["held_out"], "dev": r["dev"], "decide": r["decide"]}
                      for seed, r in sorted(runs.items())},
            "dev_mean": statistics.mean(dev), "dev_std": statistics.stdev(dev) if len(dev) > 1 else 0.0,
            "runs": first["command"],
            "command": f"python benchmarks/compress_seeds.py --key {key} --from-ablation {prefix}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", help="a compress output folder with compress_report.json")
    parser.add_argument("--key", required=True, help="the search's key in compress.json, e.g. sst2/x8")
    parser.add_argument("--seeds", type=int, nargs="+", default=[43, 44])
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--from-ablation", metavar="TASK/CANDIDATE/STEPS/VARIANT",
                        help="record recipe_ablation.py's seeds of the winner's run instead of rerunning it")
    args = parser.parse_args()
    if args.from_ablation:
        save_result("compress_seeds", args.key, from_ablation(args.key, args.from_ablation))
        return
    if not args.search:
        parser.error("give --search (the search's folder) or --from-ablation")
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
    precision = resolve_precision("auto")[0]  # what the reruns trained in, as the search's did
    save_result("compress_seeds", args.key, {
        **machine_info(), "candidate": winner["candidate"], "steps": winner["steps"], "run": str(run),
        "seeds": {str(seed): row for seed, row in sorted(runs.items())},
        "dev_mean": statistics.mean(dev), "dev_std": statistics.stdev(dev) if len(dev) > 1 else 0.0,
        "seconds_this_call": round(time.time() - started, 1),
        "precision": precision,
        "command": ("" if FLOAT32_PINNED else f"KDBERT_MIXED_PRECISION={precision} ")
                   + f"OMP_NUM_THREADS=1 python benchmarks/compress_seeds.py --search {args.search} --key {args.key} "
                   f"--seeds {' '.join(map(str, args.seeds))}"})


if __name__ == "__main__":
    main()
