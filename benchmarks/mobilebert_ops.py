"""MobileBERT on CPU: size and FLOPs of the presets, and the paper's operational optimisations.

    python benchmarks/mobilebert_ops.py --threads 2

1. Parameters and FLOPs (per example, sequence length 128, ``kdbert.deploy.bench`` counting) of every
   preset in ``kdbert.families.mobilebert`` and of the packaged teacher, as sequence classifiers
   (2 labels). The paper's counts (Tables 1 and 4) are shown beside them.
2. Latency of the teacher-matched student (``mobilebert-matched``: 6 layers, inter-block 384,
   intra-block 96, 12 heads) with NoNorm or LayerNorm and relu or gelu, all four combinations,
   at batch 1 and batch 32, against the teacher. This is the paper's table of operational
   optimisations (measured there on a Pixel 4 phone: LayerNorm & gelu 192 ms, LayerNorm & relu
   167 ms, NoNorm & gelu 92 ms, NoNorm & relu 62 ms) on this machine's CPU, random weights.

Latencies are only meaningful on an otherwise idle machine: each row records the 1-minute load
average before and after its measurement. The variants are timed in interleaved rounds, so a load
that changes during the run affects them alike (their ratios survive better than their values). Results: ``benchmarks/results/mobilebert_ops.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from common import machine_info, save_result

from kdbert.deploy.bench import count_flops, count_parameters, measure_latency
from kdbert.core.loading import default_model_path
from kdbert.families.mobilebert import (
    PAPER_PARAMETERS,
    PRESET_NAMES,
    build_mobilebert,
    describe,
    mobilebert_config,
)

# The paper's operational-optimisation variants: (normalization_type, hidden_act).
VARIANTS = {
    "nonorm-relu": ("no_norm", "relu"),
    "nonorm-gelu": ("no_norm", "gelu"),
    "layernorm-relu": ("layer_norm", "relu"),
    "layernorm-gelu": ("layer_norm", "gelu"),
}
PAPER_FLOPS = {"mobilebert": 5.7e9, "mobilebert-tiny": 3.1e9}
PAPER_LATENCY_MS = {"nonorm-relu": 62, "nonorm-gelu": 92, "layernorm-relu": 167, "layernorm-gelu": 192}


def load_teacher():
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return AutoModelForSequenceClassification.from_pretrained(default_model_path(), num_labels=2)


def size_rows(seq_len: int) -> list[dict]:
    teacher = load_teacher()
    rows = [{"name": "teacher (all-MiniLM-L6-v2)", "shape": "BERT, 6 layers, hidden 384, 12 heads",
             **count_parameters(teacher), "flops_per_example": count_flops(teacher, seq_len)}]
    for preset in PRESET_NAMES:
        config = mobilebert_config(preset, teacher.config if "matched" in preset else None)
        model = build_mobilebert(config)
        rows.append({"name": preset, "shape": describe(config), **count_parameters(model),
                     "flops_per_example": count_flops(model, seq_len),
                     "paper_params": PAPER_PARAMETERS.get(preset), "paper_flops": PAPER_FLOPS.get(preset)})
        del model
    return rows


def interleaved_latency(models: dict, seq_len: int, batch_size: int, threads: int, runs: int,
                        rounds: int) -> dict[str, dict]:
    """Median batch latency per model, measured in ``rounds`` interleaved rounds.

    Each round times every model in turn (``kdbert.deploy.bench.measure_latency``, one warm-up and
    runs / rounds timed passes), so a change in the machine's load between rounds hits all
    models alike. Reported: the median and the minimum of the round medians.
    """
    per_round = max(1, runs // rounds)
    medians: dict[str, list[float]] = {name: [] for name in models}
    load_before = os.getloadavg()[0]
    for _ in range(rounds):
        for name, model in models.items():
            latency = measure_latency(model, seq_len, batch_size, warmup=1, runs=per_round, threads=threads)
            medians[name].append(latency["median_ms"])
    load_after = os.getloadavg()[0]
    return {name: {"name": name, "batch_size": batch_size, "seq_len": seq_len, "threads": threads,
                   "median_ms": statistics.median(values), "min_round_ms": min(values),
                   "round_medians_ms": values, "runs_per_round": per_round, "rounds": rounds,
                   "load_before": load_before, "load_after": load_after}
            for name, values in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--runs", type=int, default=30, help="timed runs at batch 1 (a third of them at batch 32)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds the runs are split into")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--parts", nargs="+", choices=("sizes", "latency"), default=["sizes", "latency"])
    args = parser.parse_args()
    command = "python benchmarks/mobilebert_ops.py " + " ".join(
        [f"--threads {args.threads}", f"--seq-len {args.seq_len}", f"--runs {args.runs}", f"--rounds {args.rounds}",
         "--batch-sizes " + " ".join(map(str, args.batch_sizes)), "--parts " + " ".join(args.parts)])
    torch.set_num_threads(args.threads)
    info = machine_info()

    if "sizes" in args.parts:
        for row in size_rows(args.seq_len):
            save_result("mobilebert_ops", f"size/{row['name']}", {**row, **info, "command": command})
            print(f"{row['name']:<28} {row['total'] / 1e6:7.2f}M params  {row['flops_per_example'] / 1e9:6.2f} GFLOPs")

    if "latency" not in args.parts:
        return
    teacher = load_teacher()
    models = {"teacher": teacher}
    for variant, (norm, act) in VARIANTS.items():
        config = mobilebert_config("mobilebert-matched", teacher.config, normalization_type=norm, hidden_act=act)
        models[variant] = build_mobilebert(config)
    for batch_size in args.batch_sizes:
        runs = args.runs if batch_size == 1 else max(args.rounds, args.runs // 3)
        rows = interleaved_latency(models, args.seq_len, batch_size, args.threads, runs, args.rounds)
        for name, row in rows.items():
            row.update(info, command=command, paper_ms=PAPER_LATENCY_MS.get(name),
                       speedup_vs_layernorm_gelu=rows["layernorm-gelu"]["median_ms"] / row["median_ms"])
            save_result("mobilebert_ops", f"latency/{name}/b{batch_size}/seq{args.seq_len}", row)
            print(f"{name:<15} batch {batch_size:>2}: {row['median_ms']:8.2f} ms (min round {row['min_round_ms']:.2f}), "
                  f"{row['speedup_vs_layernorm_gelu']:.2f}x vs layernorm-gelu, "
                  f"load {row['load_before']:.1f} -> {row['load_after']:.1f}")

if __name__ == "__main__":
    main()
