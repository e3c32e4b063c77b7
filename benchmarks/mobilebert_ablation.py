"""MobileBERT knowledge-transfer ablation: progressive vs joint vs auxiliary at the same total steps.

    python benchmarks/mobilebert_ablation.py --seeds 42 --tasks mrpc

1. The teacher's MLM head: ``kdbert mlm-head`` on ``--teacher`` (default the packaged teacher;
   head only, ``--mlm-steps`` 100 steps of 16 sequences, ``--mlm-unfreeze`` 0 top layers trained
   with it; ``<runs>/mlm-mb``), skipped when the folder exists. ``--mlm-only`` stops after it, so
   that a driver fits it once before running strategies side by side.
2. For each strategy and seed, ``kdbert distill general --method mobilebert`` of a
   ``mobilebert-matched`` student (6 layers, inter-block 384 = the teacher's width, 12 heads) on
   ``--corpus`` (default the shared Wikipedia sample): ``--layer-steps`` per layer +
   ``--pretrain-steps`` of pre-training distillation, so every strategy takes 6 x layer_steps +
   pretrain_steps optimiser steps of ``--batch-size`` sequences of 64 tokens
   (``<runs>/mb-<strategy>-s<seed>``).
3. Each student, and a ``none`` row (the same preset with its embedding layer fitted to the teacher's and no
   general distillation), fine-tuned on each task with ``kdbert finetune`` (plain fine-tuning, the
   paper's GLUE protocol; ``kdbert distill task --method mobilebert --alpha 0`` trains the same loss)
   for ``--finetune-steps`` steps of ``--finetune-batch-size`` (``<runs>/mb-<strategy>-s<seed>-<task>``).
4. What general distillation itself reached, on held-out text (the SST-2 dev sentences of
   ``--data-dir``, never seen in the corpus stage; 15 % of their tokens masked once with a fixed
   seed): the student's masked-token top-1 accuracy and cross-entropy (the teacher's beside them)
   and the feature-map distance of the last layer to the teacher's (``feature_map_mse``).

``<runs>`` is ``--runs-dir`` (default ``runs``). The defaults give the commands of the CPU rows
recorded on 2026-11-23 exactly (in float32, the benchmarks' default; ``--mixed-precision bf16`` for bf16).
``--name`` records another budget beside them (keys ``<name>/<strategy>/s<seed>/<task>``), e.g. the
longer progressive student of ``benchmarks/distill_glue.py``'s ``mobilebert-long-*`` variants::

    python benchmarks/mobilebert_ablation.py --name cpu-long --strategies progressive --tasks sst2 \
        --runs-dir runs/mb-cpu --layer-steps 150 --pretrain-steps 300 --batch-size 32 --sequences 48000 \
        --save-every 50 --finetune-steps 500 --finetune-batch-size 32 --mixed-precision bf16

Runs resume when interrupted (rerun the same command). Results:
``benchmarks/results/mobilebert_ablation.json``, or ``$KDBERT_RESULTS_DIR`` (dev metrics, last
training terms, wall times, machine, date and the commands).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from common import machine_info, save_result
from paths import CORPUS, GLUE_DIR, run_folder

from kdbert.core import transfer_losses as losses
from kdbert.cli import main as kdbert_main

STRATEGIES = ("progressive", "joint", "auxiliary")


def run(argv: list[str], out: Path, done: str) -> None:
    """``kdbert argv`` unless ``out/done`` exists; resumes a run left in ``out``."""
    if (out / done).exists():
        return
    resume = ["--resume"] if (out / "run_config.json").exists() else []
    if kdbert_main(argv + resume) != 0:
        sys.exit(f"failed: kdbert {' '.join(argv)}")


def mlm_dir(args) -> str:
    """The teacher with its fitted MLM head: the teacher of general distillation."""
    return f"{args.runs_dir}/mlm-mb"


def mlm_head_argv(args) -> list[str]:
    encoder = [] if args.teacher == "default" else ["--encoder", args.teacher]
    return ["mlm-head", *encoder, "--corpus", args.corpus, "--output-dir", mlm_dir(args), "--unfreeze-top-layers",
            str(args.mlm_unfreeze), "--steps", str(args.mlm_steps), "--batch-size", "16", "--eval-sequences", "64"]


def general_argv(strategy: str, seed: int, args) -> list[str]:
    return ["distill", "general", "--method", "mobilebert", "--strategy", strategy, "--teacher", mlm_dir(args),
            "--student", "mobilebert-matched", "--corpus", args.corpus, "--max-sequences", str(args.sequences),
            "--max-seq-len", "64", "--batch-size", str(args.batch_size), "--layer-steps", str(args.layer_steps),
            "--pretrain-steps", str(args.pretrain_steps), "--learning-rate", str(args.learning_rate),
            "--save-every", str(args.save_every), "--seed", str(seed),
            "--output-dir", f"{args.runs_dir}/mb-{strategy}-s{seed}", "--no-progress", *precision_argv(args)]


def precision_argv(args) -> list[str]:
    return [] if args.mixed_precision is None else ["--mixed-precision", args.mixed_precision]


def finetune_argv(student: Path, task: str, seed: int, args) -> list[str]:
    return ["finetune", "--task", task, "--data-dir", args.data_dir, "--model", str(student), "--max-steps",
            str(args.finetune_steps), "--batch-size", str(args.finetune_batch_size), "--learning-rate", "1e-4",
            "--seed", str(seed), "--output-dir", f"{student}-{task}", "--no-progress", *precision_argv(args)]


def untrained_student(seed: int, args) -> Path:
    """``mobilebert-matched`` with its embedding layer fitted to the teacher's, no general distillation."""
    from kdbert.families.mobilebert import build_mobilebert, init_from_teacher, mobilebert_config

    out = Path(f"{args.runs_dir}/mb-none-s{seed}")
    if not (out / "config.json").exists():
        teacher = AutoModelForMaskedLM.from_pretrained(mlm_dir(args))
        student = build_mobilebert(mobilebert_config("mobilebert-matched", teacher.config), "masked-lm", seed)
        init_from_teacher(student, teacher)
        student.save_pretrained(out)
        AutoTokenizer.from_pretrained(mlm_dir(args)).save_pretrained(out)
    return out


@torch.no_grad()
def held_out(student_dir: Path, teacher, batches: list[dict]) -> dict:
    """Masked-token top-1 / cross-entropy of a student and its last-layer feature-map distance to the teacher."""
    student = AutoModelForMaskedLM.from_pretrained(student_dir).eval()
    hits = total = 0
    cross_entropy = distance = 0.0
    for batch in batches:
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        s = student(**inputs, output_hidden_states=True)
        t = teacher(**inputs, output_hidden_states=True)
        selected = batch["labels"] != -100
        hits += int((s.logits[selected].argmax(-1) == batch["labels"][selected]).sum())
        total += int(selected.sum())
        cross_entropy += float(torch.nn.functional.cross_entropy(s.logits[selected], batch["labels"][selected],
                                                                 reduction="sum"))
        distance += float(losses.feature_map_mse(s.hidden_states[-1], t.hidden_states[-1], batch["attention_mask"],
                                                 "masked-mean")) * len(batch["input_ids"])
    return {"top1": hits / total, "cross_entropy": cross_entropy / total,
            "last_layer_feature_map_mse": distance / sum(len(b["input_ids"]) for b in batches), "masked_tokens": total}


def held_out_batches(tokenizer, data_dir: str) -> list[dict]:
    from transformers import DataCollatorForLanguageModeling

    rows = (Path(data_dir) / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:257]
    encoded = [tokenizer(row.split("\t")[0], truncation=True, max_length=64)["input_ids"] for row in rows]
    collate = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=1, return_tensors="pt")
    return [collate([{"input_ids": ids} for ids in encoded[i:i + 32]]) for i in range(0, len(encoded), 32)]


def last_terms(report: dict) -> dict:
    """The last logged training terms of each stage."""
    return {stage: {k: round(v, 4) for k, v in records[-1].items() if isinstance(v, float) and k != "lr"}
            for stage, records in report["stage_losses"].items()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES + ("none",), default=list(STRATEGIES) + ["none"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument("--tasks", nargs="+", default=["mrpc"])
    parser.add_argument("--layer-steps", type=int, default=10)
    parser.add_argument("--pretrain-steps", type=int, default=40)
    parser.add_argument("--sequences", type=int, default=1200, help="packed corpus sequences of 64 tokens at most")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--batch-size", type=int, default=8, help="general distillation: sequences per step")
    parser.add_argument("--save-every", type=int, default=20, help="general distillation: checkpoint every N steps")
    parser.add_argument("--finetune-steps", type=int, default=120)
    parser.add_argument("--finetune-batch-size", type=int, default=16)
    parser.add_argument("--runs-dir", default=run_folder(), help="where the MLM head, students and fine-tuned runs go")
    parser.add_argument("--corpus", default=CORPUS, help="corpus of the MLM head and of general distillation")
    parser.add_argument("--data-dir", default=GLUE_DIR, help="GLUE root (fine-tuning and the SST-2 held-out text)")
    parser.add_argument("--teacher", default="default",
                        help="encoder whose MLM head is fitted, the teacher of general distillation "
                             "(default: the packaged one)")
    parser.add_argument("--mlm-steps", type=int, default=100, help="MLM head: optimiser steps of 16 sequences")
    parser.add_argument("--mlm-unfreeze", type=int, default=0, help="MLM head: top encoder layers trained with it")
    parser.add_argument("--mlm-only", action="store_true", help="fit and record the MLM head, then stop")
    parser.add_argument("--name", help="record under <name>/... (a budget other than the default rows')")
    parser.add_argument("--mixed-precision", choices=["no", "bf16"],
                        help="precision of every run (default: float32, as every benchmark unless "
                             "$KDBERT_MIXED_PRECISION says otherwise)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    teacher_dir = mlm_dir(args)
    mlm_head = mlm_head_argv(args)
    run(mlm_head, Path(teacher_dir), "config.json")
    head = json.loads((Path(teacher_dir) / "mlm_head_report.json").read_text())
    save_result("mobilebert_ablation", f"{args.name}/teacher_mlm_head" if args.name else "teacher_mlm_head", {
        **{k: head[k] for k in ("steps", "batch_size", "unfreeze_top_layers", "top1", "top15", "wall_time_s")},
        "command": "kdbert " + " ".join(mlm_head), **machine_info()})
    if args.mlm_only:
        return
    teacher = AutoModelForMaskedLM.from_pretrained(teacher_dir).eval()
    batches = held_out_batches(AutoTokenizer.from_pretrained(teacher_dir), args.data_dir)
    reference = held_out(Path(teacher_dir), teacher, batches)
    for seed in args.seeds:
        for strategy in args.strategies:
            general_report, command = None, None
            if strategy == "none":
                student = untrained_student(seed, args)
            else:
                argv = general_argv(strategy, seed, args)
                student = Path(argv[argv.index("--output-dir") + 1])
                run(argv, student, "general_report.json")
                general_report = json.loads((student / "general_report.json").read_text())
                command = "kdbert " + " ".join(argv)
            for task in args.tasks:
                argv = finetune_argv(student, task, seed, args)
                out = Path(argv[argv.index("--output-dir") + 1])
                run(argv, out, "train_report.json")
                train = json.loads((out / "train_report.json").read_text())
                result = {"strategy": strategy, "seed": seed, "task": task, "dev_metrics": train["best_metrics"],
                          "finetune_seconds": train["train_seconds"], "finetune_command": "kdbert " + " ".join(argv),
                          "general_command": command, "held_out": held_out(student, teacher, batches),
                          "settings": {k: getattr(args, k) for k in (
                              "layer_steps", "pretrain_steps", "sequences", "learning_rate", "batch_size",
                              "finetune_steps", "finetune_batch_size")},
                          "budget": args.name or "cpu", "precision": train["runtime"]["mixed_precision"],
                          "teacher_held_out": reference, **machine_info()}
                if general_report is not None:
                    result.update(general_steps=general_report["total_steps"],
                                  general_seconds=general_report["wall_seconds"],
                                  stage_table=general_report["stage_table"], last_terms=last_terms(general_report),
                                  embedding_distinctness=general_report.get("embedding_distinctness"))
                key = f"{strategy}/s{seed}/{task}"
                save_result("mobilebert_ablation", f"{args.name}/{key}" if args.name else key, result)
                print(strategy, seed, task, train["best_metrics"])


if __name__ == "__main__":
    main()
