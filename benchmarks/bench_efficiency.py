"""How close the deployed int8 teacher runs to this machine's int8 matrix-multiply rate, by length.

    OMP_NUM_THREADS=1 python benchmarks/bench_efficiency.py --task sst2 --threads 1 2

The task's teacher (``benchmarks/teacher_glue.py``'s ``runs/teacher-<task>``, or ``--model DIR``) is
exported as ``kdbert export --quantize int8`` makes it today (the family's default graph, the int8
method ``auto`` keeps) into ``runs/efficiency/<task>`` (reused on a rerun), then timed by
:func:`kdbert.deploy.onnx_runtime.bench_onnx` at each ``--seq-lens`` length and thread count::

    efficiency (batch 1)  = FLOPs per example / batch-1 latency / rate
    efficiency (batch 32) = FLOPs per example * rows per second at batch 32 / rate

with ``rate`` the FLOP/s of ONNX Runtime on one int8 1024 x 1024 product, measured in the same
process (:func:`~kdbert.deploy.onnx_runtime.matmul_rate`). Results:
``benchmarks/results/efficiency.json`` under ``<task>/<model name>``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import onnxruntime

from common import cpu_model, machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_model
from kdbert.deploy.onnx_runtime import INT8_FILE, REPORT_FILE, bench_onnx


def efficiency_rows(int8_file: Path, seq_lens: list[int], threads: list[int], runs: int) -> list[dict]:
    """One row per (threads, length): latency, throughput and both efficiencies."""
    rows = []
    for n_threads in threads:
        for seq_len in seq_lens:
            bench = bench_onnx(int8_file, seq_len=seq_len, threads=n_threads, runs=runs)
            rate = bench["matmul_gflops"] * 1e9
            rows.append({"threads": n_threads, "seq_len": seq_len, "flops_per_example": bench["flops_per_example"],
                         "latency_median_ms": bench["latency_median_ms"], "throughput": bench["throughput"],
                         "matmul_gflops": bench["matmul_gflops"], "efficiency_batch1": bench["efficiency"],
                         "efficiency_batch32": bench["flops_per_example"] * bench["throughput"] / rate})
            print(f"{n_threads} thread(s), {seq_len} tokens: {bench['latency_median_ms']:.3f} ms, "
                  f"{100 * rows[-1]['efficiency_batch1']:.1f}% at batch 1, "
                  f"{100 * rows[-1]['efficiency_batch32']:.1f}% at batch 32 of {bench['matmul_gflops']:.0f} GFLOP/s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--model", help="the model to export and time (default: the task's teacher)")
    parser.add_argument("--name", default="teacher", help="its name in the results")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--output-dir", default=run_folder("efficiency"))
    args = parser.parse_args()
    model = Path(args.model or run_folder(f"teacher-{args.task}"))
    export = Path(args.output_dir) / args.task / args.name
    if not (export / REPORT_FILE).is_file():
        export_model(model, export, quantize="int8", task=TaskOptions(args.task, data_dir=args.data_dir))
    load_before = os.getloadavg()[0]
    rows = efficiency_rows(export / INT8_FILE, args.seq_lens, args.threads, args.runs)
    save_result("efficiency", f"{args.task}/{args.name}", {
        **machine_info(), "cpu": cpu_model(), "onnxruntime": onnxruntime.__version__, "model": str(model),
        "rows": rows, "runs": args.runs, "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
        "command": f"OMP_NUM_THREADS=1 python benchmarks/bench_efficiency.py --task {args.task} --threads "
                   + " ".join(map(str, args.threads))})


if __name__ == "__main__":
    main()
