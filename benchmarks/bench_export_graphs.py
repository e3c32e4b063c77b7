"""Which ONNX graph deploys fastest: `kdbert export --graph dynamo|torchscript|fused` of the same
models, timed side by side in ONNX Runtime fp32 and int8 at batch 1 over a task's dev rows.

    OMP_NUM_THREADS=1 python benchmarks/bench_export_graphs.py --task sst2 --threads 1

Each model (``--model NAME=DIR``; default: the SST-2 teacher of ``benchmarks/teacher_glue.py`` and
the winners of the SST-2 compress searches that exist under ``runs/``) is exported once per graph
with ``--quantize int8 --int8-method dynamic`` and the task (parity, dev scores of PyTorch, ORT fp32 and int8, and the
fused operators go into each ``export_report.json``) under ``runs/export-graphs/<name>/<graph>``
(reused on a rerun). Then every export is timed in ``--passes`` interleaved passes (one pass times
each variant once over the same ``--length-rows`` dev rows, each row at its own length), so a
load that comes and goes hits every variant alike; a variant's figure is the median over passes of
its p50 over rows. The speedup column divides the dynamo graph's latency in the same precision by
the variant's.

Results: ``benchmarks/results/export_graphs.json`` under ``<task>/threads<N>``, with the machine,
date and the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import onnxruntime

from common import cpu_model, machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.export import export_model
from kdbert.deploy.graphs import GRAPHS
from kdbert.deploy.onnx_runtime import FP32_FILE, INT8_FILE, OnnxClassifier
from kdbert.deploy.task_rows import task_feeds, time_feeds

PRECISIONS = {"fp32": FP32_FILE, "int8": INT8_FILE}


def default_models(task: str, runs_dir: Path) -> list[tuple[str, Path]]:
    """(name, folder) of the task's teacher and the winners of its compress searches, where they exist."""
    models = [("teacher", runs_dir / f"teacher-{task}")]
    searches = sorted(runs_dir.glob(f"compress-{task}-x*"))
    if task == "sst2":
        searches.append(runs_dir / "quickstart" / "compress")
    for search in searches:
        report = search / "compress_report.json"
        if report.is_file():
            winner = json.loads(report.read_text())["winner"]
            label = "quickstart" if search.parent.name == "quickstart" else search.name
            models.append((f"{winner['candidate']} ({label})", Path(winner["run"])))
    return [(name, folder) for name, folder in models if (folder / "config.json").is_file()]


def add_model_arguments(parser: argparse.ArgumentParser, passes: int, output: str) -> None:
    """The options this benchmark shares with bench_breakdown.py: task, models, threads, rows, passes."""
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--model", action="append", default=[], metavar="NAME=DIR",
                        help="a model to export and time (repeatable; default: see above)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--length-rows", type=int, default=200)
    parser.add_argument("--passes", type=int, default=passes)
    parser.add_argument("--output-dir", default=run_folder(output))


def chosen_models(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """(name, folder) of every ``--model NAME=DIR``, else :func:`default_models`; exits when there are none."""
    models = ([(spec.split("=", 1)[0], Path(spec.split("=", 1)[1])) for spec in args.model]
              or default_models(args.task, Path(run_folder())))
    if not models:
        sys.exit(f"no models for {args.task} under {run_folder()}; pass --model NAME=DIR")
    return models


def export_folder(out: Path, name: str, graph: str) -> Path:
    """Where model ``name``'s export as ``graph`` goes: ``out/<first word of name>/<graph>``."""
    return out / name.split(" ")[0] / graph


def export_all(models: list[tuple[str, Path]], task: TaskOptions, out: Path) -> dict[str, dict[str, dict]]:
    """Every model exported as every graph its family offers: name -> graph -> export report."""
    reports: dict[str, dict[str, dict]] = {}
    for name, folder in models:
        reports[name] = {}
        for graph in GRAPHS:
            target = export_folder(out, name, graph)
            report_path = target / "export_report.json"
            if report_path.is_file() and json.loads(report_path.read_text())["graph"]["requested"] == graph:
                reports[name][graph] = json.loads(report_path.read_text())
                continue
            try:
                reports[name][graph] = export_model(folder, target, quantize="int8", task=task, graph=graph,
                                                      int8_method="dynamic")
            except Exception as err:  # a graph the family does not offer: recorded, not timed
                print(f"{name} {graph}: {err}", file=sys.stderr)
        print(f"exported {name}: {', '.join(reports[name])}", flush=True)
    return reports


def time_all(models: list[tuple[str, Path]], reports: dict, task: TaskOptions, out: Path, threads: int,
             rows: int, passes: int) -> dict[str, dict[str, dict]]:
    """Interleaved timing (module doc): name -> graph -> precision -> figures."""
    data = load_task(task)
    sessions, feeds = {}, {}
    for name, _ in models:
        for graph in reports[name]:
            for precision, file in PRECISIONS.items():
                sessions[name, graph, precision] = OnnxClassifier(export_folder(out, name, graph) / file, threads)
        first = sessions[name, next(iter(reports[name])), "fp32"]
        spec = first.input_spec()
        max_seq_len = min(data.spec.max_seq_len, spec.max_positions or data.spec.max_seq_len)
        feeds[name] = task_feeds(first.family, first.encoder, spec, data, max_seq_len, rows)
    per_pass: dict[tuple, list[dict]] = {key: [] for key in sessions}
    for index in range(passes):
        for key, classifier in sessions.items():
            per_pass[key].append(time_feeds(lambda feed: classifier.session.run(None, feed), feeds[key[0]]))
        print(f"pass {index + 1}/{passes} timed", flush=True)
    timings: dict[str, dict[str, dict]] = {}
    for (name, graph, precision), figures in per_pass.items():
        timings.setdefault(name, {}).setdefault(graph, {})[precision] = {
            "latency_real_p50_ms": statistics.median(f["latency_real_p50_ms"] for f in figures),
            "latency_real_p90_ms": statistics.median(f["latency_real_p90_ms"] for f in figures),
            "pass_p50s_ms": [f["latency_real_p50_ms"] for f in figures],
            "real_length_p50": figures[0]["real_length_p50"]}
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, passes=5, output="export-graphs")
    args = parser.parse_args()
    models = chosen_models(args)
    task = TaskOptions(args.task, data_dir=args.data_dir)
    out = Path(args.output_dir) / args.task
    load_before = os.getloadavg()[0]
    reports = export_all(models, task, out)
    failed = [name for name, _ in models if not reports[name]]
    if failed:
        raise SystemExit(f"--model {', '.join(failed)}: no graph exported (the reasons above); nothing timed")
    timings = time_all(models, reports, task, out, args.threads, args.length_rows, args.passes)
    result = {
        **machine_info(), "cpu": cpu_model(), "onnxruntime": onnxruntime.__version__,
        "command": "OMP_NUM_THREADS=1 python benchmarks/bench_export_graphs.py " + " ".join(sys.argv[1:]),
        "threads": args.threads, "length_rows": args.length_rows, "passes": args.passes,
        "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
        "models": {name: {graph: {"graph": report["graph"], "dev_metrics": report["dev_metrics"],
                                  "parity": report["parity"], "files": report["files"],
                                  "timing": timings[name][graph]}
                          for graph, report in reports[name].items()} for name, _ in models},
    }
    save_result("export_graphs", f"{args.task}/threads{args.threads}", result)
    for name, graphs in result["models"].items():
        for graph, row in graphs.items():
            print(f"{name:40s} {graph:12s} " + "  ".join(
                f"{p} {row['timing'][p]['latency_real_p50_ms']:.3f} ms" for p in PRECISIONS))


if __name__ == "__main__":
    main()
