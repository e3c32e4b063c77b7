"""How lucky a search's rows that decide are: a recorded `kdbert compress` winner's kept share on the
rows that pick, on the rows that decide, and over random halves of all its held-out rows.

    OMP_NUM_THREADS=1 python benchmarks/decide_draw.py --search runs/trust/stsb-x4-importance \
        --key stsb/x4-trust-importance

Why: every search from one teacher decides on the same rows (the teacher's ``held_out.json`` records
them), so a deciding half that happens to favour the teacher, or the student, moves the kept share of
every search, every seed and every family alike, and no rerun shows it. Both halves are rows the
teacher never trained on, so any split of them into a picking and a deciding part is as valid a draw
as the recorded one. The shipped graph (``<search>/winner``, in the search's runtime) and the teacher
(PyTorch) are scored once on all held-out rows, one row at a time (a dynamic int8 graph's output for
a row moves with the rows batched beside it); the kept share is then read on ``--draws`` random
subsets of the deciding half's size (drawn without replacement), and the recorded deciding half's
place among them is its quantile. The picking half is not a fair draw for the student (its
checkpoint and promotions were chosen there), so it is reported beside, not pooled. Per half, each
model's mean error (regression: mean |prediction - gold|; classes: error rate) says which of the two
the draw favoured. Records in ``benchmarks/results/decide_draw.json`` under ``--key``.
"""

from __future__ import annotations

import json

import numpy as np
from common import machine_info, save_result
from kept_by_source import outputs, score, search_arguments, search_models

from kdbert.core.metrics import resampled_metric


def random_subsets(rows: int, size: int, draws: int, seed: int = 0) -> np.ndarray:
    """``draws`` subsets of ``size`` of ``rows`` row indices, each without replacement: (draws, size)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.choice(rows, size=size, replace=False) for _ in range(draws)])


def kept_over(indices: np.ndarray, metrics, predictions: dict, references: np.ndarray) -> np.ndarray:
    """The student's score over the teacher's on each row subset ``indices[b]``: (draws,)."""
    scores = {m: np.mean([resampled_metric(name, predictions[m], references, indices) for name in metrics], axis=0)
              for m in ("teacher", "student")}
    return scores["student"] / scores["teacher"]


def mean_error(predicted: np.ndarray, references: np.ndarray, regression: bool) -> float:
    """Mean |prediction - gold| (regression) or the error rate (classes)."""
    return float(np.mean(np.abs(predicted - references))) if regression else float(np.mean(predicted != references))


def main() -> None:
    parser = search_arguments(__doc__)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args()
    report, data, winner, models = search_models(args, batch_size=1)
    metrics, regression = data.spec.metrics, data.spec.is_regression
    rows = data.held_out + data.decide
    references = np.array([row.label for row in rows])
    predictions = {name: outputs(model, rows, regression) for name, model in models.items()}
    halves = {"pick": np.arange(len(data.held_out)), "decide": np.arange(len(data.held_out), len(rows))}
    result = {"winner": report["winner"]["candidate"], "shipped": str(winner), "rows": len(rows), "halves": {}}
    for half, index in halves.items():
        teacher, student = (score(metrics, predictions[m][index], references[index]) for m in ("teacher", "student"))
        result["halves"][half] = {
            "rows": len(index), "teacher": teacher, "student": student, "kept": student / teacher,
            "error": {m: mean_error(predictions[m][index], references[index], regression) for m in models}}
    kept = kept_over(random_subsets(len(rows), len(halves["decide"]), args.draws), metrics, predictions, references)
    decided = result["halves"]["decide"]["kept"]
    result["random_halves"] = {"draws": args.draws, "kept_mean": float(np.mean(kept)), "kept_sd": float(np.std(kept)),
                               "decide_quantile": float(np.mean(kept <= decided))}
    result["command"] = (f"OMP_NUM_THREADS=1 python benchmarks/decide_draw.py --search {args.search} "
                         f"--key {args.key}" + (f" --teacher {args.teacher}" if args.teacher else ""))
    save_result("decide_draw", args.key, {**machine_info(), **result})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
