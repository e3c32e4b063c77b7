"""Run `kdbert compress` on a GLUE task with the packaged teacher fine-tuned on it, and record its report.

    OMP_NUM_THREADS=1 python benchmarks/bench_compress.py --task sst2 --target-speedup 4 \
        --candidates bert-1x128,bert-1x256,... --threads 1 --budget-minutes 25

A rerun with the same output folder continues the search (timings and finished runs are reused).
Candidates train in float32, as every benchmark script does unless ``$KDBERT_MIXED_PRECISION`` is
set; ``KDBERT_MIXED_PRECISION=bf16`` gives them what ``kdbert compress`` picks itself on a CPU with
native bf16 (the record says which: ``precision``).
Results: ``benchmarks/results/compress.json`` under ``<task>/x<target>`` (``--key-suffix`` appends to
it, so that a search with other options is recorded beside the first).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import FLOAT32_PINNED, machine_info, save_result
from paths import GLUE_DIR, NLTK_DATA, WORD_VECTORS, run_folder

from kdbert.compress.pipeline import CompressConfig, compress
from kdbert.core.hardware import resolve_precision
from kdbert.data.load import TaskOptions


RECORDED = ("task", "runtime", "target", "held_out_rows", "decide_rows", "held_out", "teacher_saw_held_out_rows",
            "speed", "augmentation", "search", "winner",
            "teacher_scores", "shipped", "seconds_per_candidate", "speedup_breakdown", "starts", "general_students",
            "disk", "labelling")


def recorded_parts(report: dict) -> dict:
    """The parts of a compress report that ``compress.json`` records (what BENCHMARKS.md renders)."""
    return {key: report.get(key) for key in RECORDED}


def held_out_fraction(teacher: str) -> float:
    """The share of training rows the teacher was fine-tuned without (``kdbert finetune
    --held-out-fraction``); 0 when it saw them all, so that the search's held-out rows flatter it."""
    config = Path(teacher) / "run_config.json"
    return json.loads(config.read_text()).get("held_out_fraction", 0.0) if config.is_file() else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--teacher", default=run_folder("teacher-{task}"))
    parser.add_argument("--target-speedup", type=float, default=4.0)
    parser.add_argument("--candidates", help="comma-separated candidate names (default: every family's)")
    parser.add_argument("--threads", type=int, default=1, help="threads the runs train on, and the timings run at")
    parser.add_argument("--timing-threads", type=int, help="threads the timings run at instead (compress --timing-threads)")
    parser.add_argument("--budget-minutes", type=float, default=25.0)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--first-steps", type=int, default=300)
    parser.add_argument("--word-vectors", default=WORD_VECTORS, help="the BiLSTM candidates' word vectors ('' for none)")
    parser.add_argument("--intermediate-share", type=float, default=0.0)
    parser.add_argument("--pooling", default=CompressConfig.pooling, choices=("auto", "teacher", "pair"),
                        help="what the BERT-style candidates' heads read (compress --pooling)")
    parser.add_argument("--selection", default=CompressConfig.selection, choices=("even", "ends", "bottom", "importance"),
                        help="which of the teacher's units the cut candidates keep (compress --selection)")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=32, help="the token-level candidates' batch size")
    parser.add_argument("--max-train-examples", type=int, help="distil on the first N training rows only")
    parser.add_argument("--max-epochs", type=float, help="the most passes over their rows a candidate cut from the "
                        "teacher trains (compress --max-epochs)")
    parser.add_argument("--augment", help="candidate kinds that also compete augmented (e.g. bilstm, or all)")
    parser.add_argument("--nltk-data", default=NLTK_DATA, help="NLTK's POS tagger, for --augment")
    parser.add_argument("--workers", type=int, default=1, help="candidates distilled at once (one process each)")
    parser.add_argument("--transfer-text", nargs="+", help="unlabelled text the -aug variants also distil on")
    parser.add_argument("--unlabelled", help="more training rows without labels, labelled by the teacher (compress "
                        "--unlabelled: a .jsonl file with the task's text column(s), or imdb-unsup)")
    parser.add_argument("--unlabelled-from-epoch", type=int, default=0,
                        help="the epoch from which the --unlabelled rows join the labelled ones (compress "
                        "--unlabelled-from-epoch)")
    parser.add_argument("--kd-labels", default=CompressConfig.kd_labels, choices=("beside", "export"),
                        help="where the KD candidates get the teacher's logits (compress --kd-labels)")
    parser.add_argument("--students-store", help="where general students are looked for (default: compress's)")
    parser.add_argument("--no-general-students", action="store_true", help="start from the teacher's weights only")
    parser.add_argument("--key-suffix", default="", help="appended to the results key <task>/x<target>")
    parser.add_argument("--output-dir", default=run_folder("compress-{task}-x{target:g}"))
    args = parser.parse_args()
    teacher = args.teacher.format(task=args.task)
    out = args.output_dir.format(task=args.task, target=args.target_speedup)
    config = CompressConfig(teacher=teacher, target_speedup=args.target_speedup, candidates=args.candidates,
                            threads=args.threads, timing_threads=args.timing_threads,
                            budget_minutes=args.budget_minutes, rounds=args.rounds,
                            first_steps=args.first_steps, word_vectors=args.word_vectors or None,
                            intermediate_share=args.intermediate_share, learning_rate=args.learning_rate,
                            batch_size=args.batch_size, workers=args.workers,
                            augment=args.augment, nltk_data=args.nltk_data if args.augment else None,
                            transfer_text=args.transfer_text, students_store=args.students_store,
                            no_general_students=args.no_general_students, pooling=args.pooling,
                            selection=args.selection, kd_labels=args.kd_labels,
                            max_train_examples=args.max_train_examples, max_epochs=args.max_epochs)
    started = time.time()
    report = compress(TaskOptions(args.task, data_dir=args.data_dir, unlabelled=args.unlabelled,
                                    unlabelled_from_epoch=args.unlabelled_from_epoch), config, out)
    precision = resolve_precision("auto")[0]  # what the candidates trained in
    command = ("" if FLOAT32_PINNED else f"KDBERT_MIXED_PRECISION={precision} ") + (
               f"OMP_NUM_THREADS=1 python benchmarks/bench_compress.py --task {args.task} --target-speedup "
               f"{args.target_speedup:g} --threads {args.threads}"
               + (f" --timing-threads {args.timing_threads}" if args.timing_threads else "")
               + f" --budget-minutes {args.budget_minutes:g} "
               f"--rounds {args.rounds} --first-steps {args.first_steps} --intermediate-share "
               f"{args.intermediate_share:g}"
               + (f" --word-vectors {args.word_vectors or repr('')}" if args.word_vectors != WORD_VECTORS else "")
               + (f" --candidates {args.candidates}" if args.candidates else "")
               + (f" --learning-rate {args.learning_rate:g}" if args.learning_rate != 1e-4 else "")
               + (f" --batch-size {args.batch_size}" if args.batch_size != 32 else "")
               + (f" --max-train-examples {args.max_train_examples}" if args.max_train_examples else "")
               + (f" --max-epochs {args.max_epochs:g}" if args.max_epochs else "")
               + (f" --workers {args.workers}" if args.workers != 1 else "")
               + (f" --augment {args.augment}" if args.augment else "")
               + (f" --transfer-text {' '.join(args.transfer_text)}" if args.transfer_text else "")
               + (f" --unlabelled {args.unlabelled}" if args.unlabelled else "")
               + (f" --unlabelled-from-epoch {args.unlabelled_from_epoch}" if args.unlabelled_from_epoch else "")
               + (f" --kd-labels {args.kd_labels}" if args.kd_labels != CompressConfig.kd_labels else "")
               + (f" --students-store {args.students_store}" if args.students_store else "")
               + (" --no-general-students" if args.no_general_students else "")
               + (f" --pooling {args.pooling}" if args.pooling != CompressConfig.pooling else "")
               + f" --selection {args.selection}"
               + (f" --teacher {args.teacher}" if args.teacher != run_folder("teacher-{task}") else "")
               + (f" --key-suffix={args.key_suffix} --output-dir {out}" if args.key_suffix else ""))
    save_result("compress", f"{args.task}/x{args.target_speedup:g}{args.key_suffix}",
                {**machine_info(), "command": command, "seconds_this_call": round(time.time() - started, 1),
                 "teacher_held_out_fraction": held_out_fraction(teacher), "precision": precision,
                 **recorded_parts(report)})
    print(open(f"{out}/compress_report.md").read())


if __name__ == "__main__":
    main()
