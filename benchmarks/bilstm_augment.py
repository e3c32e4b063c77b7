"""Throughput of the distilled BiLSTM's augmentation (`kdbert augment --method bilstm`) at the paper's settings.

    python benchmarks/bilstm_augment.py [--task sst2] [--n N] [--workers 1]

Runs :func:`kdbert.cli.augment.augment_task_bilstm` on the task's GLUE training file (all rows, or
the first N; POS candidates always come from all rows) with p_mask = p_pos = 0.1, p_ng = 0.25,
n_iter = 20, n-gram mode "keep", into a temporary file, and records in
``results/bilstm_augment.json`` under ``TASK_N_wWORKERS``: examples/s overall, the time spent
tagging (every training text, once) and sampling + writing, the rows written, and the CPU
seconds of this process and its workers, a measure of work that background load barely
changes (wall-clock figures are only comparable at a similar load: the 1-minute load average
before and after is recorded too).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, NLTK_DATA

from kdbert.cli.augment import augment_task_bilstm
from kdbert.data.load import TaskOptions


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="sst2", help="GLUE task (default sst2)")
    parser.add_argument("--n", type=int, help="augment only the first N training rows (default: all)")
    parser.add_argument("--workers", type=int, default=1, help="POS-tagging processes")
    parser.add_argument("--glue-dir", default=GLUE_DIR)
    parser.add_argument("--nltk-data", default=NLTK_DATA)
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    cpu_before = cpu_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        result = augment_task_bilstm(TaskOptions(args.task, data_dir=args.glue_dir), str(Path(tmp) / "train_aug.tsv"),
                                     nltk_data=args.nltk_data, max_rows=args.n, num_workers=args.workers)
    cpu = cpu_seconds() - cpu_before
    row = {
        **machine_info(),
        "command": "python benchmarks/bilstm_augment.py " + " ".join(sys.argv[1:]),
        "settings": {"p_mask": 0.1, "p_pos": 0.1, "p_ng": 0.25, "n_iter": 20, "ngram_mode": "keep", "max_n": 5,
                     "seed": 42, "workers": args.workers},
        "input_rows": result["input_rows"],
        "output_rows": result["output_rows"],
        "rows_per_example": round(result["output_rows"] / result["input_rows"], 2),
        "tagging_seconds": result["tagging_seconds"],
        "sampling_and_writing_seconds": round(result["seconds"] - result["tagging_seconds"], 1),
        "seconds": result["seconds"],
        "examples_per_second": result["examples_per_second"],
        "cpu_seconds": round(cpu, 1),
        "examples_per_cpu_second": round(result["input_rows"] / cpu, 1),
        "load_average_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    key = f"{args.task}_{args.n or 'all'}_w{args.workers}"
    save_result("bilstm_augment", key, row)
    print(key, {k: row[k] for k in ("input_rows", "output_rows", "tagging_seconds", "sampling_and_writing_seconds",
                                    "examples_per_second", "examples_per_cpu_second",
                                    "load_average_1min_before_after")})


if __name__ == "__main__":
    main()
