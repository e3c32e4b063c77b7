"""What general students built once per base model cost, and what they give a task's search.

    # 1. build: one store entry grown session by session to each budget, a snapshot after each
    OMP_NUM_THREADS=1 python benchmarks/general_students.py build --shapes bert-2x128 bert-2x256 bert-3x256 \
        --budgets 15 30 60 120
    # 2. downstream: each shape distilled on a task from the selection start and from every snapshot
    OMP_NUM_THREADS=1 python benchmarks/general_students.py downstream --task mrpc \
        --teacher runs/engine/teacher-mrpc --shapes bert-2x128 bert-2x256 bert-3x256 --steps 600

``build`` runs ``kdbert students build`` (the packaged all-MiniLM-L6-v2 as base, the shared
Wikipedia sample) to ``--budgets`` minutes in turn, the same run continued, and copies the shape
folders to ``<runs-dir>/snapshots/<minutes>`` after each; its held-out relation losses go to
``results/general_students.json`` under ``build/<minutes>``. ``downstream`` distils each shape with
compress's recipe for BERT-style candidates (TinyBERT's prediction stage on the teacher's logits,
batch 32, lr 1e-4, warm-up 10% then linear decay, picked on the 10% of training rows held out) for
``--steps`` steps, from the weight-selection start compress gives it without a build and from each
snapshot; held-out and dev (PyTorch) scores under ``<task>/<shape>/<start>``. Finished runs are
reused, so both phases resume.

    # 3. search: whole compress searches (bench_compress.py) with and without the parts, compared
    python benchmarks/general_students.py search --task mrpc --searches baseline=runs/engine/mrpc-tie \
        general=runs/issue44/mrpc-x4-general all-on=runs/issue44/mrpc-x4-all-on

    # 4. tinybert: TinyBERT's general distillation of the same shapes, the build's rival
    OMP_NUM_THREADS=1 python benchmarks/general_students.py tinybert --shapes bert-2x128 bert-2x256 --steps 351

``tinybert`` runs ``kdbert distill general --method tinybert`` (embedding, attention averaged over
heads, and hidden-state MSE through fitted projections, on the uniform layer map) for each shape,
from the same weight-selection start and with the build's base, corpus, batch, sequence length and
learning rate, for ``--steps`` steps (351: the build's at 30 minutes, so both have seen the same
sequences); the folders land in ``<runs-dir>/tinybert/<steps>/<shape>``, and ``downstream`` then
distils them too, as the start ``tinybert-<steps>steps``.

``search`` reads finished ``kdbert compress`` folders and records, under ``search/<task>/<label>``,
what each had on (general students, augmented twins, transfer text), the candidates it trained and
how each started, the winner and its steps, and the shipped dev score against the teacher's and
the majority class's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from common import load_results, machine_info, save_result
from paths import CORPUS, GLUE_DIR, RUNS_DIR

from kdbert.compress.build import build_from_teacher
from kdbert.compress.recipes import SearchSettings, run_options
from kdbert.compress.speed import all_candidates, shape_context
from kdbert.compress.teacher import majority_score
from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.int8_kernels import cpu_int8_facts
from kdbert.methods.front import distill_task
from kdbert.students.build import BuildConfig, build_students
from kdbert.students.store import FINGERPRINT_FILE

HELD_OUT_FRACTION = 0.1  # as the searches
DEFAULT_STEPS = 600  # downstream runs of other lengths carry theirs in their label


def build(args) -> None:
    root = Path(args.runs_dir)
    for minutes in args.budgets:
        snapshot = root / "snapshots" / f"{minutes:g}"
        if not (snapshot / "build.json").is_file():
            facts = build_students(BuildConfig(corpus=[args.corpus], shapes=",".join(args.shapes),
                                               budget_minutes=minutes, store=str(root / "store"), no_progress=True))
            folder = root / "store" / facts["key"]
            tmp = snapshot.with_name(snapshot.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for name in [*facts["shapes"], "build.json", FINGERPRINT_FILE]:
                (shutil.copytree if (folder / name).is_dir() else shutil.copy)(folder / name, tmp / name)
            tmp.rename(snapshot)
        facts = json.loads((snapshot / "build.json").read_text())
        save_result("general_students", f"build/{minutes:g}", {
            **machine_info(), "cpu": cpu_int8_facts(), "shapes": facts["shapes"], "trained_seconds": facts["trained_seconds"],
            "steps": facts["steps"], "sequences_seen": facts["sequences_seen"], "history": facts["history"],
            "command": f"OMP_NUM_THREADS=1 python benchmarks/general_students.py build --shapes "
                       f"{' '.join(args.shapes)} --budgets {' '.join(f'{b:g}' for b in args.budgets)}"})
        print(f"build {minutes:g} min: {facts['steps']} steps, held-out {facts['history'][-1]['held_out_loss']}",
              flush=True)


def downstream(args) -> None:
    task = TaskOptions(task=args.task, data_dir=args.data_dir, held_out_fraction=HELD_OUT_FRACTION)
    context = shape_context(args.teacher, task)
    teacher = json.loads((Path(args.teacher) / "metrics.json").read_text())
    reference = {"teacher_held_out": teacher["selection_score"], "teacher_dev": teacher["score"],
                 "majority_dev": majority_score(load_task(task))}
    offered = {c.name: c for c in all_candidates(context)}
    recorded = load_results("general_students")
    root = Path(args.runs_dir)
    runs = root / "downstream" / args.task
    snapshots = sorted((p for p in (root / "snapshots").iterdir() if (p / "build.json").is_file()),
                       key=lambda p: float(p.name)) if (root / "snapshots").is_dir() else []
    for name in args.shapes:
        candidate = offered[name]
        selection = runs / name / "start-selection"
        if not (selection / "config.json").is_file():
            build_from_teacher(candidate, args.teacher, task, selection, context)
        tinybert_runs = sorted(p.parent for p in (root / "tinybert").glob(f"*/{name}/general_report.json"))
        starts = {"selection": selection, **{f"general-{p.name}min": p / name for p in snapshots},
                  **{f"tinybert-{p.parent.name}steps": p for p in tinybert_runs}}
        for label, start in starts.items():
            label = label if args.steps == DEFAULT_STEPS else f"{label}-{args.steps}steps"
            out = runs / name / label
            if (out / "distill_report.json").is_file():
                if f"{args.task}/{name}/{label}" in recorded:  # kept with the date it was measured
                    continue
                report = json.loads((out / "distill_report.json").read_text())
            else:
                options = {**run_options(candidate, args.steps, SearchSettings(), str(runs / "teacher-cache")),
                           "teacher": args.teacher, "student": str(start)}
                report = distill_task(task, options, str(out), overwrite=True)
            metrics = report["dev_metrics"]
            row = {"held_out": metrics["selection_score"], "dev": metrics["score"],
                   "train_seconds": report["train_seconds"]}
            save_result("general_students", f"{args.task}/{name}/{label}", {
                **machine_info(), "cpu": cpu_int8_facts(), "teacher": args.teacher, "steps": args.steps, **row,
                **reference,
                "command": f"OMP_NUM_THREADS=1 python benchmarks/general_students.py downstream --task {args.task} "
                           f"--teacher {args.teacher} --shapes {' '.join(args.shapes)} --steps {args.steps}"})
            print(f"{args.task} {name} {label}: {row}", flush=True)


def tinybert(args) -> None:
    from kdbert.core.loading import load_encoder
    from kdbert.families.bert import student_config
    from kdbert.families.selection import speed_shapes

    base, _ = load_encoder("default")
    shapes = speed_shapes(base.config)
    root = Path(args.runs_dir) / "tinybert" / str(args.steps)
    for name in args.shapes:
        out = root / name
        if not (out / "general_report.json").is_file():
            shape_folder = root / f"{name}.config"
            student_config(None, base.config, 2, **shapes[name]).save_pretrained(shape_folder)
            command = ["distill", "general", "--method", "tinybert", "--student", str(shape_folder),
                       "--student-init", "teacher-weights", "--head-average", "--projection-init", "fit",
                       "--corpus", args.corpus, "--max-steps", str(args.steps), "--batch-size", "32",
                       "--max-seq-len", "128", "--learning-rate", "1e-4", "--save-every", "50", "--no-progress",
                       "--output-dir", str(out), *(["--resume"] if (out / "run_config.json").is_file() else [])]
            subprocess.run([sys.executable, "-m", "kdbert.cli", *command], check=True)
        report = json.loads((out / "general_report.json").read_text())
        losses = report["stage_losses"]["general"]
        save_result("general_students", f"tinybert/{args.steps}/{name}", {
            **machine_info(), "cpu": cpu_int8_facts(), "steps": args.steps, "train_seconds": report["train_seconds"],
            "first_loss": losses[0]["loss"], "last_loss": losses[-1]["loss"],
            "command": f"OMP_NUM_THREADS=1 python benchmarks/general_students.py tinybert --shapes "
                       f"{' '.join(args.shapes)} --steps {args.steps}"})
        print(f"tinybert {name}: {args.steps} steps in {report['train_seconds']:.0f} s", flush=True)


def search(args) -> None:
    for item in args.searches:
        label, _, folder = item.partition("=")
        report = json.loads((Path(folder) / "compress_report.json").read_text())
        starts = report.get("starts") or {}
        best: dict[str, dict] = {}
        for row in report["search"]["segments"]:
            if row["steps"] >= best.get(row["candidate"], {"steps": -1})["steps"]:
                best[row["candidate"]] = row
        shipped, winner = report["shipped"], report["winner"]
        general = report.get("general_students")
        augmentation = report.get("augmentation") or {}
        result = {
            **machine_info(), "cpu": cpu_int8_facts(), "output_dir": folder,
            "general_students": general and {"key": general["key"], "steps": general["steps"],
                                             "minutes": round(general["minutes"], 1)},
            "augmented": bool(augmentation), "transfer_rows": augmentation.get("transfer_rows", 0),
            "trained": {name: {"steps": row["steps"], "held_out": row["score"], "start": starts.get(name, "?")}
                        for name, row in best.items()},
            "winner": winner["candidate"], "winner_start": starts.get(winner["candidate"], "?"),
            "winner_steps": winner.get("steps"), "winner_held_out": winner.get("score"),
            "teacher_held_out": report["teacher_scores"]["held_out"], "shipped_dev": shipped["dev_score"],
            "teacher_dev": report["teacher_scores"]["dev"], "majority_dev": shipped.get("majority_dev"),
            "kept_dev": shipped["kept_dev"], "speedup": shipped["speedup"],
            "command": f"python benchmarks/general_students.py search --task {args.task} --searches {item}"}
        save_result("general_students", f"search/{args.task}/{label}", result)
        print(label, {k: result[k] for k in ("winner", "winner_start", "winner_steps", "shipped_dev", "kept_dev")})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=("build", "downstream", "tinybert", "search"))
    parser.add_argument("--searches", nargs="+", default=[], help="search: label=compress output folder")
    parser.add_argument("--shapes", nargs="+")
    parser.add_argument("--budgets", type=float, nargs="+", default=[15, 30, 60, 120])
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--task")
    parser.add_argument("--teacher")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--runs-dir", default=str(RUNS_DIR / "general-students"))
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    if args.phase != "search" and not args.shapes:
        parser.error(f"{args.phase} needs --shapes")
    {"build": build, "downstream": downstream, "tinybert": tinybert, "search": search}[args.phase](args)


if __name__ == "__main__":
    main()
