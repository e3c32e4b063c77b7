"""A search's run continued from where it stopped, one part of its recipe changed at a time: what lifts a plateau?

    OMP_NUM_THREADS=1 KDBERT_MIXED_PRECISION=bf16 python benchmarks/plateau.py --task sst2 \
        --teacher runs/base/teacher-sst2 --run runs/compress-sst2-x8-mpnet-ffn/runs/mpnet-3x384-ffn768 \
        --teacher-onnx runs/compress-sst2-x8-mpnet-ffn/teacher-onnx/model.int8.onnx \
        --variants stable decay --seeds 42 43 44 --steps 2000

SST-2's 8x winner against MPNet-base (``mpnet-3x384-ffn768``) keeps 95-96% of the teacher on dev,
and at equal steps its dev score stops moving after ~5,000 of its 14,000 steps. Each run here starts
from the student the search's run holds (its weights' moving average at its best step) and trains
``--steps`` more steps with the run's own options (``run_config.json``: the same loss, rate, batch
and teacher's logits; no warm-up, a fresh moving average), changed as the variant says
(:data:`VARIANTS`), evaluated every quarter, the best on the rows that pick kept, as a search's run.
Seeds change the data order. Runs go to ``<runs-dir>/<task>/<candidate>-from<step>/<variant>/seed<seed>-steps<steps>``
(a finished run is reused, its checkpoints removed); scores to ``benchmarks/results/plateau.json`` under
``<task><key-suffix>/<candidate>-from<step>/<steps>/<variant>/seed<seed>``, beside the run's own scores
at its best step (``start_*``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, IMDB_DIR, run_folder
from recipe_ablation import ablation_setting, imdb_sentences, scores

from kdbert.core.teacher_logits import shared_store_folder
from kdbert.errors import KdbertError
from kdbert.methods.front import distill_task

VARIANTS = {
    "stable": {},  # the run's options as they are: its rate near the peak of a schedule set for the search's horizon
    "decay": {"ema_decay": None},  # the rate decayed linearly to zero over --steps, the trained weights scored
    "t1": {"temperature": 1.0, "alpha": 1.0},  # KL to the teacher at T=1, no hard-label term (the run: T=20, 0.3 labels)
    "t2": {"temperature": 2.0, "alpha": 1.0},  # ... at T=2
    "trained-words": {"freeze_word_embeddings": False},  # the word embeddings trained (the run keeps them as cut)
    "int8-targets": {"teacher_onnx": "export"},  # every row's logits stored once, labelled by the teacher's export
    "imdb-sentences": {"teacher_onnx": "export"},  # ... and --imdb-rows sentences of IMDb's unlabelled reviews
}
"""Variant -> the options it changes in the continued run ("decay" also sets the schedule's length to --steps)."""

RUN_ONLY = ("command", "task", "train_file", "held_out_rows", "held_out_fraction", "decide_share", "max_train_examples")
"""``run_config.json`` entries that describe the task, not the run's options (the task is rebuilt here)."""


def continued_options(run: Path, variant: str, seed: int, steps: int, teacher_onnx: str | None) -> dict:
    """The options of ``run`` (a search's run folder) continued for ``steps`` from the student it holds,
    changed as ``variant`` says."""
    options = {k: v for k, v in json.loads((run / "run_config.json").read_text()).items() if k not in RUN_ONLY}
    options |= {"student": str(run), "seed": seed, "eval_every": steps // 4, "keep_checkpoints": 1,
                "no_progress": True, "warmup_ratio": 0.0, **VARIANTS[variant]}
    if variant == "decay":
        options["max_steps"] = steps
    if options.get("teacher_onnx") == "export":
        if not teacher_onnx:
            raise KdbertError(f"variant {variant} labels the rows with the teacher's export: give --teacher-onnx")
        options |= {"teacher_onnx": teacher_onnx, "logits_cache": str(shared_store_folder())}
        options.pop("teacher_cache", None)
    else:
        options["teacher_cache"] = str(run.parent.parent / "teacher-cache")  # the search's, as the run read it
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--teacher", required=True, help="the search's teacher folder")
    parser.add_argument("--run", required=True, help="a search's run folder: <compress output>/runs/<candidate>")
    parser.add_argument("--variants", nargs="+", default=["stable", "decay"], choices=sorted(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--teacher-onnx", help="the search's int8 export of the teacher (int8-targets, imdb-sentences)")
    parser.add_argument("--imdb-rows", type=int, default=60000, help="imdb-sentences: how many sentences")
    parser.add_argument("--imdb-dir", default=IMDB_DIR, help="imdb-sentences: the IMDb archives' folder")
    parser.add_argument("--runs-dir", default=run_folder("plateau"))
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--key-suffix", default="", help="after the task in the results' keys (e.g. a teacher's)")
    args = parser.parse_args()
    run = Path(args.run)
    report = json.loads((run / "distill_report.json").read_text())
    teacher, task, _, _ = ablation_setting(args.task, args.teacher, args.data_dir)
    metrics = json.loads((Path(teacher) / "metrics.json").read_text())
    start = {f"start_{name}": value for name, value in scores(report).items() if name in ("held_out", "decide", "dev")}
    context = {"teacher_dev": metrics["score"], "teacher_decide": metrics.get("decide_score"),
               "start_step": report["best_step"], **start}
    name = f"{run.name}-from{report['best_step']}"
    command = (f"OMP_NUM_THREADS=1 KDBERT_MIXED_PRECISION=bf16 python benchmarks/plateau.py --task {args.task} "
               f"--teacher {args.teacher} --run {args.run} --variants {' '.join(args.variants)} "
               f"--seeds {' '.join(map(str, args.seeds))} --steps {args.steps}"
               + (f" --teacher-onnx {args.teacher_onnx}" if args.teacher_onnx else "")
               + (f" --imdb-rows {args.imdb_rows}" if "imdb-sentences" in args.variants else "")
               + (f" --key-suffix={args.key_suffix}" if args.key_suffix else ""))
    for seed in args.seeds:
        for variant in args.variants:
            out = Path(args.runs_dir) / args.task / name / variant / f"seed{seed}-steps{args.steps}"
            if (out / "distill_report.json").is_file():
                result = json.loads((out / "distill_report.json").read_text())
            else:
                options = continued_options(run, variant, seed, args.steps, args.teacher_onnx)
                run_task = task
                if variant == "imdb-sentences":  # labelled once, by the export, into the store the rows' logits are in
                    sentences = imdb_sentences(Path(args.runs_dir) / f"imdb-sentences-{args.imdb_rows}.jsonl",
                                               args.imdb_rows, args.imdb_dir)
                    run_task = replace(task, unlabelled=str(sentences))
                pause = None if variant == "decay" else args.steps  # the others pause within the run's long schedule
                result = distill_task(run_task, options, str(out), overwrite=True, pause_at_step=pause)
                shutil.rmtree(out / "checkpoints", ignore_errors=True)  # 0.1 GB a run; nothing continues it
            row = scores(result) | context
            save_result("plateau", f"{args.task}{args.key_suffix}/{name}/{args.steps}/{variant}/seed{seed}",
                        {**machine_info(), "teacher": teacher, "steps": args.steps, "variant": variant, "seed": seed,
                         **row, "command": command})
            print(f"{name} {variant} seed {seed}: dev {row['dev']:.2f}, decide {row['decide']:.2f}", flush=True)


if __name__ == "__main__":
    main()
