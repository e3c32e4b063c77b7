"""SQuAD v1.1 on a CPU budget: the teacher, DistilBERT-style students with and without the "(D)"
step, a TinyBERT student, and their deployed speed at 384 tokens.

    python benchmarks/squad.py                     # every step not recorded yet, in order
    python benchmarks/squad.py --steps teacher kd-3L-D
    python benchmarks/squad.py --steps bench       # export (int8) and time every recorded model
    python benchmarks/squad.py --build-missing --steps teacher tinybert-3L-copied   # folders gone

Only the official dev set is here, so it is split by article (:func:`kdbert.data.squad.load_squad`
with ``--train-articles 38``): the first 38 articles train (their first ``TRAIN_QUESTIONS``
questions), the last 10 (1,988 questions) are scored with the official EM / F1. These figures are
NOT comparable with the papers' (trained on the 87,599 training questions, scored on all 10,570).

Students (3 layers, initialised from the teacher's layers 0, 2, 4 as DistilBERT initialises from
BERT):

``ft-3L``      fine-tuned on the gold spans alone: DistilBERT without the "(D)" step;
``kd-3L-D``    the "(D)" step: start and end logits distilled from the fine-tuned teacher while
               fine-tuning (DistilBERT's ``run_squad_w_distillation`` defaults: alpha 0.5, T 2);
``tinybert-3L`` TinyBERT's task distillation: intermediate (embeddings, attention, hidden; 2
               epochs, the uniform map: teacher layers 2, 4, 6) then prediction layer (2 epochs),
               on the same windows.
``tinybert-3L-pred``  its prediction stage alone (2 epochs): what the intermediate stage adds;
``tinybert-3L-noatt`` both stages without the attention term;
``tinybert-3L-fit``   both stages, W_e / W_h fitted to the first batch (``--projection-init fit``);
``tinybert-3L-copied`` both stages, each student layer matched to the output of the teacher layer it
               was copied from (1-based 1, 3, 5): TinyBERT's default map for such a student since;
``tinybert-3L-copied-last`` the same but the last student layer matched to the teacher's last
               (1, 3, 6), the layer the QA head was fitted on.

``bench`` exports each model to ONNX (fp32 and dynamic int8, EM / F1 of each runtime on the 10
articles) and times PyTorch and ONNX Runtime int8 at 384 tokens, batch 1. Each step is a run folder
under ``runs/squad/<step>`` (resumable; the teacher's window logits shared through
``runs/squad/teacher-cache``) and a record in ``benchmarks/results/squad.json``.
Precision follows ``$KDBERT_MIXED_PRECISION`` (bf16 where recorded so).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import (add_build_missing_option, finished_run, load_results, machine_info, rebuild_missing_steps,
                    save_result)
from paths import DATA_ROOT, run_folder

from kdbert.data.load import TaskOptions
from kdbert.deploy.bench import bench_model
from kdbert.deploy.export import export_model
from kdbert.deploy.onnx_runtime import INT8_FILE, bench_onnx
from kdbert.methods.finetune import FinetuneConfig, finetune
from kdbert.methods.front import distill_task

SQUAD_DIR = str(DATA_ROOT / "squad_v1.1")
TRAIN_ARTICLES, TRAIN_QUESTIONS, MAX_SEQ_LEN, DOC_STRIDE = 38, 4000, 384, 128
STUDENT_LAYERS = "0,2,4"
STUDENTS = {  # step -> distillation options (the teacher, the budget and the layers are added)
    "ft-3L": {"method": "kd", "alpha": 0.0, "epochs": 3, "learning_rate": 1e-4},
    "kd-3L-D": {"method": "kd", "alpha": 0.5, "temperature": 2.0, "epochs": 3, "learning_rate": 1e-4},
    # the uniform map (2, 4, 6) as recorded; since then the default for a student of copied layers
    # is those layers (tinybert-3L-copied)
    "tinybert-3L": {"method": "tinybert", "intermediate_epochs": 2, "epochs": 2, "learning_rate": 1e-4,
                    "layer_map": "uniform"},
    "tinybert-3L-pred": {"method": "tinybert", "skip_intermediate": True, "epochs": 2, "learning_rate": 1e-4},
    "tinybert-3L-noatt": {"method": "tinybert", "intermediate_epochs": 2, "epochs": 2, "learning_rate": 1e-4,
                          "no_attention_loss": True, "layer_map": "uniform"},
    "tinybert-3L-fit": {"method": "tinybert", "intermediate_epochs": 2, "epochs": 2, "learning_rate": 1e-4,
                        "projection_init": "fit", "layer_map": "uniform"},
    "tinybert-3L-copied": {"method": "tinybert", "intermediate_epochs": 2, "epochs": 2, "learning_rate": 1e-4,
                           "layer_map": "explicit", "teacher_layers": "1,3,5"},
    "tinybert-3L-copied-last": {"method": "tinybert", "intermediate_epochs": 2, "epochs": 2, "learning_rate": 1e-4,
                                "layer_map": "explicit", "teacher_layers": "1,3,6"},
}
STEPS = ("teacher", *STUDENTS, "bench")


def task_options() -> TaskOptions:
    return TaskOptions("squad", data_dir=SQUAD_DIR, train_articles=TRAIN_ARTICLES, doc_stride=DOC_STRIDE)


def run_step(step: str, runs: Path) -> dict:
    out = runs / step
    resume = (out / "run_config.json").exists()
    if step == "teacher":
        options = {"epochs": 2, "learning_rate": 1e-4, "batch_size": 32}
        config = FinetuneConfig(output_dir=str(out), max_seq_len=MAX_SEQ_LEN, max_train_examples=TRAIN_QUESTIONS,
                                no_progress=True, **options)
        report = finetune(task_options(), config, resume=resume)
        return {"metrics": report["best_metrics"], "train_seconds": report["train_seconds"], "options": options,
                "output_dir": str(out)}
    teacher = str(runs / "teacher")
    options = {**STUDENTS[step], "teacher": teacher, "student_layers": STUDENT_LAYERS, "max_seq_len": MAX_SEQ_LEN,
               "max_train_examples": TRAIN_QUESTIONS, "batch_size": 32, "no_progress": True,
               "teacher_cache": str(runs / "teacher-cache")}
    report = distill_task(task_options(), options, str(out), resume=resume)
    return {"teacher": teacher, "metrics": report["dev_metrics"], "train_rows": report["train_rows"],
            "options": {k: v for k, v in options.items() if k != "no_progress"},
            "wall_seconds": report["wall_seconds"], "output_dir": str(out)}


def bench(results: dict) -> None:
    """Export every recorded model whose folder is here (fp32 + dynamic int8, scored per runtime) and
    time PyTorch and ONNX Runtime int8 at :data:`MAX_SEQ_LEN` tokens, batch 1 (recorded under
    ``deployed``; a rebuilt model's scores are the rebuilt run's)."""
    for key, record in results.items():
        folder = Path(record["output_dir"])
        if "deployed" in record:
            continue
        if not finished_run(folder):
            print(f"{key}: its folder {folder} is missing; `--build-missing --steps {key}` trains it again")
            continue
        report = export_model(folder, quantize="int8", task=task_options(), max_seq_len=MAX_SEQ_LEN,
                              int8_method="dynamic")
        pytorch = bench_model(str(folder), seq_len=MAX_SEQ_LEN, runs=20)
        int8 = bench_onnx(folder / "onnx" / INT8_FILE, seq_len=MAX_SEQ_LEN, runs=20)
        deployed = {"dev_metrics": report["dev_metrics"], "parity": report["parity"],
                    "params_total": report["params_total"], "flops_per_example": report["flops_per_example"],
                    "pytorch_ms": pytorch["latency_median_ms"], "int8_ms": int8["latency_median_ms"],
                    "threads": int8["threads"]}
        save_result("squad", key, {**record, "deployed": deployed, "deployed_on": machine_info()})
        print(f"{key}: {deployed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", nargs="*", choices=STEPS, help="steps to run (default: every one not recorded)")
    parser.add_argument("--runs-dir", default=run_folder("squad"))
    add_build_missing_option(parser, before="bench")
    args = parser.parse_args()
    if args.build_missing:
        rebuild_missing_steps("squad", args.steps or STEPS, lambda step: run_step(step, Path(args.runs_dir)))
        return
    for step in args.steps or STEPS:
        if step == "bench":
            bench(load_results("squad"))
            continue
        if step in load_results("squad") and not args.steps:
            continue
        result = run_step(step, Path(args.runs_dir))
        save_result("squad", step, {**result, "budget": {"train_articles": TRAIN_ARTICLES,
                                                         "train_questions": TRAIN_QUESTIONS,
                                                         "max_seq_len": MAX_SEQ_LEN, "doc_stride": DOC_STRIDE},
                                    "command": f"python benchmarks/squad.py --steps {step}", **machine_info()})
        print(f"{step}: {result['metrics']}")


if __name__ == "__main__":
    main()
