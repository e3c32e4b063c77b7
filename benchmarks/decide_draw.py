"""How lucky a search's rows that decide are, and whether dev and they agree beyond chance: a recorded
`kdbert compress` winner's kept share on the rows that pick, on the rows that decide, on dev, and over
random re-draws of them.

    OMP_NUM_THREADS=1 python benchmarks/decide_draw.py --search runs/trust/stsb-x4-importance \
        --key stsb/x4-trust-importance

Why: every search from one teacher decides on the same rows (the teacher's ``held_out.json`` records
them), so a deciding half that happens to favour the teacher, or the student, moves the kept share of
every search, every seed and every family alike, and no rerun shows it. The shipped graph
(``<search>/winner``, in the search's runtime) and the teacher (PyTorch) are scored once on every
held-out and dev row, one row at a time (a dynamic int8 graph's output for a row moves with the rows
batched beside it).

Two re-draws. **Dev against the rows that decide** (the fair one): neither model was chosen on either
set (the teacher's checkpoint and the student's checkpoints and promotions were chosen on the rows that
pick), so under "dev and the deciding rows read the same kept share" their rows are exchangeable: the
pooled rows are split ``--draws`` times at random into a dev-sized and a decide-sized part, and the
observed gap kept(dev) - kept(decide) is placed among the re-drawn gaps (two-sided p: the share of
re-drawn gaps at least as far from zero). **Random halves of all held-out rows** (recorded since the
first version): the kept share on ``--draws`` subsets of the deciding half's size drawn from the rows
that pick and decide together, and the deciding half's quantile among them. That one is *not* a fair
null: both models were chosen on the rows that pick, so subsets holding them read the student's (or,
where the teacher was picked there, the teacher's) chosen luck, and the deciding half's quantile
reads low by that selection as much as by its draw. Per half, each model's mean error (regression:
mean |prediction - gold|; classes: error rate). Records in ``benchmarks/results/decide_draw.json``
under ``--key``.
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


def random_orders(rows: int, draws: int, seed: int = 0) -> np.ndarray:
    """``draws`` random orders of ``rows`` row indices: (draws, rows)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(rows) for _ in range(draws)])


def permuted_gaps(metrics, predictions: dict, references: np.ndarray, first: int, orders: np.ndarray) -> np.ndarray:
    """kept(rows ``orders[b, :first]``) - kept(rows ``orders[b, first:]``) for each order b: (draws,)."""
    return (kept_over(orders[:, :first], metrics, predictions, references)
            - kept_over(orders[:, first:], metrics, predictions, references))


def two_sided_p(observed: float, null: np.ndarray) -> float:
    """The share of ``null`` at least as far from zero as ``observed``."""
    return float(np.mean(np.abs(null) >= abs(observed) - 1e-12))


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
    dev = [row for split in data.dev.values() for row in split]
    references = np.array([row.label for row in rows + dev])
    predictions = {name: outputs(model, rows + dev, regression) for name, model in models.items()}
    halves = {"pick": np.arange(len(data.held_out)), "decide": np.arange(len(data.held_out), len(rows)),
              "dev": np.arange(len(rows), len(rows) + len(dev))}
    result = {"winner": report["winner"]["candidate"], "shipped": str(winner), "rows": len(rows), "halves": {}}
    for half, index in halves.items():
        teacher, student = (score(metrics, predictions[m][index], references[index]) for m in ("teacher", "student"))
        result["halves"][half] = {
            "rows": len(index), "teacher": teacher, "student": student, "kept": student / teacher,
            "error": {m: mean_error(predictions[m][index], references[index], regression) for m in models}}
    held_out = {m: p[: len(rows)] for m, p in predictions.items()}
    kept = kept_over(random_subsets(len(rows), len(halves["decide"]), args.draws), metrics, held_out,
                     references[: len(rows)])
    decided = result["halves"]["decide"]["kept"]
    result["random_halves"] = {"draws": args.draws, "kept_mean": float(np.mean(kept)), "kept_sd": float(np.std(kept)),
                               "decide_quantile": float(np.mean(kept <= decided)), "pools_rows_that_pick": True}
    unchosen = np.concatenate([halves["dev"], halves["decide"]])
    pooled = {m: p[unchosen] for m, p in predictions.items()}
    gaps = permuted_gaps(metrics, pooled, references[unchosen], len(dev), random_orders(len(unchosen), args.draws))
    observed = result["halves"]["dev"]["kept"] - decided
    result["dev_against_decide"] = {"draws": args.draws, "gap": observed, "null_sd": float(np.std(gaps)),
                                    "p_two_sided": two_sided_p(observed, gaps)}
    result["command"] = (f"OMP_NUM_THREADS=1 python benchmarks/decide_draw.py --search {args.search} "
                         f"--key {args.key}" + (f" --teacher {args.teacher}" if args.teacher else ""))
    save_result("decide_draw", args.key, {**machine_info(), **result})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
