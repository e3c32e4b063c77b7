"""Augmented training files (TinyBERT data augmentation) for the distillation benchmarks.

    python benchmarks/augment_glue.py --tasks rte mrpc

Runs ``kdbert augment`` (p 0.4, N_a 20, K 15, seed 42) on the first rows of each task's
training set with the MLM fitted by ``benchmarks/mlm_head.py --unfreeze 2`` (``runs/mlm-k2``)
and GloVe 6B 50d, writing ``runs/aug-<task>/train_aug.tsv``, which
``benchmarks/distill_glue.py`` reads for the ``*-aug`` variants. CPU budget: a subset of rows
per task (``ROWS``; the CPU-budget distillation draws at most 2 epochs x 4000 examples from
the file, so more is not used). Results: ``benchmarks/results/augment_glue.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import load_results, machine_info, save_result  # noqa: E402

from kdbert.augment import augment_task  # noqa: E402
from kdbert.data.load import TaskOptions  # noqa: E402

ROWS = {"cola": 4000, "sst2": 4000, "mrpc": 1000, "stsb": 2000, "rte": 1000}
WORD_VECTORS = "../shared/data/glove/glove.6B.50d.txt.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--data-dir", default="../shared/data/glue_data")
    parser.add_argument("--mlm", default="runs/mlm-k2")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--num-workers", type=int, default=1)
    args = parser.parse_args()
    done = load_results("augment_glue")
    for task in args.tasks:
        output = Path(args.runs_dir) / f"aug-{task}" / "train_aug.tsv"
        if task in done and output.is_file():
            print(f"{task}: done already ({done[task]['output_rows']} rows in {output})")
            continue
        output.parent.mkdir(parents=True, exist_ok=True)
        report = augment_task(TaskOptions(task, data_dir=args.data_dir), args.mlm, WORD_VECTORS, str(output),
                              max_rows=ROWS[task], num_workers=args.num_workers, seed=42)
        result = {"task": task, **report, "mlm": args.mlm, "word_vectors": WORD_VECTORS,
                  "command": f"python benchmarks/augment_glue.py --tasks {task}", **machine_info()}
        save_result("augment_glue", task, result)
        print(f"{task}: {report['input_rows']} rows -> {report['output_rows']} in {report['seconds']:.0f}s")


if __name__ == "__main__":
    main()
