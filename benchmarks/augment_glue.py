"""Augmented training files (TinyBERT data augmentation) for the distillation benchmarks.

    python benchmarks/augment_glue.py --tasks rte mrpc                 # first rows (CPU budget)
    python benchmarks/augment_glue.py --tasks rte --rows all --batch-tokens 65536   # whole set (GPU)

Runs ``kdbert augment`` (p 0.4, N_a 20, K 15, seed 42, float32) with the MLM fitted by
``benchmarks/mlm_head.py --unfreeze 2`` (``runs/mlm-k2``) and GloVe 6B 50d (its first 100,000
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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import load_results, machine_info, save_result  # noqa: E402
from paths import GLUE_DIR, WORD_VECTORS, run_folder  # noqa: E402

from kdbert.cli.augment import augment_task  # noqa: E402
from kdbert.augment.tinybert import BATCH_TOKENS  # noqa: E402
from kdbert.data.load import TaskOptions  # noqa: E402

ROWS = {"cola": 4000, "sst2": 4000, "mrpc": 1000, "stsb": 2000, "rte": 1000}


def aug_file(runs_dir: str, task: str, rows: str) -> Path:
    """Where ``--rows cpu|all`` writes the augmented file of ``task``."""
    return Path(runs_dir) / (f"aug-{task}" if rows == "cpu" else f"aug-{task}-all") / "train_aug.tsv"


def result_key(task: str, rows: str) -> str:
    return task if rows == "cpu" else f"{task}/all"


def build(task: str, rows: str = "cpu", data_dir: str = GLUE_DIR, mlm: str = run_folder("mlm-k2"),
          runs_dir: str = run_folder(), word_vectors: str = WORD_VECTORS, num_workers: int = 1, batch_size: int = 64,
          batch_tokens: int = BATCH_TOKENS, device: str | None = None, record: bool = True) -> dict:
    """Augment ``task`` (resuming an interrupted file); returns the result, recorded unless
    ``record`` is false (a file rebuilt as the input of a rerun)."""
    output = aug_file(runs_dir, task, rows)
    output.parent.mkdir(parents=True, exist_ok=True)
    report = augment_task(TaskOptions(task, data_dir=data_dir), mlm, word_vectors, str(output),
                          max_rows=ROWS[task] if rows == "cpu" else None, num_workers=num_workers, seed=42,
                          batch_size=batch_size, batch_tokens=batch_tokens, device=device)
    command = f"python benchmarks/augment_glue.py --tasks {task}" + ("" if rows == "cpu" else " --rows all")
    if batch_size != 64 or batch_tokens != BATCH_TOKENS:
        command += f" --batch-size {batch_size} --batch-tokens {batch_tokens}"
    result = {"task": task, "rows": rows, **report, "mlm": mlm, "word_vectors": word_vectors,
              "batch_size": batch_size, "batch_tokens": batch_tokens, "command": command, **machine_info()}
    if record:
        save_result("augment_glue", result_key(task, rows), result)
    return result


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
        output, key = aug_file(args.runs_dir, task, args.rows), result_key(task, args.rows)
        if key in done and output.is_file():
            print(f"{key}: done already ({done[key]['output_rows']} rows in {output})")
            continue
        r = build(task, args.rows, args.data_dir, args.mlm, args.runs_dir, args.word_vectors, args.num_workers,
                  args.batch_size, args.batch_tokens, args.device)
        print(f"{key}: {r['input_rows']} rows -> {r['output_rows']} in {r['seconds']:.0f}s on {r['device']}")


if __name__ == "__main__":
    main()
