"""A recorded `kdbert compress` winner's kept share per source (the collection a row comes from), on dev
and on the held-out rows that decide, and on the sources both share: dev's rows of them, and the
deciding rows resampled to dev's mix of them.

    OMP_NUM_THREADS=1 python benchmarks/kept_by_source.py --search runs/compress-stsb-x4-tuned2 \
        --key stsb/x4-trust-tuned

Why: where training mixes its sources otherwise than dev, or dev holds sources training lacks (a third
of STS-B's dev: answers-forums, track5.en-en), and a student keeps a different share of each, rows drawn
from training state a kept share dev does not confirm. The shipped graph (``<search>/winner``, in the search's
runtime) and the teacher (PyTorch) are scored on dev and on the deciding rows, as the search split them
(the teacher's ``held_out.json``); per source, on dev's rows of the sources both share, and over the
deciding rows resampled (``--resamples`` stratified bootstrap draws) to dev's shares of those. Records in
``benchmarks/results/kept_by_source.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.compress.speed import RUNTIMES
from kdbert.compress.teacher import held_out_task
from kdbert.core.metrics import compute_metric, resampled_metric
from kdbert.data.held_out import DECIDE_SHARE
from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.predict import load


def outputs(predictor, rows, regression: bool) -> np.ndarray:
    """The predictor's scores (regression) or class ids for ``rows``."""
    logits = predictor.logits([row.texts[0] if len(row.texts) == 1 else row.texts for row in rows])
    return logits[:, 0] if regression else logits.argmax(axis=-1)


def score(metrics, predictions, references) -> float:
    """The task's score: the mean of its metrics, in percent."""
    return float(np.mean([compute_metric(name, predictions, references) for name in metrics]))


def stratified_indices(sources: np.ndarray, shares: dict[str, float], resamples: int, seed: int = 0) -> np.ndarray:
    """``resamples`` bootstrap draws of ``len(sources)`` rows, each source drawn with replacement in
    ``shares`` (rounded), shape (resamples, n)."""
    rng = np.random.default_rng(seed)
    counts = {name: int(round(share * len(sources))) for name, share in shares.items()}
    return np.stack([np.concatenate([rng.choice(np.flatnonzero(sources == name), size=n, replace=True)
                                     for name, n in counts.items()]) for _ in range(resamples)])


def search_arguments(description: str) -> argparse.ArgumentParser:
    """The options of a script that reads a finished search: ``--search``, ``--key``, ``--data-dir``, ``--teacher``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", required=True, help="a finished compress folder (its winner/ kept)")
    parser.add_argument("--key", required=True, help="the search's key in compress.json")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--teacher", help="the search's teacher where it has moved since (default: the report's)")
    return parser


def search_models(args, batch_size: int = 64):
    """A finished search's task (its held-out rows split as the search split them), its shipped graph's
    path and ``{"teacher": PyTorch teacher, "student": shipped graph}`` as predictors of ``batch_size``."""
    search = Path(args.search)
    report = json.loads((search / "compress_report.json").read_text())
    teacher_dir = args.teacher or report["teacher"]
    task, _ = held_out_task(teacher_dir, TaskOptions(task=report["task"], data_dir=args.data_dir),
                            trained_on_all=bool(report.get("teacher_saw_held_out_rows")))
    data = load_task(replace(task, decide_share=task.decide_share or DECIDE_SHARE))
    winner = search / "winner" / RUNTIMES[report["runtime"]]
    models = {name: load(path, threads=1, batch_size=batch_size) for name, path in (("teacher", teacher_dir),
                                                                                    ("student", winner))}
    return report, data, winner, models


def main() -> None:
    parser = search_arguments(__doc__)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    report, data, winner, models = search_models(args)
    metrics, regression = data.spec.metrics, data.spec.is_regression
    splits = {"dev": [row for rows in data.dev.values() for row in rows], "decide": data.decide}
    result = {"winner": report["winner"]["candidate"], "shipped": str(winner), "splits": {}}
    scored = {}
    for split, rows in splits.items():
        sources = np.array([str(row.source) for row in rows])
        references = np.array([row.label for row in rows])
        predictions = {name: outputs(model, rows, regression) for name, model in models.items()}
        scored[split] = (sources, references, predictions)
        per_source = {}
        for name in sorted(set(sources)):
            mask = sources == name
            teacher, student = (score(metrics, predictions[m][mask], references[mask]) for m in ("teacher", "student"))
            per_source[name] = {"rows": int(mask.sum()), "teacher": teacher, "student": student,
                                "kept": student / teacher if teacher > 0 else None}
        teacher, student = (score(metrics, predictions[m], references) for m in ("teacher", "student"))
        result["splits"][split] = {"rows": len(rows), "teacher": teacher, "student": student, "kept": student / teacher,
                                   "sources": per_source}
    dev_sources = scored["dev"][0]
    sources, references, predictions = scored["decide"]
    common = sorted(set(dev_sources) & set(sources))
    shares = {name: float(np.mean(dev_sources[np.isin(dev_sources, common)] == name)) for name in common}
    dev_sources, dev_references, dev_predictions = scored["dev"]
    on_shared = np.isin(dev_sources, common)
    teacher, student = (score(metrics, dev_predictions[m][on_shared], dev_references[on_shared])
                        for m in ("teacher", "student"))
    result["dev_on_shared_sources"] = {"rows": int(on_shared.sum()), "kept": student / teacher}
    indices = stratified_indices(sources, shares, args.resamples)
    resampled = {m: np.mean([resampled_metric(name, predictions[m], references, indices) for name in metrics], axis=0)
                 for m in ("teacher", "student")}
    kept = resampled["student"] / resampled["teacher"]
    result["decide_at_dev_mix"] = {"shares": shares, "kept": float(np.mean(kept)), "kept_sd": float(np.std(kept)),
                                   "resamples": args.resamples}
    result["command"] = (f"OMP_NUM_THREADS=1 python benchmarks/kept_by_source.py --search {args.search} "
                         f"--key {args.key}" + (f" --teacher {args.teacher}" if args.teacher else ""))
    save_result("kept_by_source", args.key, {**machine_info(), **result})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
