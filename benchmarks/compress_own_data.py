"""`kdbert compress` on a user's own CSV, run the way a user would: two CLI commands.

    OMP_NUM_THREADS=1 python benchmarks/compress_own_data.py --budget-minutes 15

The own data: IMDb movie reviews written as two CSV files with the columns ``review`` and
``sentiment`` (``pos`` / ``neg``), the first ``--train-rows`` reviews of the official training split
and the first ``--dev-rows`` of the test split (both in :func:`kdbert.data.imdb.shuffled` order), under
``runs/own-data/``. Then, with every default a user gets (64 tokens, head truncation):

    kdbert finetune --task reviews_train.csv --dev-file reviews_dev.csv --text-columns review \\
        --label-column sentiment --held-out-fraction 0.1 --output-dir teacher-held-out
    kdbert compress --task reviews_train.csv --dev-file reviews_dev.csv --text-columns review \\
        --label-column sentiment --teacher teacher-held-out --target-speedup 4 --budget-minutes 15 ...

The teacher is fine-tuned without the tenth of training rows the search holds out to pick students
on, as the README advises (``--teacher-held-out-fraction 0`` fine-tunes it on every row instead).

Each step is skipped when its output exists (the compress command itself resumes). Results:
``benchmarks/results/compress.json`` under ``reviews-csv/x<target>``.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_compress import recorded_parts
from common import machine_info, save_result
from paths import DATA_ROOT, WORD_VECTORS, run_folder

from kdbert.data.imdb import load_imdb

COLUMNS = ["--text-columns", "review", "--label-column", "sentiment"]


def write_csv(rows, path: Path) -> None:
    """``rows`` (IMDb examples) as a CSV of review text and sentiment name, written atomically."""
    partial = path.with_suffix(".partial")
    with open(partial, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["review", "sentiment"])
        writer.writerows([example.texts[0], "pos" if example.label == 1 else "neg"] for example in rows)
    partial.replace(path)


def kdbert(*arguments: str) -> str:
    """Run one ``kdbert`` command as a user would; returns it as typed (paths relative to the repo)."""
    subprocess.run([sys.executable, "-m", "kdbert.cli", *arguments], check=True)
    return "kdbert " + " ".join(arguments)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-rows", type=int, default=4000)
    parser.add_argument("--dev-rows", type=int, default=1000)
    parser.add_argument("--target-speedup", type=float, default=4.0)
    parser.add_argument("--budget-minutes", type=float, default=15.0)
    parser.add_argument("--threads", type=int, default=1, help="threads of the timed runtime")
    parser.add_argument("--teacher-held-out-fraction", type=float, default=0.1,
                        help="fine-tune the teacher without the rows the search picks on (0: on every row)")
    args = parser.parse_args()
    folder = Path(run_folder("own-data"))
    folder.mkdir(parents=True, exist_ok=True)
    train, dev = folder / "reviews_train.csv", folder / "reviews_dev.csv"
    if not (train.is_file() and dev.is_file()):
        data = load_imdb(DATA_ROOT / "imdb")
        write_csv(data.train[: args.train_rows], train)
        write_csv(data.dev["test"][: args.dev_rows], dev)
    task = ["--task", str(train), "--dev-file", str(dev), *COLUMNS]
    held_out = args.teacher_held_out_fraction
    suffix = "-held-out" if held_out else ""
    teacher, search = folder / f"teacher{suffix}", folder / f"compress-x{args.target_speedup:g}{suffix}"
    started = time.time()
    commands = []
    if not (teacher / "train_report.json").is_file():
        commands.append(kdbert("finetune", *task, *(["--held-out-fraction", f"{held_out:g}"] if held_out else []),
                               "--output-dir", str(teacher), "--no-progress"))
    commands.append(kdbert("compress", *task, "--teacher", str(teacher), "--target-speedup",
                           f"{args.target_speedup:g}", "--budget-minutes", f"{args.budget_minutes:g}", "--threads",
                           str(args.threads), "--word-vectors", WORD_VECTORS, "--output-dir", str(search)))
    report = json.loads((search / "compress_report.json").read_text())
    command = (f"OMP_NUM_THREADS=1 python benchmarks/compress_own_data.py --train-rows {args.train_rows} --dev-rows "
               f"{args.dev_rows} --target-speedup {args.target_speedup:g} --budget-minutes {args.budget_minutes:g} "
               f"--threads {args.threads} --teacher-held-out-fraction {held_out:g}")
    save_result("compress", f"reviews-csv/x{args.target_speedup:g}",
                {**machine_info(), "command": command, "user_commands": commands,
                 "seconds_this_call": round(time.time() - started, 1), "teacher_held_out_fraction": held_out,
                 **recorded_parts(report)})
    print((search / "compress_report.md").read_text())


if __name__ == "__main__":
    main()
