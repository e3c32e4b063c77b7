"""The TinyBERT augmentation comparison on whole training sets, built and run on one GPU.

    python benchmarks/augmentation_gpu.py --results-dir benchmarks/results/gpu-h100 --runs-dir runs/gpu \\
        --jobs 12 --deadline 540

The CPU rows of 2026-11-22 compared ``tinybert-ws-general-task`` (all rows of each training set)
with ``tinybert-ws-general-task-aug`` trained on a file augmented from its first 1000-4000 rows.
This driver rebuilds everything those rows depend on and reruns both on the same rows, all on
the same GPU so that the two rows share numerics:

1. the MLM head for augmentation (``bench_mlm_head.py --unfreeze 2``, ``<runs>/mlm-k2``);
2. the general student from weight selection (``general_distill.py --method tinybert-ws``);
3. the fine-tuned teachers (``teacher_glue.py --budget cpu``);
4. the augmented files from the whole training sets (``augment_glue.py --rows all``; float32),
   and whether they depend on the batch size (``augment_batch_invariance.py`` on 200 rows of
   RTE and MRPC);
5. the rows ``tinybert-ws-general-task``, ``tinybert-ws-general-task-aug`` and
   ``tinybert-ws-general-task-aug-x4`` (``distill_glue.py --budget cpu --aug-rows all``) on
   CoLA, MRPC, STS-B and RTE for ``--seeds``, with the per-task budgets of the CPU rows
   (``TASK_BUDGETS``).

Each step is one process running the script named; up to ``--jobs`` run at once (these models
leave a GPU mostly idle, so runs side by side cost little each), a step starts when the steps it
needs have finished, and a step whose result is already in ``--results-dir`` is skipped. Every
step but the MLM head (a short fit that starts over) resumes: rerunning the driver continues an
interrupted one. ``--deadline SECONDS`` stops
starting steps when that much time has passed and ends the running ones (they resume from their
last checkpoint next time), so that an outer time limit never cuts a results file in half.
Results go to ``--results-dir`` (not ``benchmarks/results``: other numerics, other rows);
logs and the state of every step to ``<runs>/logs``. ``kdbert mlm-head`` fits on the CPU (it has
no device option): that step gets every core, the others one each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from paths import CORPUS, GLUE_DIR, WORD_VECTORS, run_folder
from step_runner import TASK_BUDGETS, Step, run

HERE = Path(__file__).resolve().parent
TASKS = ("cola", "mrpc", "stsb", "rte")
VARIANTS = ("tinybert-ws-general-task", "tinybert-ws-general-task-aug", "tinybert-ws-general-task-aug-x4")


def plan(args) -> list[Step]:
    """Every step of the comparison, in the order they should start."""
    runs, py = args.runs_dir, [sys.executable]
    steps = [Step("mlm", py + [str(HERE / "bench_mlm_head.py"), "--unfreeze", "2", "--steps", str(args.mlm_steps),
                               "--corpus", args.corpus,
                               "--runs-dir", runs, "--encoder", args.teacher], result=("mlm_head", "unfreeze2"),
                  threads=os.cpu_count() or 1),  # kdbert mlm-head fits on the CPU
             Step("general", py + [str(HERE / "general_distill.py"), "--method", "tinybert-ws", "--corpus",
                                   args.corpus, "--runs-dir", runs, "--teacher", args.teacher],
                  result=("general", "tinybert-ws"))]
    for task in args.tasks:
        steps.append(Step(f"teacher-{task}", py + [str(HERE / "teacher_glue.py"), "--budget", "cpu", "--tasks", task,
                                                   "--data-dir", args.data_dir, "--runs-dir", runs,
                                                   "--model", args.teacher], result=("teacher_glue", f"{task}/cpu")))
    for task in args.tasks:
        steps.append(Step(f"aug-{task}", py + [str(HERE / "augment_glue.py"), "--tasks", task, "--rows", "all",
                                               "--data-dir", args.data_dir, "--mlm", f"{runs}/mlm-k2",
                                               "--runs-dir", runs, "--word-vectors", args.word_vectors,
                                               "--batch-size", str(args.aug_batch_size),
                                               "--batch-tokens", str(args.aug_batch_tokens)],
                          needs=["mlm"], result=("augment_glue", f"{task}/all")))
    for task in ("rte", "mrpc"):  # does the file depend on the batch size? (float32, the real MLM head)
        steps.append(Step(f"invariance-{task}", py + [str(HERE / "augment_batch_invariance.py"), f"{runs}/mlm-k2",
                                                      "--task", task, "--rows", "200", "--data-dir", args.data_dir,
                                                      "--word-vectors", args.word_vectors],
                          needs=["mlm"], result=("augment_batch_invariance", f"{task}/cuda")))
    for variant in args.variants:
        for seed in args.seeds:
            for task in args.tasks:
                needs = ["general", f"teacher-{task}"] + ([f"aug-{task}"] if "-aug" in variant else [])
                steps.append(Step(f"{task}-{variant}-s{seed}",
                                  py + [str(HERE / "distill_glue.py"), "--task", task, "--budget", "cpu",
                                        "--variants", variant, "--seeds", str(seed), "--data-dir", args.data_dir,
                                        "--runs-dir", runs, "--general-ws-student", f"{runs}/general-tinybert4-ws",
                                        "--aug-rows", "all", *TASK_BUDGETS[task]],
                                  needs=needs, result=("distill", f"{task}/{variant}/cpu/seed{seed}")))
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--word-vectors", default=WORD_VECTORS)
    parser.add_argument("--teacher", default="default", help="pre-trained teacher (default: the packaged one)")
    parser.add_argument("--runs-dir", default=run_folder("gpu"))
    parser.add_argument("--results-dir", required=True,
                        help="where results are recorded (e.g. benchmarks/results/gpu-h100; never benchmarks/results)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--jobs", type=int, default=12, help="steps running at once")
    parser.add_argument("--deadline", type=float, default=float("inf"),
                        help="seconds after which no step starts and running ones are stopped (resumable)")
    parser.add_argument("--aug-batch-size", type=int, default=512, help="mask queries per MLM call")
    parser.add_argument("--aug-batch-tokens", type=int, default=65536, help="padded tokens per MLM call")
    parser.add_argument("--mlm-steps", type=int, default=300, help="MLM head steps (fewer only for a smoke test)")
    args = parser.parse_args()
    results_dir = Path(args.results_dir).resolve()
    if results_dir == (HERE / "results").resolve():
        sys.exit("--results-dir must not be benchmarks/results: these rows are measured on other hardware")
    src = str(HERE.parent / "src")
    env = {**os.environ, "KDBERT_RESULTS_DIR": str(results_dir), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    steps = plan(args)
    states = run(steps, results_dir, Path(args.runs_dir) / "logs", args.jobs, args.deadline, env)
    for name, state in states.items():
        print(f"{name}: {state}")
    (Path(args.runs_dir) / "logs" / "steps.json").write_text(json.dumps(states, indent=2))


if __name__ == "__main__":
    main()
