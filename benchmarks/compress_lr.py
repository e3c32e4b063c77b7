"""Does a higher learning rate rescue the narrow BERT-style candidates of `kdbert compress` on small tasks?

    OMP_NUM_THREADS=1 python benchmarks/compress_lr.py --task cola --candidates bert-1x128 bert-2x192 \
        bert-2x256 bert-3x256 --learning-rates 1e-4 3e-4 1e-3 --steps 600

Each candidate is built from the teacher as the search builds it (weight selection) and distilled
with the search's recipe for its kind (TinyBERT's prediction stage on the teacher's logits, batch 32,
warm-up 10% then linear decay, picked on the 10% of training rows held out) for ``--steps`` steps
at each learning rate; the search runs 1e-4. The teacher should be one fine-tuned without the
held-out rows (``teacher_glue.py --held-out-fraction 0.1``). Runs go to
``<runs-dir>/<task>/<candidate>/lr<rate>`` (a finished run is reused); the held-out and dev
(PyTorch) scores to ``benchmarks/results/compress_lr.json`` under ``<task>/<candidate>/lr<rate>``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.compress.build import build_from_teacher
from kdbert.compress.recipes import SearchSettings, run_options
from kdbert.compress.speed import all_candidates, shape_context
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.methods.front import distill_task

HELD_OUT_FRACTION = 0.1  # as the searches


def scores(report: dict) -> dict:
    metrics = report["dev_metrics"]
    return {"held_out": metrics["selection_score"], "dev": metrics["score"], "train_seconds": report["train_seconds"],
            "precision": report["runtime"]["mixed_precision"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--teacher", help="default: runs/teacher-<task>-held_out_fraction0.1")
    parser.add_argument("--candidates", nargs="+", required=True, help="BERT-style candidate names, e.g. bert-2x192")
    parser.add_argument("--learning-rates", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--runs-dir", default="runs/compress-lr")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    teacher = args.teacher or f"runs/teacher-{args.task}-held_out_fraction0.1"
    task = TaskOptions(task=args.task, data_dir=args.data_dir, held_out_fraction=HELD_OUT_FRACTION)
    context = shape_context(teacher, task)
    offered = {candidate.name: candidate for candidate in all_candidates(context)}
    runs = Path(args.runs_dir) / args.task
    for name in args.candidates:
        candidate = offered.get(name)
        if candidate is None or candidate.from_teacher is None:
            raise KdbertError(f"--candidates {name}: not a BERT-style candidate of this teacher; choose from "
                              f"{', '.join(n for n, c in offered.items() if c.from_teacher is not None)}")
        start = runs / name / "start"
        if not (start / "config.json").is_file():
            build_from_teacher(candidate, teacher, task, start, context)
        for rate in args.learning_rates:
            out = runs / name / f"lr{rate:g}"
            if (out / "distill_report.json").is_file():
                report = json.loads((out / "distill_report.json").read_text())
            else:
                settings = SearchSettings(learning_rate=rate)
                options = {**run_options(candidate, args.steps, settings, str(runs / "teacher-cache")),
                           "teacher": teacher, "student": str(start)}
                report = distill_task(task, options, str(out), overwrite=True)
            row = scores(report)
            save_result("compress_lr", f"{args.task}/{name}/lr{rate:g}", {
                **machine_info(), "teacher": teacher, "steps": args.steps, "learning_rate": rate, **row,
                "command": f"OMP_NUM_THREADS=1 python benchmarks/compress_lr.py --task {args.task} --candidates "
                           f"{' '.join(args.candidates)} --learning-rates "
                           f"{' '.join(f'{r:g}' for r in args.learning_rates)} --steps {args.steps}"})
            print(f"{name} lr {rate:g}: {row}", flush=True)


if __name__ == "__main__":
    main()
