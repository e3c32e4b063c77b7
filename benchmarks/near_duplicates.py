"""How close the held-out rows and dev's rows come to the training rows, per source: is a task's
held-out split nearer to training than dev is (near-duplicates of the rows the teacher fit)?

    python benchmarks/near_duplicates.py --task stsb

Why: on STS-B the deciding rows read a lower kept share than dev in every collection both share,
and the teacher scores higher there (89.4 against 85.5 on dev). One explanation would be rows that
restate a training row (the same news event, the same video described again): a teacher that fit
those training rows would gain more on their near-duplicates than a small student. Each sentence's
nearness is its largest word-set Jaccard similarity to any training sentence (lower-cased words),
a row's the mean over its texts (:mod:`kdbert.data.nearness`); reported per split and source as the
mean and the shares of rows at 0.5 and 0.7 or more, beside the gold labels' mean and standard
deviation. The held-out rows are drawn as ``kdbert finetune --held-out-fraction`` draws them (its
rule for the task, :func:`kdbert.data.held_out.held_out_indices`), or with ``--uniform`` by a uniform
draw (the rule before 2026-12-02 for CoLA, MRPC and RTE), split in the rows that pick and those that
decide. Records in ``benchmarks/results/near_duplicates.json`` under the task (``<task>-uniform`` with
``--uniform``).

    python benchmarks/near_duplicates.py --task cola --uniform
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.data.held_out import DECIDE_SHARE, move_held_out, split_decide, uniform_indices
from kdbert.data.load import TaskOptions, load_task
from kdbert.data.nearness import TrainingTexts

CLOSE = (0.5, 0.7)  # the nearness thresholds reported


def summary(values: np.ndarray, labels: np.ndarray) -> dict:
    """Rows, mean nearness, the shares at each of :data:`CLOSE`, and the gold labels' mean and standard
    deviation (a held-out set labelled unlike dev would move a kept share as much as nearer rows would)."""
    return {"rows": len(values), "mean": round(float(values.mean()), 4),
            **{f"share_at_{t:g}": round(float((values >= t).mean()), 4) for t in CLOSE},
            "label_mean": round(float(labels.mean()), 4), "label_sd": round(float(labels.std()), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="stsb")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--held-out-fraction", type=float, default=0.1)
    parser.add_argument("--uniform", action="store_true", help="hold out a uniform draw, whatever the task's rule")
    args = parser.parse_args()
    if args.uniform:
        data = load_task(TaskOptions(task=args.task, data_dir=args.data_dir))
        count = max(1, round(args.held_out_fraction * len(data.train)))
        data = split_decide(move_held_out(data, uniform_indices(len(data.train), count)), DECIDE_SHARE)
        data.held_out_rule = "uniform"
    else:
        data = load_task(TaskOptions(task=args.task, data_dir=args.data_dir, held_out_fraction=args.held_out_fraction,
                                     decide_share=DECIDE_SHARE))
    train = TrainingTexts(data.train)
    splits = {"pick": data.held_out, "decide": data.decide, "dev": [row for rows in data.dev.values() for row in rows]}
    result = {}
    for name, rows in splits.items():
        values, labels = train.nearness(rows), np.array([float(row.label) for row in rows])
        by_source = defaultdict(list)
        for row, value in zip(rows, values):
            by_source[row.source or "-"].append((value, float(row.label)))
        result[name] = {"all": summary(values, labels),
                        "by_source": {source: summary(*np.array(v).T) for source, v in sorted(by_source.items())}}
        print(f"{name}: {len(rows)} rows, mean {values.mean():.3f}; "
              + ", ".join(f"{s} {r['mean']:.3f} ({100 * r[f'share_at_{CLOSE[0]:g}']:.0f}% >= {CLOSE[0]}; "
                          f"labels {r['label_mean']:.2f} ± {r['label_sd']:.2f})"
                          for s, r in result[name]["by_source"].items()))
    flag = " --uniform" if args.uniform else ""
    save_result("near_duplicates", args.task + ("-uniform" if args.uniform else ""),
                {**machine_info(), "held_out_rule": data.held_out_rule, **result,
                 "command": f"python benchmarks/near_duplicates.py --task {args.task}{flag}"})


if __name__ == "__main__":
    main()
