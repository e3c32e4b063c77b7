"""Deployment: PyTorch fp32 vs ONNX Runtime fp32 vs ONNX Runtime int8 for the teacher and students.

    python benchmarks/bench_deploy.py --task sst2 --threads 1
    python benchmarks/bench_deploy.py --task sst2 --threads 2 --runs 100   # timings on a quiet machine

Each model (``--model NAME=DIR[=TEACHER_NAME]``; default: the SST-2 models of
``benchmarks/teacher_glue.py``, ``benchmarks/distill_glue.py`` and ``benchmarks/bench_quickstart.py``
that exist under ``runs/``) is exported once with ``kdbert export --quantize int8`` (parity and
dev scores of PyTorch, ORT fp32 and ORT int8 go into its ``onnx/export_report.json``), then timed
in the three runtimes with ``kdbert bench`` (batch-1 latency p50/p90, batch-32 throughput, size,
efficiency). Rerunning re-times every model and keeps the exports; ``--reexport`` redoes them.
``--shape tinybert4`` adds a student preset's architecture with random weights: its speed, where
no trained student of that shape exists yet (its row has no dev score).

Results: ``benchmarks/results/deploy.json``, one record per model, task and sequence length (a
rerun replaces it), in the record format of ``kdbert report --results`` plus the full bench rows, the
machine, date and the 1-minute load average before and after (a load above the thread count
means other jobs shared the cores and the latencies are inflated). ``benchmarks/report.py``
renders them and the Pareto plot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import onnxruntime

from common import cpu_model, machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.deploy.bench import bench_model
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_model

RUNTIMES = {"pytorch": ".", "onnx_fp32": "onnx/model.onnx", "onnx_int8": "onnx/model.int8.onnx"}  # path in a run


def default_models(task: str, runs_dir: Path) -> list[tuple[str, Path, str]]:
    """(name, folder, teacher name) of the benchmark models that exist for ``task``."""
    candidates = [("teacher", runs_dir / f"teacher-{task}", "teacher"),
                  ("kd (3 layers)", runs_dir / f"distill-{task}-kd-s42", "teacher"),
                  ("pkd-skip (3 layers)", runs_dir / f"distill-{task}-pkd-skip-s42", "teacher"),
                  ("tinybert4 (weight selection, task KD)", runs_dir / f"distill-{task}-tinybert-ws-task-s42",
                   "teacher"),
                  ("distilbert (3 layers)", runs_dir / f"distill-{task}-distilbert-d-s42", "teacher")]
    if task == "sst2":
        candidates.append(("quickstart teacher", runs_dir / "quickstart" / "teacher", "quickstart teacher"))
        search = runs_dir / "quickstart" / "compress" / "compress_report.json"
        if search.is_file():  # the search's winner, as distilled (the run folder named in its report)
            winner = json.loads(search.read_text())["winner"]
            candidates.append((f"quickstart winner ({winner['candidate']})", Path(winner["run"]), "quickstart teacher"))
    return [c for c in candidates if (c[1] / "config.json").is_file() or (c[1] / "onnx" / "model.int8.onnx").is_file()]


def shape_folder(preset: str, teacher: Path, runs_dir: Path) -> Path:
    """``runs_dir/shape-<preset>``: a randomly initialised student preset of ``teacher``'s
    vocabulary with an int8 export, for timing an architecture that has no trained run yet."""
    folder = runs_dir / f"shape-{preset}"
    if not (folder / "onnx" / "export_report.json").is_file():
        from transformers import AutoConfig, AutoTokenizer

        from kdbert.deploy.export import export_classifier
        from kdbert.families.bert import build_student, student_config

        config = AutoConfig.from_pretrained(str(teacher))
        model = build_student(student_config(preset, config, config.num_labels))
        tokenizer = AutoTokenizer.from_pretrained(str(teacher))
        model.save_pretrained(folder)
        export_classifier(model, tokenizer, folder / "onnx", quantize="int8", source=f"preset {preset}")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--runs-dir", default=run_folder())
    parser.add_argument("--model", action="append", default=[],
                        help="NAME=DIR[=TEACHER_NAME] (default: the benchmark models found under --runs-dir)")
    parser.add_argument("--seq-len", type=int, help="default: 64 for single-sentence tasks, 128 for pairs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=50, help="timed batch-1 runs per model and runtime")
    parser.add_argument("--reexport", action="store_true", help="export again even where an export exists")
    parser.add_argument("--shape", action="append", default=[], metavar="PRESET",
                        help="also time a student preset's architecture (random weights: speed only, no dev score), "
                             "e.g. tinybert4")
    parser.add_argument("--runtimes", nargs="+", choices=list(RUNTIMES), default=list(RUNTIMES),
                        help="runtimes to time (onnx_int8 alone needs only each model's onnx/model.int8.onnx and "
                             "onnx/export_report.json: a copy of them times on another machine)")
    args = parser.parse_args()
    task = TaskOptions(args.task, data_dir=args.data_dir)
    models = ([(m.split("=")[0], Path(m.split("=")[1]), (m.split("=") + ["teacher"])[2]) for m in args.model]
              or default_models(args.task, Path(args.runs_dir)))
    if not models:
        sys.exit(f"no models under {args.runs_dir} for {args.task}: run benchmarks/teacher_glue.py first")
    seq_len = args.seq_len or (64 if args.task in ("sst2", "cola") else 128)
    teacher_dir = next(folder for name, folder, teacher in models if name == "teacher")
    models += [(f"{preset} architecture (speed only)", shape_folder(preset, teacher_dir, Path(args.runs_dir)),
                "teacher") for preset in args.shape]
    for name, folder, teacher in models:
        export = folder / "onnx" / "export_report.json"
        speed_only = name.endswith("(speed only)")
        if not speed_only and (args.reexport or not export.is_file()):
            print(f"{name}: exporting {folder} (fp32 + int8, dev parity)")
            export_model(folder, quantize="int8", task=task)
        report = json.loads(export.read_text())
        load_before = os.getloadavg()[0]
        rows = {runtime: bench_model(str(folder / RUNTIMES[runtime]), seq_len=seq_len, threads=args.threads,
                                     runs=args.runs, name=name) for runtime in args.runtimes}
        load_after = os.getloadavg()[0]
        metrics = report["dev_metrics"]
        scores = {key: metrics[runtime]["score"] if metrics else None
                  for key, runtime in (("score", "pytorch"), ("score_onnx_fp32", "onnx_fp32"),
                                       ("score_onnx_int8", "onnx_int8"))}
        record = {
            # `kdbert report` compares every model with the one teacher: the benchmark teacher
            "name": name, "task": args.task, "teacher": name == "teacher", "teacher_name": teacher,
            "run_dir": str(folder), "speed_only": speed_only, **scores,
            "params": report["params_total"], "flops": report["flops_per_example"][str(seq_len)],
            "seq_len": seq_len, "threads": args.threads, "parity": report["parity"],
            **{f"latency_{runtime}_ms": row["latency_median_ms"] for runtime, row in rows.items()},
            "bench": rows, "load_average_1min_before_after": [load_before, load_after],
            "command": f"python benchmarks/bench_deploy.py --task {args.task} --threads {args.threads} --runs {args.runs}"
                       + "".join(f" --shape {preset}" for preset in args.shape)
                       + (f" --runtimes {' '.join(args.runtimes)}" if args.runtimes != list(RUNTIMES) else ""),
            "onnxruntime": onnxruntime.__version__, "cpu_model": cpu_model(), **machine_info(),
        }
        save_result("deploy", f"{args.task}/{name}/seq{seq_len}", record)  # a rerun replaces the timings
        print(f"{name}: " + ", ".join(f"{rt} {row['latency_median_ms']:.2f} ms" for rt, row in rows.items())
              + (f"; dev {record['score']:.2f} -> int8 {record['score_onnx_int8']:.2f}" if metrics else "")
              + f"; load {load_before:.1f}/{load_after:.1f}")


if __name__ == "__main__":
    main()
