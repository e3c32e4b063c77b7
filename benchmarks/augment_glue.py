"""Augmented training files (TinyBERT data augmentation) for the distillation benchmarks.

    python benchmarks/augment_glue.py --tasks rte mrpc                 # first rows (CPU budget)
    python benchmarks/augment_glue.py --tasks rte --rows all --batch-tokens 65536   # whole set (GPU)

Runs ``kdbert augment`` (p 0.4, N_a 20, K 15, seed 42, float32) with the MLM fitted by
``benchmarks/bench_mlm_head.py --unfreeze 2`` (``runs/mlm-k2``) and GloVe 6B 50d (its first 100,000
words, all that ``kdbert augment`` reads), writing the file that ``benchmarks/distill_glue.py``
reads for the ``*-aug`` variants:

- ``--rows cpu``: the first ``ROWS[task]`` rows of the training set into
  ``runs/aug-<task>/train_aug.tsv`` (result key ``<task>``). These are the files of the CPU
  rows recorded on 2026-11-22; they cover 27-47% of the rows that the runs without
  augmentation used, so they do not make a like-for-like comparison.
- ``--rows all``: the whole training set into ``runs/aug-<task>-all/train_aug.tsv`` (key
  ``<task>/all``), the same rows as the runs without augmentation. Hours per task on a CPU
  (RTE: 1000 rows took 2.5 h on one core); minutes on a GPU.

Results: ``benchmarks/results/augment_glue.json`` (or ``$KDBERT_RESULTS_DIR``).
"""

from __future__ import annotations

import argparse

from common import load_results
from glue_inputs import ROWS, aug_file, augment_key, build_augmented
from paths import GLUE_DIR, WORD_VECTORS, run_folder

from kdbert.augment.tinybert import BATCH_TOKENS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--rows", choices=["cpu", "all"], default="cpu",
                        help="cpu: the first ROWS[task] rows; all: the whole training set")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--mlm", default=run_folder("mlm-k2"))
    parser.add_argument("--runs-dir", default=run_folder())
    parser.add_argument("--word-vectors", default=WORD_VECTORS)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="mask queries per MLM call")
    parser.add_argument("--batch-tokens", type=int, default=BATCH_TOKENS, help="padded tokens per MLM call")
    parser.add_argument("--device", help="where the MLM runs (default: cuda when available)")
    args = parser.parse_args()
    done = load_results("augment_glue")
    for task in args.tasks:
        output, key = aug_file(args.runs_dir, task, args.rows), augment_key(task, args.rows)
        if key in done and output.is_file():
            print(f"{key}: done already ({done[key]['output_rows']} rows in {output})")
            continue
        r = build_augmented(task, args.rows, args.data_dir, args.mlm, args.runs_dir, args.word_vectors, args.num_workers,
                  args.batch_size, args.batch_tokens, args.device)
        print(f"{key}: {r['input_rows']} rows -> {r['output_rows']} in {r['seconds']:.0f}s on {r['device']}")


if __name__ == "__main__":
    main()
