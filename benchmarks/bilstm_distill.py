"""Distilled BiLSTM on GLUE dev: labels only vs distilled vs distilled + augmentation, and speed.

    OMP_NUM_THREADS=1 python benchmarks/bilstm_distill.py --tasks sst2 mrpc stsb rte cola --seeds 42 43 44

Per task (single sentences: SST-2, CoLA; sentence pairs through the siamese encoder: MRPC, RTE;
regression with one output fitted to the teacher's score: STS-B), on the first ``--train-rows``
training rows (written to ``<--runs-dir>/<task>/``, default ``runs/bilstm``):

- ``labels``: the BiLSTM trained on the gold labels only (``--alpha 0``; the no-KD baseline);
- ``kd``: the same BiLSTM fitted to the teacher's logits (``--alpha 1``, the paper's loss);
- ``kd_aug``: the same on ``kdbert augment --method bilstm`` of the first ``--aug-rows`` rows
  (``--n-iter`` versions each, the paper's rules otherwise), labelled by the teacher.

All use GloVe 6B 50d, batch 50, the best dev epoch and ``--optimizer``: Adadelta (lr 1.0, rho
0.95, no clipping, no weight decay; the paper's, default) or AdamW (lr 1e-3, linear schedule;
rows keyed ``<variant>-adamw``). The teacher is ``--teacher-dir`` (default ``runs/teacher-{task}``,
a ``kdbert finetune`` folder whose dev score is read from its metrics.json), or per task
``--teacher TASK=DIR``. ``--teacher-dtype bfloat16`` labels the rows (the costly part: every
augmented row goes through the teacher once) under bf16 autocast; the logits are stored in
float32 beside each training file, apart from float32 ones, and reused by every seed.
Then ``kdbert bench`` compares the ``kd_aug`` student with the teacher (one thread, batch 1 and
32), in PyTorch and, both exported with ``kdbert export --quantize int8``, in ONNX Runtime int8.

Pair settings: ``--pair-hidden-size`` (the BiLSTM's hidden size on MRPC, STS-B and RTE; default
the recipe's ``PAIR_HIDDEN_SIZE``) and ``--p-ng`` (n-gram probability of the augmentation; default
``kdbert augment``'s, ``PAIR_P_NG`` for pairs). The authors' pair configs: ``--pair-hidden-size 300
--p-ng 0``. A setting other than the first recorded rows' (Adadelta, hidden 150, p_ng 0.25)
is named in the keys and folders of the rows it changes (:func:`setting_tag`: ``-adamw``,
``-h300``, ``-png0``), so its rows sit beside those: e.g. ``mrpc/kd_aug-h300-png0/s42``.

Results go to ``benchmarks/results/<--results-name>.json`` (default ``bilstm_distill``; the runs of
another results file go to a subfolder of that name, beside the shared subsets and augmented
files); a rerun skips recorded rows and resumes an interrupted run (``--resume``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import load_results, machine_info, save_result
from paths import GLUE_DIR, NLTK_DATA, REPO, RUNS_DIR, WORD_VECTORS

from kdbert.augment.bilstm import P_NG, PAIR_P_NG
from kdbert.data.glue import resolve_glue_dir, split_file
from kdbert.data.tasks import GLUE_TASKS
from kdbert.methods.bilstm import HIDDEN_SIZE, PAIR_HIDDEN_SIZE

NAME = "bilstm_distill"
TASKS = ("sst2", "mrpc", "stsb", "rte", "cola")
# The settings of the first recorded rows; a run with others names them in its key (setting_tag).
RECORDED = {"hidden_size": 150, "p_ng": 0.25}


def relative(command: list[str]) -> str:
    """A recorded command line, with this checkout's paths relative to its root."""
    return "kdbert " + " ".join(command).replace(f"{REPO}/", "").replace(str(REPO.parent), "..")


def kdbert(*args: str) -> None:
    command = [sys.executable, "-m", "kdbert.cli", *args]
    print("$ kdbert " + " ".join(args), flush=True)
    subprocess.run(command, check=True, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})


def subset_file(task: str, data_dir: str, rows: int, folder: Path) -> Path:
    """The header and first ``rows`` rows of the task's train.tsv (CoLA has no header)."""
    spec = GLUE_TASKS[task]
    source = split_file(resolve_glue_dir(data_dir) / spec.glue_folder, "train")
    target = folder / f"train_{rows}.tsv"
    if not target.exists():
        lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        header = 0 if isinstance(spec.file_columns["label"], int) else 1
        folder.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text("".join(lines[:header + rows]), encoding="utf-8")
        os.replace(tmp, target)
    return target


def train_loss(report: dict) -> dict:
    """The first logged training loss and the mean of the last five (every 20 steps)."""
    losses = [r["loss"] for r in report["stage_losses"]["bilstm"]]
    return {"first": round(losses[0], 4), "last5": round(sum(losses[-5:]) / len(losses[-5:]), 4)}


def p_ng(task: str, args) -> float:
    """The n-gram probability of the task's augmentation: ``--p-ng``, else ``kdbert augment``'s default."""
    if args.p_ng is not None:
        return args.p_ng
    return PAIR_P_NG if GLUE_TASKS[task].is_pair else P_NG


def hidden_size(task: str, args) -> int:
    """The BiLSTM's hidden size on the task: ``--pair-hidden-size`` for pairs, else the recipe's default."""
    return args.pair_hidden_size if GLUE_TASKS[task].is_pair else HIDDEN_SIZE


def setting_tag(task: str, variant: str, args) -> str:
    """What sets a run apart from the first recorded rows (Adadelta, :data:`RECORDED`), as a suffix
    of its key and folder: ``-adamw``, ``-h<hidden size>``, ``-png<p>`` (the augmentation's n-gram
    probability; ``kd_aug`` only); empty for the recorded settings."""
    parts = [] if args.optimizer == "adadelta" else [args.optimizer]
    if hidden_size(task, args) != RECORDED["hidden_size"]:
        parts.append(f"h{hidden_size(task, args)}")
    if variant == "kd_aug" and p_ng(task, args) != RECORDED["p_ng"]:
        parts.append(f"png{p_ng(task, args):g}")
    return "".join(f"-{part}" for part in parts)


def run_folder(task: str, variant: str, seed: int, args) -> Path:
    """A run's folder: ``<task folder>/<variant><tag>-s<seed>``, in a subfolder named after
    ``--results-name`` when that is not the default."""
    folder = runs_dir(args) / task / ("" if args.results_name == NAME else args.results_name)
    return folder / f"{variant}{setting_tag(task, variant, args)}-s{seed}"


def run_variant(task: str, variant: str, seed: int, train_file: Path, args, teacher: Path) -> dict:
    out = run_folder(task, variant, seed, args)
    options = ["distill", "task", "--method", "bilstm", "--task", task, "--data-dir", args.data_dir,
               "--train-file", str(train_file), "--teacher", str(teacher), "--word-vectors", str(args.word_vectors),
               "--alpha", "0" if variant == "labels" else "1", "--seed", str(seed), "--optimizer", args.optimizer,
               "--epochs", str(args.aug_epochs if variant == "kd_aug" else args.epochs),
               "--hidden-size", str(hidden_size(task, args)),
               *(["--teacher-dtype", args.teacher_dtype] if variant != "labels" else []),
               "--output-dir", str(out), "--no-progress"]
    started = time.time()
    kdbert(*options, *(["--resume"] if (out / "run_config.json").exists() else []))
    report = json.loads((out / "distill_report.json").read_text())
    return {"task": task, "variant": variant, "seed": seed, "optimizer": args.optimizer,
            "setting": setting_tag(task, variant, args), "metrics": report["dev_metrics"],
            "score": report["dev_metrics"]["score"], "best_step": report["best_step"],
            "stage": {k: report["stages"][0][k] for k in ("learning_rate", "schedule", "weight_decay",
                                                          "max_grad_norm", "batch_size")},
            "train_loss": train_loss(report),
            "train_rows": sum(1 for _ in open(train_file, encoding="utf-8")) - (task != "cola"),
            "epochs": report["options"]["epochs"], "student": report["student"],
            "teacher_logits": report.get("teacher_logits"),
            "teacher_dtype": args.teacher_dtype if variant != "labels" else None,
            **({"augment": {"rows": args.aug_rows, "n_iter": args.n_iter, "p_ng": p_ng(task, args),
                            "record": augment_key(task, args)}} if variant == "kd_aug" else {}),
            "wall_seconds": round(time.time() - started, 1),
            "command": relative(options), **machine_info()}


def png_tag(task: str, args) -> str:
    """``-png<p>`` when the augmentation's n-gram probability is not the recorded rows', else empty."""
    return "" if p_ng(task, args) == RECORDED["p_ng"] else f"-png{p_ng(task, args):g}"


def augment_key(task: str, args) -> str:
    """The record of the augmented file ``train_aug_<rows>_n<n_iter><png tag>.tsv`` (one slash: not a run)."""
    return f"{task}/augment-{args.aug_rows}-n{args.n_iter}{png_tag(task, args)}"


def runs_dir(args) -> Path:
    return REPO / args.runs_dir


def teacher_folder(task: str, args) -> Path:
    """``--teacher TASK=DIR`` for ``task``, else ``--teacher-dir`` with ``{task}`` filled in."""
    for entry in args.teacher or []:
        name, _, folder = entry.partition("=")
        if name == task and folder:
            return REPO / folder
    return REPO / args.teacher_dir.format(task=task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["sst2"], choices=TASKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--word-vectors", default=WORD_VECTORS)
    parser.add_argument("--train-rows", type=int, default=8000, help="training rows of labels / kd")
    parser.add_argument("--aug-rows", type=int, default=8000, help="rows augmented for kd_aug")
    parser.add_argument("--n-iter", type=int, default=20, help="augmented versions per row (the paper's 20)")
    parser.add_argument("--epochs", type=float, default=10)
    parser.add_argument("--aug-epochs", type=float, default=3)
    parser.add_argument("--teacher-dir", default=str(RUNS_DIR / "teacher-{task}"),
                        help="teacher folder, relative to the checkout or absolute; {task} is the task's name")
    parser.add_argument("--teacher", action="append", metavar="TASK=DIR",
                        help="the teacher folder of one task (repeatable; wins over --teacher-dir)")
    parser.add_argument("--teacher-dtype", choices=["float32", "bfloat16"], default="float32",
                        help="precision of the teacher labelling the rows (bfloat16: autocast; logits kept in float32)")
    parser.add_argument("--optimizer", choices=["adadelta", "adamw"], default="adadelta")
    parser.add_argument("--pair-hidden-size", type=int, default=PAIR_HIDDEN_SIZE,
                        help="BiLSTM hidden size on pair tasks (the authors' pair configs: 300)")
    parser.add_argument("--p-ng", type=float, help=f"n-gram probability of the augmentation (default {P_NG}; pair "
                                                   f"tasks {PAIR_P_NG}; the authors' pair augmenter: 0)")
    parser.add_argument("--runs-dir", default=str(RUNS_DIR / "bilstm"), help="where the subsets and students go")
    parser.add_argument("--results-name", default=NAME, help="results file benchmarks/results/NAME.json")
    parser.add_argument("--no-bench", action="store_true")
    args = parser.parse_args()
    name = args.results_name
    recorded = load_results(name)
    for task in args.tasks:
        teacher = teacher_folder(task, args)
        if not (teacher / "metrics.json").is_file():
            sys.exit(f"{task}: no fine-tuned teacher in {teacher} (no metrics.json); fine-tune one with `kdbert "
                     f"finetune --task {task}` or pass --teacher {task}=DIR")
        folder = runs_dir(args) / task
        train_file = subset_file(task, args.data_dir, args.train_rows, folder)
        aug_file = folder / f"train_aug_{args.aug_rows}_n{args.n_iter}{png_tag(task, args)}.tsv"
        if not aug_file.exists():
            started = time.time()
            kdbert("augment", "--method", "bilstm", "--task", task, "--data-dir", args.data_dir, "--max-rows",
                   str(args.aug_rows), "--n-iter", str(args.n_iter), "--p-ng", str(p_ng(task, args)), "--nltk-data",
                   NLTK_DATA, "--teacher", str(teacher), "--dtype", args.teacher_dtype, "--output", str(aug_file))
            save_result(name, augment_key(task, args), {"task": task, "rows": args.aug_rows, "n_iter": args.n_iter,
                                                   "p_ng": p_ng(task, args),
                                                   "output_rows": sum(1 for _ in open(aug_file)) - (task != "cola"),
                                                   "teacher_dtype": args.teacher_dtype,
                                                   "seconds": round(time.time() - started, 1), **machine_info()})
        teacher_metrics = json.loads((teacher / "metrics.json").read_text())
        settings = json.loads((teacher / "run_config.json").read_text())
        report_file = teacher / "train_report.json"  # the precision it was fine-tuned in
        runtime = json.loads(report_file.read_text()).get("runtime", {}) if report_file.is_file() else {}
        save_result(name, f"{task}/teacher", {"task": task, "teacher": relative([str(teacher)])[len("kdbert "):],
                                              "metrics": teacher_metrics, "score": teacher_metrics["score"],
                                              "finetune": {**{k: settings.get(k) for k in (
                                                  "max_train_examples", "epochs", "learning_rate", "batch_size",
                                                  "max_seq_len")},
                                                  "precision": runtime.get("mixed_precision")}})
        for seed in args.seeds:
            for variant, file in (("labels", train_file), ("kd", train_file), ("kd_aug", aug_file)):
                key = f"{task}/{variant}{setting_tag(task, variant, args)}/s{seed}"
                if key in recorded:
                    if "train_loss" not in recorded[key]:  # rows recorded before the loss was
                        report = json.loads((run_folder(task, variant, seed, args) / "distill_report.json").read_text())
                        save_result(name, key, {**recorded[key], "train_loss": train_loss(report)})
                    continue
                save_result(name, key, run_variant(task, variant, seed, file, args, teacher))
        save_result(name, f"{task}/targets{png_tag(task, args)}", {"task": task, **target_summary(
            task, {"original rows": train_file, "augmented rows": aug_file}, args.data_dir)})
        if not args.no_bench and args.optimizer == "adadelta":
            bench(task, run_folder(task, "kd_aug", args.seeds[0], args), teacher, args, recorded, name)


def target_summary(task: str, files: dict[str, Path], data_dir: str) -> dict:
    """What the student is fitted to, per training file, beside the dev set's gold labels: for a
    classification task the share of rows per class (the teacher's argmax; dev: the gold label),
    for regression the mean and std of the teacher's score (dev: of the gold score). Reads the
    teacher's stored logits (``<file>.teacher-logits/``, the teacher stored last)."""
    import numpy as np

    from kdbert.data.load import TaskOptions, load_task
    from kdbert.core.teacher_logits import newest_stored_logits

    spec = GLUE_TASKS[task]

    def summary(values: np.ndarray) -> dict:
        if spec.is_regression:
            return {"rows": len(values), "mean": round(float(values.mean()), 3), "std": round(float(values.std()), 3)}
        return {"rows": len(values), "share": {label: round(float((values == i).mean()), 3)
                                               for i, label in enumerate(spec.labels)}}

    out = {}
    for kind, file in files.items():
        logits = newest_stored_logits(file)
        if logits is not None:
            out[kind] = summary(logits[:, 0] if spec.is_regression else logits.argmax(-1))
    dev = next(iter(load_task(TaskOptions(task, data_dir=data_dir)).dev.values()))
    out["dev (gold)"] = summary(np.array([example.label for example in dev]))
    return out


def bench(task: str, student: Path, teacher: Path, args, recorded: dict, name: str) -> None:
    """``{task}/bench``: the student against the teacher in PyTorch; ``{task}/bench-int8``: both
    exported (``kdbert export --quantize int8``; the student's export scores its dev split) and
    timed in ONNX Runtime int8. One thread, batch 1 and 32, the task's sequence length. The keys
    and files carry the student's :func:`setting_tag`."""
    seq_len = str(GLUE_TASKS[task].max_seq_len)
    tag = setting_tag(task, "kd_aug", args)
    runs = [(f"bench{tag}", student, teacher), (f"bench-int8{tag}", student / "onnx" / "model.int8.onnx",
                                                teacher / "onnx" / "model.int8.onnx")]
    for kind, model, baseline in runs:
        if f"{task}/{kind}" in recorded:
            continue
        exports = []
        if kind.startswith("bench-int8"):
            exports = [["export", "--model", str(student), "--quantize", "int8", "--task", task, "--data-dir",
                        args.data_dir, "--overwrite"],
                       ["export", "--model", str(teacher), "--quantize", "int8", "--overwrite"]]
            for options in exports:
                kdbert(*options)
        out = student.parent / f"{kind}.json"
        options = ["bench", "--model", str(model), "--compare", str(baseline), "--seq-len", seq_len,
                   "--threads", "1", "--output", str(out)]
        kdbert(*options)
        record = {"task": task, "rows": json.loads(out.read_text()), "command": relative(options),
                  "load_average": os.getloadavg()[0], **machine_info()}
        if exports:
            report = json.loads((student / "onnx" / "export_report.json").read_text())
            record.update({"exports": [relative(o) for o in exports], "student_dev": report["dev_metrics"],
                           "student_parity": report["parity"]})
        save_result(name, f"{task}/{kind}", record)


if __name__ == "__main__":
    main()
