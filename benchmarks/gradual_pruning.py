"""A cut's FFN pruned gradually during distillation against the one-shot cut, at equal steps.

    OMP_NUM_THREADS=1 python benchmarks/gradual_pruning.py --task sst2 --teacher runs/qs-ceiling3/teacher \
        --candidate bert-2x384-ffn192 --steps 800 --seeds 42 43 44 --key-suffix=-qs3

The one-shot cut is ``recipe_ablation.py``'s "recipe" variant: compress's start of the candidate
(the teacher's layers and FFN units ranked by importance on the task, its head, its pooling),
distilled ``--steps`` steps with the search's options. "recipe-gradual-ffn" starts from the same
layers at the teacher's full FFN width and halves the FFN until it reaches the candidate's: each
width is distilled ``--prune-steps`` steps (default an eighth of ``--steps``), then its FFN units
are ranked again by importance on the student as trained so far
(:func:`~kdbert.families.importance.task_importance`) and the most important half kept
(:func:`~kdbert.families.selection.select_teacher_weights`, the trained student standing for the
teacher); the candidate's width trains the rest of the steps. Each width is a fresh run of the
search's options (rate, warm-up, weights' average), its rows shuffled with a seed of its own, so
no width reads the batches the one before it read. Both variants score the candidate's shape: the
last run is the candidate itself.

Runs go to ``<runs-dir>/<task>/<candidate>/recipe-gradual-ffn/seed<seed>-steps<steps>/ffn<width>``; scores to
``benchmarks/results/recipe_ablation.json`` under ``<task><suffix>/<candidate>/<steps>/recipe-gradual-ffn/seed<seed>``,
beside the "recipe" rows ``recipe_ablation.py`` writes.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, run_folder
from recipe_ablation import ablation_setting, build_recipe_starts, scores, search_options

from kdbert.compress.recipes import SearchSettings
from kdbert.core.atomic_io import save_hf_folder
from kdbert.data.load import TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.families.importance import task_importance
from kdbert.families.registry import family_of_folder
from kdbert.families.selection import layout_of, select_teacher_weights
from kdbert.methods.front import distill_task

VARIANT = "recipe-gradual-ffn"


def widths(full: int, target: int) -> list[int]:
    """The FFN widths a gradual run trains at: ``full`` halved until ``target`` (1536 -> 192: 1536, 768,
    384, 192)."""
    if target > full or full % target or (full // target) & (full // target - 1):
        raise KdbertError(f"gradual pruning halves the FFN: {target} must be {full} over a power of two")
    found = [full]
    while found[-1] > target:
        found.append(found[-1] // 2)
    return found


def narrower_ffn(folder: Path, width: int, task: TaskOptions, out: Path) -> Path:
    """The student in ``folder`` with its FFN cut to the ``width`` units most important on ``task``'s
    training rows (ranked on that student), everything else kept; saved to ``out``."""
    model, tokenizer = family_of_folder(str(folder)).load(folder)
    data = load_task(task)
    ranked = task_importance(model, layout_of(model.config), data.train, tokenizer, data.spec.max_seq_len)
    config = model.config.__class__.from_dict({**model.config.to_dict(), "intermediate_size": width})
    student = type(model)(config)
    picked = select_teacher_weights(student, model, ranked, head=True)
    built = json.loads((folder / "student_init.json").read_text()) if (folder / "student_init.json").is_file() else {}
    save_hf_folder(student, tokenizer, out, {"student_init.json": {**built, "pruned_from": str(folder), **picked}})
    return out


def gradual_run(candidate, full_start: Path, steps: int, prune_steps: int, seed: int, teacher: str,
                task: TaskOptions, out: Path, cache: Path) -> dict:
    """The candidate distilled from ``full_start`` while its FFN is halved every ``prune_steps`` steps
    (module doc); returns the last run's report (``eval_history``: its evaluations, the candidate's
    shape, steps counted from the first run), ``pruning_history`` the wider runs' evaluations,
    ``train_seconds`` of them all."""
    plan = widths(json.loads((full_start / "config.json").read_text())["intermediate_size"],
                  dict(candidate.shape)["intermediate_size"])
    start, history, done, seconds = full_start, [], 0, 0.0
    for index, width in enumerate(plan):
        last = index == len(plan) - 1
        run_steps = steps - done if last else prune_steps
        folder = out / f"ffn{width}"
        if not (folder / "distill_report.json").is_file():
            settings = SearchSettings(seed=seed + 1000 * index)  # each width its own shuffle of the rows
            options = search_options(candidate, settings, run_steps, teacher, start, cache, "recipe",
                                     eval_every=run_steps // 2 if last else run_steps)
            distill_task(task, options, str(folder), overwrite=True, pause_at_step=run_steps)
            shutil.rmtree(folder / "checkpoints", ignore_errors=True)
        report = json.loads((folder / "distill_report.json").read_text())
        history += [{**entry, "step": entry["step"] + done} for entry in report["eval_history"]]
        done, seconds = done + run_steps, seconds + report["train_seconds"]
        if not last:
            start = narrower_ffn(folder, plan[index + 1], task, out / f"start-ffn{plan[index + 1]}")
    last_run = len(report["eval_history"])
    return {**report, "eval_history": history[-last_run:], "pruning_history": history[:-last_run],
            "train_seconds": seconds, "widths": plan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--teacher", help="default: runs/teacher-<task>")
    parser.add_argument("--candidate", required=True, help="a cut of narrower FFN, e.g. bert-2x384-ffn192")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--prune-steps", type=int, help="steps at each wider FFN (default: --steps / 8)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--runs-dir", default=run_folder("recipe-ablation"))
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--key-suffix", default="", help="after the task in the results' keys (e.g. a new teacher's)")
    args = parser.parse_args()
    teacher, task, context, offered = ablation_setting(args.task, args.teacher, args.data_dir)
    if args.candidate not in offered:
        raise KdbertError(f"--candidate {args.candidate}: not a candidate of this teacher")
    candidate = offered[args.candidate]
    full_name = args.candidate.rsplit("-ffn", 1)[0]
    if full_name == args.candidate or full_name not in offered:
        raise KdbertError(f"--candidate {args.candidate}: a cut of narrower FFN than the teacher's (name ...-ffnN)")
    root = Path(args.runs_dir) / args.task
    full_start = build_recipe_starts(offered[full_name], teacher, task, context, root / full_name, ["recipe"])["recipe"]
    prune_steps = args.prune_steps or args.steps // 8
    metrics = json.loads((Path(teacher) / "metrics.json").read_text())
    command = (f"OMP_NUM_THREADS=1 python benchmarks/gradual_pruning.py --task {args.task} --candidate {args.candidate} "
               f"--steps {args.steps} --seeds {' '.join(map(str, args.seeds))}"
               + (f" --prune-steps {args.prune_steps}" if args.prune_steps else "")
               + (f" --key-suffix={args.key_suffix}" if args.key_suffix else "")
               + (f" --teacher {args.teacher}" if args.teacher else ""))
    for seed in args.seeds:
        out = root / candidate.name / VARIANT / f"seed{seed}-steps{args.steps}"
        report = gradual_run(candidate, full_start, args.steps, prune_steps, seed, teacher, task, out,
                             root / "teacher-cache-gradual")
        pruning = scores({**report, "eval_history": report["pruning_history"]})["curve"]
        row = {**scores(report), "teacher_dev": metrics["score"], "teacher_decide": metrics.get("decide_score"),
               "widths": report["widths"], "prune_steps": prune_steps, "pruning_curve": pruning}
        save_result("recipe_ablation", f"{args.task}{args.key_suffix}/{candidate.name}/{args.steps}/{VARIANT}/seed{seed}",
                    {**machine_info(), "teacher": teacher, "steps": args.steps, "variant": VARIANT, "seed": seed,
                     **row, "command": command})
        print(f"{candidate.name} {VARIANT} seed {seed}: {row}", flush=True)


if __name__ == "__main__":
    main()
