"""IMDb on a CPU budget: which truncation wins for the teacher, and how students keep its score.

    python benchmarks/imdb.py                    # every step not recorded yet, in order
    python benchmarks/imdb.py --steps teacher-head teacher-tail
    python benchmarks/imdb.py --full-test        # then score the recorded models on all 25,000 test rows
    python benchmarks/imdb.py --full-test --steps teacher-tail kd-3L   # only these, in this order
    python benchmarks/imdb.py --build-missing --steps teacher-tail     # a recorded model whose folder is gone

Budget (stated beside every figure): the first ``TRAIN_ROWS`` rows of the official training split
(IMDb's rows come in a fixed shuffled order, so a sample of both classes), ``MAX_SEQ_LEN`` tokens,
scored on the first ``DEV_ROWS`` test rows during training (dev picks the checkpoint, as the papers);
``--full-test`` scores each recorded model on the whole test split once more (under bf16 autocast when
``$KDBERT_MIXED_PRECISION`` is bf16). Each step is a run
folder under ``runs/imdb/<step>`` (resumable) and a record in ``benchmarks/results/imdb.json``;
students distil the teacher of the truncation that scored best of head, tail and head+tail.
``teacher-windows`` and ``kd-3L-windows`` read every review whole instead, in windows of
``MAX_SEQ_LEN`` tokens sharing ``DOC_STRIDE``, each window a training row, a review scored by the
mean of its windows' logits (the KD student distils that teacher on the same windows). Precision
follows ``$KDBERT_MIXED_PRECISION`` (bf16 where recorded so).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from common import add_build_missing_option, load_results, machine_info, rebuild_missing_steps, save_result
from paths import IMDB_DIR, WORD_VECTORS, run_folder

from kdbert.data.load import TaskOptions, load_task
from kdbert.families.registry import family_of_folder
from kdbert.methods.finetune import FinetuneConfig, finetune
from kdbert.methods.front import distill_task

BF16 = os.environ.get("KDBERT_MIXED_PRECISION") == "bf16"  # the full test scored as trained
TRAIN_ROWS, DEV_ROWS, MAX_SEQ_LEN, UNLABELLED_ROWS, DOC_STRIDE = 1000, 1000, 256, 2000, 128
TRUNCATIONS = ("head", "tail", "head+tail")  # the students distil the best of these
STUDENTS = {  # step -> distillation options (the teacher and, but for windows, the truncation are added)
    "kd-3L": {"method": "kd", "student_layers": "3", "epochs": 3},
    "kd-3L-unlabelled": {"method": "kd", "student_layers": "3", "epochs": 3, "unlabelled": "imdb-unsup"},
    "tinybert-3L": {"method": "tinybert", "student_layers": "3", "intermediate_epochs": 2, "epochs": 2,
                    "layer_map": "uniform"},  # as recorded (the default for copied layers is now those layers)
    "tinybert-3L-copied": {"method": "tinybert", "student_layers": "3", "intermediate_epochs": 2, "epochs": 2,
                           "layer_map": "explicit", "teacher_layers": "1,2,3"},  # each layer to its copy's output
    "tinybert-3L-copied-last": {"method": "tinybert", "student_layers": "3", "intermediate_epochs": 2, "epochs": 2,
                                "layer_map": "explicit", "teacher_layers": "1,2,6"},  # the last to the teacher's last
    "bilstm": {"method": "bilstm", "word_vectors": WORD_VECTORS, "epochs": 10},
    "kd-3L-windows": {"method": "kd", "student_layers": "3", "epochs": 3, "truncation": "windows"},
}
STEPS = tuple(f"teacher-{t}" for t in (*TRUNCATIONS, "windows")) + tuple(STUDENTS)


def task_options(truncation: str, unlabelled: str | None = None, dev_rows: int | None = DEV_ROWS) -> TaskOptions:
    return TaskOptions("imdb", data_dir=IMDB_DIR, truncation=truncation, max_dev_examples=dev_rows,
                       unlabelled=unlabelled, max_unlabelled=UNLABELLED_ROWS if unlabelled else None,
                       doc_stride=DOC_STRIDE)


def best_teacher(results: dict) -> tuple[str, str]:
    """The recorded teacher of the best truncation: (truncation, folder)."""
    teachers = {key: r for key, r in results.items() if key.startswith("teacher-") and r["truncation"] in TRUNCATIONS}
    if len(teachers) < len(TRUNCATIONS):
        raise SystemExit("students need the three teachers first: run the teacher-* steps")
    key = max(teachers, key=lambda k: teachers[k]["metrics"]["score"])
    return teachers[key]["truncation"], teachers[key]["output_dir"]


def run_step(step: str, runs: Path) -> dict:
    out = runs / step
    resume = (out / "run_config.json").exists()
    if step.startswith("teacher-"):
        truncation = step.removeprefix("teacher-")
        config = FinetuneConfig(output_dir=str(out), epochs=2, learning_rate=1e-4, batch_size=32,
                                max_seq_len=MAX_SEQ_LEN, max_train_examples=TRAIN_ROWS, no_progress=True)
        report = finetune(task_options(truncation), config, resume=resume)
        return {"truncation": truncation, "metrics": report["best_metrics"], "train_seconds": report["train_seconds"],
                "train_windows": report.get("train_windows"),
                "options": {"epochs": 2, "learning_rate": 1e-4, "batch_size": 32}, "output_dir": str(out)}
    options = {**STUDENTS[step], "max_seq_len": MAX_SEQ_LEN, "max_train_examples": TRAIN_ROWS, "no_progress": True}
    unlabelled = options.pop("unlabelled", None)
    if options.pop("truncation", None) == "windows":
        truncation, teacher = "windows", load_results("imdb")["teacher-windows"]["output_dir"]
    else:
        truncation, teacher = best_teacher(load_results("imdb"))
    options["teacher"] = teacher
    report = distill_task(task_options(truncation, unlabelled), options, str(out), resume=resume)
    return {"truncation": truncation, "teacher": teacher, "metrics": report["dev_metrics"],
            "train_rows": report["train_rows"], "train_windows": report.get("train_windows"),
            "options": {k: v for k, v in options.items() if k != "no_progress"},
            "unlabelled": report.get("unlabelled"), "wall_seconds": report["wall_seconds"], "output_dir": str(out)}


def full_test(results: dict, steps: list[str] | None = None) -> None:
    """Score the recorded models of ``steps`` (default: all, in :data:`STEPS` order) on all 25,000
    test rows (once; recorded under ``full_test``)."""
    for key in steps or STEPS:
        record = results.get(key)
        if record is None or "full_test" in record:
            continue
        data = load_task(task_options(record["truncation"], dev_rows=None))
        family = family_of_folder(record["output_dir"])
        model, encoder = family.load(Path(record["output_dir"]), data.spec)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            metrics = family.evaluator(data, encoder, MAX_SEQ_LEN, 64)(model)
        save_result("imdb", key, {**record, "full_test": {**metrics, "precision": "bf16" if BF16 else "float32"}})
        print(f"{key}: full test {metrics}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", nargs="*", choices=STEPS, help="steps to run (default: every one not recorded)")
    parser.add_argument("--runs-dir", default=run_folder("imdb"))
    parser.add_argument("--full-test", action="store_true", help="score recorded models on the whole test split")
    add_build_missing_option(parser, before="--full-test")
    args = parser.parse_args()
    if args.build_missing:
        rebuild_missing_steps("imdb", args.steps or STEPS, lambda step: run_step(step, Path(args.runs_dir)))
        return
    if args.full_test:
        full_test(load_results("imdb"), args.steps)
        return
    for step in args.steps or STEPS:
        if step in load_results("imdb") and not args.steps:
            continue
        result = run_step(step, Path(args.runs_dir))
        save_result("imdb", step, {**result, "budget": {"train_rows": TRAIN_ROWS, "test_rows_scored": DEV_ROWS,
                                                        "max_seq_len": MAX_SEQ_LEN},
                                   "command": f"python benchmarks/imdb.py --steps {step}", **machine_info()})
        print(f"{step}: {result['metrics']}")


if __name__ == "__main__":
    main()
