"""How close the held-out rows and dev's rows come to the training rows, per source: is a task's
held-out split nearer to training than dev is (near-duplicates of the rows the teacher fit)?

    python benchmarks/near_duplicates.py --task stsb

Why: on STS-B the deciding rows read a lower kept share than dev in every collection both share,
and the teacher scores higher there (89.4 against 85.5 on dev). One explanation would be rows that
restate a training row (the same news event, the same video described again): a teacher that fit
those training rows would gain more on their near-duplicates than a small student. Each sentence's
nearness is its largest word-set Jaccard similarity to any training sentence (lower-cased words),
a row's the mean over its texts; reported per split and source as the mean and the shares of rows
at 0.5 and 0.7 or more. The held-out rows are drawn as ``kdbert finetune --held-out-fraction`` draws
them (seed 42), split in the rows that pick and those that decide. Records in
``benchmarks/results/near_duplicates.json``.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import numpy as np
import scipy.sparse as sparse
from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.data.held_out import DECIDE_SHARE
from kdbert.data.load import TaskOptions, load_task

CLOSE = (0.5, 0.7)  # the nearness thresholds reported


def word_sets(texts: list[str], vocabulary: dict[str, int]) -> sparse.csr_matrix:
    """One row per text, a 1 in the column of each distinct lower-cased word (``vocabulary`` grows)."""
    rows, cols = [], []
    for i, text in enumerate(texts):
        for word in set(re.findall(r"[a-z0-9]+", text.lower())):
            rows.append(i)
            cols.append(vocabulary.setdefault(word, len(vocabulary)))
    return sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), 1 << 20))


def nearness(rows, train: sparse.csr_matrix, vocabulary: dict[str, int]) -> np.ndarray:
    """Each row's mean over its texts of the largest Jaccard similarity to a training text:
    ``|a & b| / (|a| + |b| - |a & b|)``."""
    texts = [text for row in rows for text in row.texts]
    sets = word_sets(texts, vocabulary)
    shared = (sets @ train.T).toarray()
    sizes, train_sizes = np.asarray(sets.sum(1)).ravel(), np.asarray(train.sum(1)).ravel()
    jaccard = shared / np.maximum(sizes[:, None] + train_sizes[None, :] - shared, 1.0)
    return jaccard.max(axis=1).reshape(len(rows), -1).mean(axis=1)


def summary(values: np.ndarray) -> dict:
    return {"rows": len(values), "mean": round(float(values.mean()), 4),
            **{f"share_at_{t:g}": round(float((values >= t).mean()), 4) for t in CLOSE}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="stsb")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--held-out-fraction", type=float, default=0.1)
    args = parser.parse_args()
    data = load_task(TaskOptions(task=args.task, data_dir=args.data_dir, held_out_fraction=args.held_out_fraction,
                                 decide_share=DECIDE_SHARE))
    vocabulary: dict[str, int] = {}
    train = word_sets([text for row in data.train for text in row.texts], vocabulary)
    splits = {"pick": data.held_out, "decide": data.decide, "dev": [row for rows in data.dev.values() for row in rows]}
    result = {}
    for name, rows in splits.items():
        values = nearness(rows, train, vocabulary)
        by_source = defaultdict(list)
        for row, value in zip(rows, values):
            by_source[row.source or "-"].append(value)
        result[name] = {"all": summary(values),
                        "by_source": {source: summary(np.array(v)) for source, v in sorted(by_source.items())}}
        print(f"{name}: {len(rows)} rows, mean {values.mean():.3f}; "
              + ", ".join(f"{s} {np.mean(v):.3f} ({100 * np.mean(np.array(v) >= CLOSE[0]):.0f}% >= {CLOSE[0]})"
                          for s, v in sorted(by_source.items())))
    save_result("near_duplicates", args.task, {**machine_info(), "held_out_rule": data.held_out_rule, **result,
                                               "command": f"python benchmarks/near_duplicates.py --task {args.task}"})


if __name__ == "__main__":
    main()
