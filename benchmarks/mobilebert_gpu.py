"""The MobileBERT measurements at a GPU budget, built and run on one GPU machine.

Here (a machine with ``../shared/data``), build what the GPU machine lacks, at most 64 MiB:

    python benchmarks/gpu_bundle.py --output-dir runs/carry

On the GPU machine (``runs/carry`` carried), rerun until every step is done (each step resumes):

    python benchmarks/mobilebert_gpu.py --data-dir runs/carry/glue_data --corpus runs/carry/corpus.txt.gz \\
        --teacher runs/carry/teacher --results-dir benchmarks/results/gpu-h100 --deadline 540

Records go to ``<results-dir>/mobilebert/`` (a folder of their own: the teachers and distillation
rows that other drivers recorded in ``<results-dir>`` stay apart from these); a machine that
hands back only some folder must copy it out after each command (``cp -r
benchmarks/results/gpu-h100/mobilebert "$OUT"/``) and put it back in the checkout before the next.

Steps (one process each, the script named):

1. ``mlm``: the teacher's MLM head (``mobilebert_ablation.py --mlm-only``, ``--mlm-steps`` 1000 of
   16 sequences, the head only: ``--mlm-unfreeze`` 0 keeps every encoder layer the teacher's own,
   so the feature maps the student learns are those of the encoder the task teachers start from;
   ``<runs>/mlm-mb``): the teacher of general distillation.
2. ``teacher-<task>``: the fine-tuned teachers of CoLA, SST-2, MRPC, STS-B and RTE from
   ``--teacher`` (``teacher_glue.py --budget cpu``).
3. ``ablation-<strategy>-s<seed>``: for each of progressive, joint, auxiliary and ``none`` (no
   general distillation) and each seed, ``mobilebert_ablation.py``: general distillation of a
   ``mobilebert-matched`` student, 6 x ``--layer-steps`` + ``--pretrain-steps`` steps of
   ``--batch-size`` sequences of 64 tokens from at most ``--sequences`` packed sequences, then
   ``--finetune-steps`` of fine-tuning on SST-2 and MRPC (``--ablation-tasks``).
4. ``<task>-<variant>-s<seed>``: ``distill_glue.py --budget cpu --variants mobilebert-task`` (logit KD
   from the task's teacher) and ``mobilebert-finetune`` (gold labels only) from the progressive
   seed-``--general-seed`` student, per task at the budget of the CPU rows (``TASK_BUDGETS``: CoLA
   and STS-B every row, STS-B 3 epochs; otherwise the first 4000 rows, 2 epochs).
5. ``bench-<task>``: ``kdbert bench --model <the mobilebert-task student of the general seed>
   --compare <the task's teacher> --seq-len 128`` (CPU, ``--bench-threads``), once every other step
   is done and one task at a time, recorded in ``mobilebert_bench.json`` under ``<task>/seq<len>``.

Up to ``--jobs`` steps run at once; a step starts when the steps it needs are done, and a step
whose result is recorded is skipped unless a later step still needs a folder it made that is
missing (a fresh machine): then it runs again (teachers with ``--build-missing``, their record
kept; an ablation step records its rows again). ``--deadline SECONDS`` stops starting steps and
ends the running ones (they resume from their last checkpoint next time). Logs and the state of
every step: ``<runs>/logs``. The default budget has not been timed as a whole: on the H100 of the
augmentation rows, teachers took 12-26 s each and one distillation run 20-60 s with 16 runs
side by side; general distillation here is 10,000 steps per strategy and seed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from paths import CORPUS, GLUE_DIR, run_folder
from step_runner import TASK_BUDGETS, Step, is_recorded, run

HERE = Path(__file__).resolve().parent

TASKS = ("cola", "sst2", "mrpc", "stsb", "rte")
STRATEGIES = ("progressive", "joint", "auxiliary", "none")
VARIANTS = ("mobilebert-task", "mobilebert-finetune")
RESULTS_SUBDIR = "mobilebert"


@dataclass
class BuildStep(Step):
    """A :class:`augmentation_gpu.Step` that also names the file (``output``) whose presence means
    the folder it built, which later steps read, is there."""

    output: str | None = None


def plan(args) -> list[BuildStep]:
    """Every step, in the order they should start (the general student the task runs need first)."""
    runs, py = args.runs_dir, [sys.executable]
    places = ["--runs-dir", runs, "--corpus", args.corpus, "--data-dir", args.data_dir, "--teacher", args.teacher,
              "--mlm-steps", str(args.mlm_steps), "--mlm-unfreeze", str(args.mlm_unfreeze)]
    steps = [BuildStep("mlm", py + [str(HERE / "mobilebert_ablation.py"), "--mlm-only", *places],
                       result=("mobilebert_ablation", "teacher_mlm_head"), threads=os.cpu_count() or 1,
                       output=f"{runs}/mlm-mb/config.json")]
    for task in args.tasks:
        steps.append(BuildStep(f"teacher-{task}", py + [str(HERE / "teacher_glue.py"), "--budget", "cpu", "--tasks",
                                                        task, "--data-dir", args.data_dir, "--runs-dir", runs,
                                                        "--model", args.teacher, "--build-missing"],
                               result=("teacher_glue", f"{task}/cpu"), output=f"{runs}/teacher-{task}/metrics.json"))
    general = ("progressive", args.general_seed)
    runs_in_order = [general] + [(s, seed) for seed in args.seeds for s in args.strategies if (s, seed) != general]
    for strategy, seed in runs_in_order:
        steps.append(BuildStep(
            f"ablation-{strategy}-s{seed}",
            py + [str(HERE / "mobilebert_ablation.py"), "--strategies", strategy, "--seeds", str(seed),
                  "--tasks", *args.ablation_tasks, *places, "--layer-steps", str(args.layer_steps),
                  "--pretrain-steps", str(args.pretrain_steps), "--sequences", str(args.sequences),
                  "--learning-rate", str(args.learning_rate), "--batch-size", str(args.batch_size),
                  "--save-every", str(args.save_every), "--finetune-steps", str(args.finetune_steps),
                  "--finetune-batch-size", str(args.finetune_batch_size)],
            needs=["mlm"], result=("mobilebert_ablation", f"{strategy}/s{seed}/{args.ablation_tasks[-1]}"),
            output=f"{runs}/mb-{strategy}-s{seed}/general_report.json" if (strategy, seed) == general else None))
    general_student = f"{runs}/mb-progressive-s{args.general_seed}"
    distill = []
    for seed in args.seeds:
        for task in args.tasks:
            for variant in VARIANTS:
                name = f"{task}-{variant}-s{seed}"
                distill.append(name)
                steps.append(BuildStep(
                    name, py + [str(HERE / "distill_glue.py"), "--task", task, "--budget", "cpu", "--variants", variant,
                                "--seeds", str(seed), "--data-dir", args.data_dir, "--runs-dir", runs,
                                "--mobilebert-general", general_student, *TASK_BUDGETS.get(task, [])],
                    needs=[f"ablation-progressive-s{args.general_seed}", f"teacher-{task}"],
                    result=("distill", f"{task}/{variant}/cpu/seed{seed}"),
                    output=(f"{runs}/distill-{task}-{variant}-s{seed}/config.json"
                            if (variant, seed) == ("mobilebert-task", args.general_seed) else None)))
    previous: list[str] = []
    for task in args.tasks:  # one at a time on a quiet machine: CPU latency
        student = f"{runs}/distill-{task}-mobilebert-task-s{args.general_seed}"
        steps.append(BuildStep(
            f"bench-{task}", py + [str(HERE / "mobilebert_gpu.py"), "bench", "--task", task, "--model", student,
                                   "--compare", f"{runs}/teacher-{task}", "--seq-len", str(args.seq_len),
                                   "--threads", str(args.bench_threads)],
            needs=[f"teacher-{task}", *distill, *previous], result=("mobilebert_bench", f"{task}/seq{args.seq_len}"),
            threads=args.bench_threads))
        previous = [f"bench-{task}"]
    return steps


def reopen(steps: list[BuildStep], results_dir: Path) -> list[str]:
    """Clear ``result`` of each recorded step whose ``output`` is missing while a step that needs it
    still has to run, so that it runs again (a fresh machine); returns their names."""
    pending = {s.name for s in steps if not is_recorded(s, results_dir)}
    reopened = []
    for step in reversed(steps):  # a step comes after what it needs
        if step.name in pending or step.output is None or Path(step.output).exists():
            continue
        if any(step.name in s.needs for s in steps if s.name in pending):
            step.result = None
            pending.add(step.name)
            reopened.append(step.name)
    return reopened[::-1]


def bench(argv: list[str]) -> None:
    """``kdbert bench --model M --compare T --seq-len N --threads K``, recorded under ``<task>/seq<N>``."""
    from common import machine_info, save_result

    from kdbert.cli import main as kdbert_main

    parser = argparse.ArgumentParser(prog="mobilebert_gpu.py bench")
    for name in ("--task", "--model", "--compare"):
        parser.add_argument(name, required=True)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    output = Path(args.model) / f"bench_seq{args.seq_len}.json"
    command = ["bench", "--model", args.model, "--compare", args.compare, "--seq-len", str(args.seq_len),
               "--threads", str(args.threads)]
    if kdbert_main(command + ["--output", str(output)]) != 0:
        sys.exit(f"failed: kdbert {' '.join(command)}")
    teacher, student = json.loads(output.read_text())
    save_result("mobilebert_bench", f"{args.task}/seq{args.seq_len}",
                {"task": args.task, "teacher": teacher, "student": student, "command": "kdbert " + " ".join(command),
                 **machine_info()})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--teacher", default="default", help="pre-trained teacher (default: the packaged one)")
    parser.add_argument("--runs-dir", default=run_folder("gpu-mb"))
    parser.add_argument("--results-dir", required=True,
                        help="machine's results folder (e.g. benchmarks/results/gpu-h100; never benchmarks/results); "
                             f"records go to its {RESULTS_SUBDIR}/")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, help="tasks of the distill runs")
    parser.add_argument("--ablation-tasks", nargs="+", default=["sst2", "mrpc"], choices=TASKS)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--general-seed", type=int, default=42,
                        help="seed of the progressive general student the distill runs start from")
    parser.add_argument("--jobs", type=int, default=16, help="steps running at once")
    parser.add_argument("--deadline", type=float, default=float("inf"),
                        help="seconds after which no step starts and running ones are stopped (resumable)")
    parser.add_argument("--mlm-steps", type=int, default=1000, help="MLM head steps")
    parser.add_argument("--mlm-unfreeze", type=int, default=0,
                        help="top teacher layers trained with the MLM head (0: the head only, the encoder unchanged)")
    parser.add_argument("--layer-steps", type=int, default=1000, help="general distillation: steps per layer")
    parser.add_argument("--pretrain-steps", type=int, default=4000, help="general distillation: MLM-distillation steps")
    parser.add_argument("--sequences", type=int, default=60000, help="general distillation: packed sequences at most")
    parser.add_argument("--learning-rate", type=float, default=3e-4, help="general distillation: learning rate")
    parser.add_argument("--batch-size", type=int, default=32, help="general distillation: sequences per step")
    parser.add_argument("--save-every", type=int, default=500, help="general distillation: checkpoint every N steps")
    parser.add_argument("--finetune-steps", type=int, default=600, help="ablation fine-tuning steps per task")
    parser.add_argument("--finetune-batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128, help="bench: sequence length")
    parser.add_argument("--bench-threads", type=int, default=1, help="bench: CPU threads")
    args = parser.parse_args(argv)
    if "progressive" not in args.strategies or args.general_seed not in args.seeds:
        parser.error(f"the distill runs start from the progressive seed-{args.general_seed} student: keep "
                     "progressive in --strategies and --general-seed in --seeds")
    return args


def main() -> None:
    if sys.argv[1:2] == ["bench"]:
        bench(sys.argv[2:])
        return
    args = parse_args()
    if Path(args.results_dir).resolve() == (HERE / "results").resolve():
        sys.exit("--results-dir must not be benchmarks/results: these rows are measured on other hardware")
    results_dir = Path(args.results_dir).resolve() / RESULTS_SUBDIR
    src = str(HERE.parent / "src")
    env = {**os.environ, "KDBERT_RESULTS_DIR": str(results_dir), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    steps = plan(args)
    for name in reopen(steps, results_dir):
        print(f"{name}: recorded, but a later step needs the folder it made, which is missing: runs again")
    states = run(steps, results_dir, Path(args.runs_dir) / "logs", args.jobs, args.deadline, env)
    for name, state in states.items():
        print(f"{name}: {state}")
    (Path(args.runs_dir) / "logs" / "steps.json").write_text(json.dumps(states, indent=2))
    print(f"records: {results_dir}")


if __name__ == "__main__":
    main()
